"""What ``moot serve`` and ``moot mcp`` run: named protocols, a gate on debates in flight, recorded runs.

Framework-free (plain asyncio): the OpenAI-compatible routes (:mod:`moot.serve.openai_api`) and the
MCP tools (:mod:`moot.serve.mcp_tools`) both call :class:`DebateService`, so a request is the same
run whichever door it came through.

- **Names.** A served model name is ``moot:PRESET`` or ``moot:PRESET@SPEC``: a preset, or a
  protocol file the server was given (``--protocol FILE`` names it by its stem), run on ``SPEC``
  (the server's ``--model`` when none). The ``@`` split is of the served name, at its first ``@``;
  the spec after it is the model spec as ``moot run --model`` takes it, except that it may carry no
  ``?options`` (a caller must not point the server at another endpoint or key variable) and no
  ``local:`` file.
- **The gate.** At most ``max_debates`` debates run at once and ``queue`` more wait for a slot;
  one more is refused with :class:`Busy` (HTTP 429, ``Retry-After`` from the recent debates' mean
  wall time). Once the server drains (SIGTERM), waiting requests and new ones get :class:`Draining`.
- **Recording.** Every debate is a run in the store (``Debate(store=...)``, the recorder moot.app
  attaches), its config noting the door (``serve`` or ``mcp``), the served name, the caller's
  ``user`` and the request's sampling fields. A debate whose caller went away is cancelled and
  awaited: it is recorded ``interrupted``, never left running.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import anyio

from ..app.recorder import recorded_ids, resolve_store
from ..engine import Debate
from ..errors import UsageError
from ..models import Model
from ..models._spec import split_provider
from ..observe import annotate
from ..protocol import load_protocol, presets
from ..transcript import DebateResult, Event, Turn

__all__ = [
    "Busy",
    "DebateOutcome",
    "DebateService",
    "Draining",
    "Reservation",
    "ServeSettings",
    "parse_served_name",
    "turn_text",
]

ResultT = TypeVar("ResultT")

PREFIX = "moot:"
"""Every served model name starts with this."""


class Busy(UsageError):
    """``max_debates`` debates run and the queue is full: come back in ``retry_after_s`` seconds."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Draining(UsageError):
    """The server is shutting down (SIGTERM): it starts no new debate."""


@dataclass
class ServeSettings:
    """How a :class:`DebateService` runs.

    Attributes:
        store: the run store file every request is recorded into.
        model: the model spec a served name without ``@SPEC`` runs on (None: moot's default, ``local``).
        max_debates: debates running at once.
        queue: requests waiting for a slot beyond those (None: as many as ``max_debates``).
        protocols: protocol files the server was given, by the name a request uses.
        view_url: the base URL of ``moot view`` on this store, for each run's link (None: no link).
        door: the name recorded as the door (``serve``, ``mcp``).
    """

    store: Path
    model: str | None = None
    max_debates: int = 4
    queue: int | None = None
    protocols: dict[str, Path] = field(default_factory=dict)
    view_url: str | None = None
    door: str = "serve"


@dataclass
class DebateOutcome:
    """One served debate's end.

    Attributes:
        result: the debate's result (None when it was cancelled before one).
        run_id: the stored run's id (None when nothing was recorded).
        wall_s: seconds from the slot to the end.
    """

    result: DebateResult | None
    run_id: str | None
    wall_s: float


def parse_served_name(name: str) -> tuple[str, str | None]:
    """``"moot:answer@openai:gpt-4o-mini"`` -> ``("answer", "openai:gpt-4o-mini")``; no ``@``: spec None.

    Split at the first ``@`` only: what follows is the model spec, whole.

    Raises:
        UsageError: not ``moot:NAME[@SPEC]``, or an empty part.
    """
    if not isinstance(name, str) or not name.startswith(PREFIX):
        raise UsageError(f"model {name!r} is not a moot model: use moot:PRESET or moot:PRESET@PROVIDER:MODEL")
    preset, at, spec = name[len(PREFIX) :].partition("@")
    preset = preset.strip()
    if not preset:
        raise UsageError(f"model {name!r} names no preset: use moot:PRESET, e.g. moot:answer")
    if at and not spec.strip():
        raise UsageError(f"model {name!r} has an empty model spec after '@'")
    return preset, (spec.strip() if at else None)


def check_caller_spec(spec: str) -> None:
    """Refuse a model spec a caller may not choose: options (``?base_url=``...) or a ``local:`` file.

    A caller who could set ``base_url`` and ``api_key_env`` would have the server send one of its
    keys to any host; a ``local:PATH`` would have it open any file. The server's own ``--model``
    may carry both.

    Raises:
        UsageError: which, and why.
    """
    if "?" in spec:
        raise UsageError(
            f"model spec {spec!r} carries options: a request may name PROVIDER:MODEL only "
            "(the server's --model sets endpoints and keys)"
        )
    provider, rest = split_provider(spec)
    if provider == "local" and rest:
        raise UsageError(f"model spec {spec!r}: a request may name the bundled model as 'local' only")


def turn_text(turn: Turn, names: Mapping[str, str]) -> str:
    """One finished turn as the text a reader follows: who, which round, what they said (or why not)."""
    who = names.get(turn.speaker, turn.speaker)
    label = (
        f"{who}, round {turn.round}" if turn.phase == "turn" else f"{who} ({turn.phase}, round {turn.round})"
    )
    if turn.cancelled:
        return f"[{label}] (cancelled)\n\n"
    if turn.error:
        return f"[{label}] failed: {turn.error}\n\n"
    return f"[{label}] {turn.output.strip()}\n\n"


async def _cancel(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait for its end, even inside a cancelled anyio scope (Starlette's stream).

    Starlette cancels a streaming response's scope when the client leaves; anyio re-delivers that
    cancellation at every await inside it, so the wait is shielded: the debate's observers must
    see its end before the caller goes on.
    """
    task.cancel()
    with anyio.CancelScope(shield=True):
        await asyncio.gather(task, return_exceptions=True)


class Reservation:
    """A request's place among the admitted ones (:meth:`DebateService.reserve`)."""

    def __init__(self, service: DebateService) -> None:
        self._service = service
        self._released = False

    def release(self) -> None:
        """Give the place back (once; later calls do nothing)."""
        if not self._released:
            self._released = True
            self._service._admitted -= 1  # noqa: SLF001  (the service's own counter)

    async def __aenter__(self) -> None:
        try:
            await self._service._slots.acquire()  # noqa: SLF001
        except BaseException:
            self.release()
            raise
        if self._service.draining:
            self._service._slots.release()  # noqa: SLF001
            self.release()
            raise Draining("the server is shutting down; retry on another instance or later")

    async def __aexit__(self, *exc: object) -> None:
        self._service._slots.release()  # noqa: SLF001
        self.release()


class DebateService:
    """Runs served debates under the gate, each recorded as a run (see the module docstring).

    Args:
        settings: how.
    """

    def __init__(self, settings: ServeSettings) -> None:
        self.settings = settings
        self._slots = asyncio.Semaphore(settings.max_debates)
        waiting = settings.max_debates if settings.queue is None else settings.queue
        self._admit_limit = settings.max_debates + waiting
        self._admitted = 0
        self._walls: deque[float] = deque(maxlen=50)
        self._debates: dict[tuple[str, str | None, str], Debate] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self.draining = False
        """Set when the server shuts down: no new debate starts."""
        # Read once: listing the presets parses every preset file (~0.1 s), too much per request.
        self._names = dict(presets())
        for name, path in settings.protocols.items():
            self._names[name] = f"protocol file {path.name}"

    # -- names ------------------------------------------------------------------------------------
    def names(self) -> dict[str, str]:
        """Every protocol this server runs: name -> description (presets, then the given files)."""
        return dict(self._names)

    def protocol_spec(self, name: str) -> str | Path:
        """The ``Debate`` protocol argument for a served protocol name.

        Raises:
            UsageError: an unknown name (the message lists the known ones).
        """
        if name in self.settings.protocols:
            return self.settings.protocols[name]
        if name in self._names:
            return name
        known = ", ".join(f"moot:{n}" for n in self.names())
        raise UsageError(f"unknown preset {name!r}; this server runs: {known}")

    def debate_for(self, name: str, spec: str | None, overrides: Mapping[str, Any]) -> Debate:
        """The configured debate for a request (kept, so its models' connections are reused).

        Raises:
            UsageError: unknown name, a spec a caller may not choose, or an invalid override.
        """
        protocol = self.protocol_spec(name)
        if spec is not None:
            check_caller_spec(spec)
        key = (name, spec, repr(sorted(overrides.items())))
        debate = self._debates.get(key)
        if debate is None:
            # Checked here, once: an override the protocol rejects (max_tokens over its cap) is a 400.
            load_protocol(protocol, dict(overrides) or None)
            model = spec if spec is not None else self.settings.model
            debate = Debate(
                protocol, model=model, overrides=dict(overrides) or None, store=str(self.settings.store)
            )
            for key_ in debate.protocol.personas:  # an unknown provider or a missing key: now, not mid-run
                debate.model_for(key_)
            if len(self._debates) >= 64:  # distinct (name, spec, overrides): keep the newest
                self._debates.pop(next(iter(self._debates)))
            self._debates[key] = debate
        return debate

    def view_link(self, run_id: str | None) -> str | None:
        """The run's page in ``moot view`` (None without a viewer URL or a run)."""
        if run_id is None or not self.settings.view_url:
            return None
        return f"{self.settings.view_url.rstrip('/')}/runs/{run_id}"

    # -- the gate ---------------------------------------------------------------------------------
    def retry_after_s(self) -> int:
        """Seconds a refused caller should wait: the recent debates' mean wall time (at least 1)."""
        mean = sum(self._walls) / len(self._walls) if self._walls else 1.0
        return max(1, math.ceil(mean))

    @property
    def admitted(self) -> int:
        """Requests admitted (running or waiting for a slot)."""
        return self._admitted

    @property
    def in_flight(self) -> int:
        """Debates (and other tools' runs) whose task has not ended."""
        return sum(not t.done() for t in self._tasks)

    def reserve(self) -> Reservation:
        """Take a place among the admitted requests now (a place in the queue, or a slot).

        The caller then runs under ``async with reservation:``, which waits for a slot; the place
        is given back when the block ends (or by :meth:`Reservation.release`, once).

        Raises:
            Busy: the slots and the queue are full.
            Draining: the server is shutting down.
        """
        if self.draining:
            raise Draining("the server is shutting down; retry on another instance or later")
        if self._admitted >= self._admit_limit:
            waiting = self._admit_limit - self.settings.max_debates
            raise Busy(
                f"{self.settings.max_debates} debates are running and {waiting} are waiting; retry later",
                self.retry_after_s(),
            )
        self._admitted += 1
        return Reservation(self)

    # -- running ----------------------------------------------------------------------------------
    async def run_debate(
        self,
        debate: Debate,
        topic: str,
        *,
        context: Any = None,
        record: Mapping[str, Any] | None = None,
        on_turn: Callable[[Turn], Awaitable[None]] | None = None,
        reservation: Reservation | None = None,
    ) -> DebateOutcome:
        """Run ``debate`` on ``topic`` in a task of its own under a slot; recorded as one run.

        The caller's cancellation (a client gone, a shutdown) cancels the debate and awaits it, so
        the run is recorded ``interrupted`` before this returns (re-raising the cancellation).

        Args:
            debate: from :meth:`debate_for`.
            topic: the question.
            context: the shared context.
            record: keys added to the stored run's config (the served name, ``user``...).
            on_turn: awaited with each speaker or moderator turn as it finishes.
            reservation: the place :meth:`reserve` gave (None: reserved here).

        Raises:
            Busy: no slot and no room in the queue.
            Draining: the server is shutting down.
            UsageError: an empty topic.
        """
        if not topic.strip():
            raise UsageError("the topic (the last user message) is empty")
        async with reservation or self.reserve():
            ids: list[str] = []
            started = time.perf_counter()
            task = asyncio.create_task(self._debate(debate, topic, context, dict(record or {}), on_turn, ids))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            try:
                result = await asyncio.shield(task)
            except asyncio.CancelledError:
                await _cancel(task)  # recorded interrupted by now
                raise
            wall = time.perf_counter() - started
            self._walls.append(wall)
            return DebateOutcome(result, ids[0] if ids else (result.id or None), wall)

    async def _debate(
        self,
        debate: Debate,
        topic: str,
        context: Any,
        record: dict[str, Any],
        on_turn: Callable[[Turn], Awaitable[None]] | None,
        ids: list[str],
    ) -> DebateResult:
        async def event(ev: Event) -> None:
            if on_turn is not None and ev.kind == "turn_completed" and ev.turn is not None:
                await on_turn(ev.turn)

        with (
            annotate(config={"door": self.settings.door, **record}),
            recorded_ids() as recorded,
        ):
            try:
                return await debate.run(topic, context=context, on_event=event)
            finally:
                ids.extend(recorded)

    async def run_other(
        self, work: Callable[[], Awaitable[ResultT]], record: Mapping[str, Any]
    ) -> tuple[ResultT, str | None]:
        """Run another door's work (an arbitration, an ABSA sentence) under a slot, recorded by it.

        ``work`` must record into :attr:`ServeSettings.store` itself (``store=``); the run's config
        gets the door and ``record``.

        Returns:
            ``work``'s result and the stored run's id.
        """
        async with self.reserve():
            started = time.perf_counter()
            with annotate(config={"door": self.settings.door, **record}), recorded_ids() as recorded:
                task = asyncio.ensure_future(work())
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                try:
                    result = await asyncio.shield(task)
                except asyncio.CancelledError:
                    await _cancel(task)
                    raise
            self._walls.append(time.perf_counter() - started)
            return result, (recorded[0] if recorded else None)

    async def aclose(self, *, grace_s: float = 0.0) -> None:
        """Stop: start nothing new, give the debates in flight ``grace_s`` seconds, cancel the rest.

        Every debate ends recorded (``complete``... or ``interrupted``); then the store is flushed
        and the models' connections closed.
        """
        self.draining = True
        pending = {t for t in self._tasks if not t.done()}
        if pending and grace_s > 0:
            _, pending = await asyncio.wait(pending, timeout=grace_s)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        models: dict[int, Model] = {}
        for debate in self._debates.values():
            for key in debate.protocol.personas:
                model = debate.model_for(key)
                models[id(model)] = model
        for model in models.values():
            await model.aclose()
        resolve_store(str(self.settings.store)).flush()
