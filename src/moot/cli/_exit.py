"""The exit-code contract shared by ``moot run``, ``moot absa``, ``moot arbitrate`` and ``moot bench``.

====  ==========================================================================
code  meaning
====  ==========================================================================
0     complete: the result is written and every model call succeeded
1     a result was written, but the run fell back or had failed calls; the
      result says why (``fallback``, failed turns, ``errors``, failed rulings)
2     usage error: bad input, config or model spec, or a malformed file the user
      gave (the file and field named); nothing was run
3     internal error: a bug in moot
130   interrupted (Ctrl-C or SIGTERM); what finished is kept where a command
      keeps partial results
====  ==========================================================================

A command computes its code from its result with one of the ``for_*``
functions and returns it; ``moot.cli.main`` maps usage errors to 2 and
interrupts to 130. A run is stored with a status that matches its code
(:func:`moot.observe.degraded_status`): ``complete`` for 0, ``fell_back`` for 1
with something done, ``failed`` for 1 when every unit failed (an unreachable
endpoint) and for 3.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the CLI imports these anyway; only the names are needed here
    from ..absa.evaluate import EvalScores
    from ..absa.schemas import FinalResult
    from ..arbitration import ArbitrationResult
    from ..transcript import DebateResult

__all__ = [
    "COMPLETE",
    "DEGRADED",
    "INTERRUPTED",
    "USAGE",
    "for_absa",
    "for_arbitration",
    "for_debate",
    "for_debates",
    "for_eval",
]

COMPLETE = 0
"""The result is complete."""
DEGRADED = 1
"""A result was written, but it fell back or had failed calls."""
USAGE = 2
"""Usage error: nothing was run."""
INTERRUPTED = 130
"""Interrupted by the user or a signal."""


def _code(degraded: bool) -> int:
    return DEGRADED if degraded else COMPLETE


def degraded_debate(result: DebateResult) -> bool:
    """A debate fell back, or at least one of its calls failed (a skipped debate is complete)."""
    return result.degraded


def for_debate(result: DebateResult) -> int:
    """Exit code for one debate result."""
    return _code(degraded_debate(result))


def for_debates(results: Iterable[DebateResult]) -> int:
    """Exit code for a batch of debates: 1 if any of them is degraded."""
    return _code(any(degraded_debate(r) for r in results))


def for_absa(results: Iterable[FinalResult]) -> int:
    """Exit code for ABSA results: 1 if any sentence recorded a failed call."""
    return _code(any(r.errors for r in results))


def for_arbitration(result: ArbitrationResult) -> int:
    """Exit code for an arbitration: 1 if a contradiction was left without a ruling."""
    return _code(any(r.decision is None for r in result.rulings))


def for_eval(scores: Iterable[EvalScores]) -> int:
    """Exit code for an ABSA evaluation: 1 if any sentence of any config failed (it is scored wrong)."""
    return _code(any(s.failed for s in scores))
