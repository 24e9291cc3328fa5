"""Deadlines: one absolute instant passed down (:class:`Deadline`), and a debate's budget.

**One object.** A :class:`Deadline` is an instant on the monotonic clock. The public API
speaks seconds (``timeout_s``); each door converts them once, with
:meth:`Deadline.within`, and passes the object down: a run started under a deadline (an
ABSA sentence's debate, an arbitration's rulings, a bench's units) ends at the earlier of
its own budget and the one it was given, as a nested time limit does. A deadline never
crosses machines: a Ray worker receives the seconds left (:meth:`Deadline.remaining_s`)
and makes its own. Code waits under one with :meth:`Deadline.scope` (an
:func:`asyncio.timeout_at` on the running loop); a ``None`` deadline means no limit.

**A debate's budget**, sized to the models that play it. Every run has a deadline; when
it passes, the run falls back (initial answer or best answer so far) and turns in flight
are kept, marked cancelled. Which budget:

1. An explicit one wins: ``--timeout`` on the CLI, or ``overrides={"timeout": S}``
   (``None`` there means no deadline at all).
2. Remote backends (OpenAI-compatible servers, Anthropic: ``tokens_per_second`` is
   None): the protocol's own ``timeout`` (the seeds' values, e.g. 10 s for ``answer``),
   else :data:`DEFAULT_TIMEOUT_S`.
3. A backend that declares its speed (``local`` measures tokens/s when it loads): the
   larger of the protocol's ``timeout`` and an estimate of one full debate at that
   speed, :func:`local_estimate`. On a 2-core machine the embedded model cannot finish
   the ``answer`` preset in the seed's 10 s, and a default that always falls back would
   make the default command useless.

**A pipeline's budget** (an ABSA sentence: its own stage calls, and a debate between them),
:func:`pipeline_timeout_s`: the two budgets added, each sized as above. Its own calls get
:data:`DEFAULT_TIMEOUT_S` on a remote backend, else the estimate of those calls at the
model's speed (:func:`calls_estimate`); the debate gets the budget it runs under by itself
(:func:`run_timeout_s`). So the debate inside is never squeezed by the pipeline's default,
and a pipeline whose model never answers still ends.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

from .protocol import Protocol

__all__ = [
    "CONSTRAINED_COST",
    "DEFAULT_TIMEOUT_S",
    "Deadline",
    "MARGIN",
    "PROMPT_TOKENS",
    "calls_estimate",
    "local_estimate",
    "pipeline_timeout_s",
    "planned_calls",
    "run_timeout_s",
    "timeout_scope",
]


@dataclass(frozen=True)
class Deadline:
    """An absolute instant on this process's monotonic clock (:func:`time.monotonic`).

    Build one from seconds with :meth:`after` or :meth:`within`, never from a clock value
    read on another machine.

    Attributes:
        at: the instant, in :func:`time.monotonic` seconds.
    """

    at: float

    @classmethod
    def after(cls, timeout_s: float) -> Deadline:
        """The deadline ``timeout_s`` seconds from now."""
        return cls(time.monotonic() + timeout_s)

    @classmethod
    def within(cls, timeout_s: float | None, parent: Deadline | None = None) -> Deadline | None:
        """The earlier of ``timeout_s`` from now and ``parent`` (None for either: no limit from it).

        ``Deadline.within(None, None)`` is None: no deadline at all.
        """
        own = None if timeout_s is None else cls.after(timeout_s)
        if own is None or parent is None:
            return own or parent
        return parent if parent.at <= own.at else own

    def remaining_s(self) -> float:
        """Seconds left (0 once it has passed): what a deadline sent to another process carries."""
        return max(0.0, self.at - time.monotonic())

    def expired(self) -> bool:
        """True once the instant has passed."""
        return time.monotonic() >= self.at

    def scope(self) -> asyncio.Timeout:
        """An :func:`asyncio.timeout_at` that expires at this instant on the running loop.

        The clock is read before the loop's, so the scope never expires before :meth:`expired`
        is true (the loop's clock need not be :func:`time.monotonic`).
        """
        left = self.at - time.monotonic()
        return asyncio.timeout_at(asyncio.get_running_loop().time() + left)


def timeout_scope(deadline: Deadline | None) -> asyncio.Timeout:
    """``deadline.scope()``, or a scope that never expires for ``None``."""
    return asyncio.timeout(None) if deadline is None else deadline.scope()


DEFAULT_TIMEOUT_S = 300.0
"""Seconds, for protocols that set no ``timeout``, on remote backends."""
CONSTRAINED_COST = 2.5
"""Cost of one schema-constrained token relative to a free one (grammar decoding, measured ~2.3x)."""
PROMPT_TOKENS = 800
"""Prompt tokens assumed per call (system prompt, persona, visible turns)."""
PROMPT_COST = 0.5
"""Cost of reading one prompt token relative to generating one (prompts read ~2x faster)."""
MARGIN = 1.5
"""Head room over the estimate: a machine shared with other work, a repair request here and there."""
FLOOR = 30.0
"""No estimated deadline is shorter than this many seconds."""


def planned_calls(protocol: Protocol) -> list[int]:
    """The token cap of every call one full run makes (all rounds, no early stop, no repairs)."""
    per_turn = protocol.max_tokens_per_turn
    calls = [per_turn] * (len(protocol.speakers()) * protocol.rounds)
    if protocol.moderator is not None:
        calls += [protocol.moderator.max_tokens or per_turn] * protocol.rounds
    if protocol.judge is not None:
        calls.append(protocol.judge.max_tokens or per_turn)
    return calls


def calls_estimate(calls: Sequence[int], tokens_per_second: float) -> float:
    """Seconds ``calls`` (their token caps) take one after another at ``tokens_per_second``.

    With :data:`MARGIN`, and at least :data:`FLOOR`.
    """
    work = sum(cap * CONSTRAINED_COST + PROMPT_TOKENS * PROMPT_COST for cap in calls)
    return max(FLOOR, MARGIN * work / max(tokens_per_second, 1e-3))


def local_estimate(protocol: Protocol, tokens_per_second: float) -> float:
    """Seconds one full run takes, calls one after another, at ``tokens_per_second``, with margin."""
    return calls_estimate(planned_calls(protocol), tokens_per_second)


def run_timeout_s(protocol: Protocol, speeds: list[float | None], *, explicit: bool) -> float | None:
    """The budget in seconds (None: none) of one run of ``protocol``; see the module docstring.

    Args:
        protocol: the protocol (its ``timeout`` is the explicit or seed value).
        speeds: the declared tokens/s of each model taking part (None: remote).
        explicit: whether ``protocol.timeout`` was given explicitly by the caller.
    """
    if explicit:
        return protocol.timeout
    known = [s for s in speeds if s is not None]
    if not known:
        return protocol.timeout if protocol.timeout is not None else DEFAULT_TIMEOUT_S
    estimate = local_estimate(protocol, min(known))
    return max(estimate, protocol.timeout or 0.0)


def pipeline_timeout_s(calls: Sequence[int], debate: Protocol | None, speed: float | None) -> float:
    """The default budget in seconds of one pipeline run; see the module docstring.

    Args:
        calls: the token cap of each of the pipeline's own calls (repairs are in the margin).
        debate: the protocol of the debate the run holds, or None for none.
        speed: the model's declared tokens/s (None: remote).
    """
    own = DEFAULT_TIMEOUT_S if speed is None else calls_estimate(calls, speed)
    inner = 0.0 if debate is None else run_timeout_s(debate, [speed], explicit=False) or 0.0
    return own + inner
