"""Who listens to a run: observers subscribed to its event stream, attached once where it starts.

A *run* is one piece of work started at a public door: a debate (``Debate.run``, ``stream``,
``run_sync``, ``start().execute()``, a LangGraph node), an ABSA analysis, an arbitration, a
benchmark. Each run has one event stream. The engine and the pipelines only *emit* on it; they
never know who listens. Listeners are **observers** (the run store's recorder, a tracer, a live
viewer), made per run by **observer factories** that the application layer (:mod:`moot.app`)
registers once at import. The engine passes the door's options (``store=...``) through untouched,
so ``Debate(store=PATH)`` records without the engine importing the store.

Writing an observer
-------------------
An observer is any object with these three methods (see :class:`Observer`)::

    class Printer:
        def on_start(self, start: RunStart) -> None:      # once, before the first event
            print("run", start.kind, start.title)
        def on_event(self, event: BaseModel) -> None:     # each event, in order, as it happens
            print(event.kind)
        def on_end(self, end: RunEnd) -> None:            # once, last (also on failure/cancel)
            print(end.status, end.error)

    def printer(start: RunStart, options: Mapping[str, Any]) -> Observer | None:
        return Printer() if options.get("print") else None    # None: not interested in this run

    observe.register("printer", printer)

An observer may also have an ``ignores`` attribute: the :class:`PipelineEvent` kinds it never
uses (the run store's recorder ignores a benchmark's ``model_request`` events), so that nobody
builds them when no other observer wants them (:meth:`RunHandle.wants`).

A factory is called once per top-level run with its :class:`RunStart` and the door's options (a
mapping; today ``{"store": <the store= spec>}``, more keys may come: ignore the ones you do not
know). It returns an observer, or None to stay out of that run. ``on_start`` is then called
with the same :class:`RunStart`.

The rules every observer can rely on:

- **Order.** ``on_start``, then every event in emission order, then ``on_end`` exactly once.
  Calls come from the thread (and, for async runs, the event loop task) that runs the run;
  concurrent runs call their own observers concurrently, so an observer shared between runs
  (one made per run is the norm) must not assume one run at a time.
- **Observers before the caller.** Each event reaches the observers before the door's own
  ``on_event`` callback, so a callback that raises loses nothing.
- **Isolation.** An observer that raises is reported once on stderr and dropped for the rest of
  that run; the run and the other observers go on. Observers must not block for long: they run
  inline (the recorder defers its commits to the event loop).
- **Nesting.** A run started while another is being observed in the same context (ABSA's debate
  stage, each contradiction's debate in an arbitration, the debates inside a bench unit) is *not*
  a run of its own: it makes no observers, its events go to the enclosing run's observers
  (debate :class:`~moot.transcript.Event` s carry their own ``debate_id``), and its end is not
  reported. So every door records exactly one run.

Events
------
Every event is a pydantic model with a ``kind`` string field and a ``time`` (Unix seconds):

- a debate's :class:`moot.transcript.Event` (``debate_started``, ``turn_started``,
  ``turn_completed``, ``judge_completed``, ``round_completed``, ``retry``, ``error``,
  ``debate_completed``, and ``model_request`` once per request a turn sent, with its
  :class:`~moot.transcript.RequestRecord`; see :data:`moot.transcript.EventKind`). A turn's
  ``turn`` carries the messages its model was sent (:attr:`moot.transcript.Turn.sent`);
- an ABSA pipeline's ``StageEvent`` (``step_started``, ``step_completed``, ``stage_output``;
  :class:`moot.absa.schemas.StageEvent`);
- a :class:`PipelineEvent` for the work around debates: benchmark units, ABSA batch sentences,
  arbitration progress (kinds in :data:`PipelineEventKind`).

Ends
----
:class:`RunEnd` says how the run ended: ``complete``, ``fell_back`` (a result, but a fallback
one: a debate's fallback, a failed ABSA stage, a contradiction without ruling), ``skipped``
(a debate with ``debate_mode`` off), ``failed`` (an exception, or a bench with units missing)
or ``interrupted`` (Ctrl-C, a cancelled task, exit code 130), with the result when there is one.

Annotating (for an application)
-------------------------------
A caller above the doors (the CLI) may say more about the next run it starts without passing
anything through the pipelines: inside ``with observe.annotate(title=..., config={...},
continues=...)`` a top-level run takes that title, its config gets those keys added, and it
continues that stored run.

Emitting (for a door)
---------------------
A door wraps its work in :func:`observed` (or calls :func:`open_run` and ends the handle itself
when the run spans several calls, as a LangGraph graph driving a debate node by node does)::

    with observe.observed(RunStart(kind="arbitrate", title=..., model=..., config=...), store=store) as run:
        run.emit(PipelineEvent(kind="progress", data={...}))
        result = ...
        run.end("complete", result)
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from .errors import error_text

__all__ = [
    "EndStatus",
    "Observer",
    "ObserverFactory",
    "PipelineEvent",
    "PipelineEventKind",
    "RunEnd",
    "RunHandle",
    "RunStart",
    "annotate",
    "current",
    "degraded_status",
    "end_status",
    "observed",
    "open_run",
    "register",
    "registered",
    "unregister",
]

EndStatus = Literal["complete", "fell_back", "skipped", "failed", "interrupted"]
"""How a run ended (see the module docstring)."""

PipelineEventKind = Literal[
    "bench_started", "unit_completed", "unit_failed", "model_request", "progress", "human_review"
]
"""The kinds of :class:`PipelineEvent`:

- ``bench_started``: a benchmark starts; ``data = {"total": units wanted, "done": units resumed}``.
- ``unit_completed``: one unit of a batch has its result: a benchmark unit (``unit`` = item id,
  ``part`` = method, ``correct``, ``data`` = the unit's ``ItemRecord`` as JSON), an ABSA batch
  sentence (``unit`` = sentence id, ``data = {"index": i, "result": FinalResult JSON}``), an
  ABSA evaluation prediction (``unit`` = gold id, ``part`` = method). The run store keeps these as
  the run's units, not as events.
- ``unit_failed``: a benchmark unit failed (a resume retries it);
  ``data = {"item_id", "method", "error"}``.
- ``model_request``: a plain model request of a benchmark unit (``single``, ``vote:K``,
  ``society:N:T``; a round-0 sample shared by several methods is the request of the unit that
  asked for it) ended, answered or failed, sent only while someone listens: ``unit`` = item id,
  ``part`` = method, ``request`` = its :class:`~moot.transcript.RequestRecord`,
  ``data = {"agent": i, "round": r}``. In memory only: the run store keeps none.
- ``progress``: an arbitration step, seed 004's callback as data:
  ``data = {"stage", "status", "data", "latency_ms"}``; ``status`` is ``running``, ``progress``
  (``data = {"done", "total"}`` after each contradiction) or ``complete``.
- ``human_review``: a person decided a debate's outcome after it ended (LangGraph's
  ``human_review=``); the debate's run is reopened under its id, takes this event
  (``data = {"reason", "decision"}``) and ends again with the reviewed result.
"""


class PipelineEvent(BaseModel):
    """One event of the work around debates (see :data:`PipelineEventKind` for each kind's fields)."""

    kind: PipelineEventKind
    data: dict[str, Any] = Field(default_factory=dict)
    """The payload, JSON-serialisable, as the run store keeps it."""
    unit: str | None = None
    """``unit_completed``: the unit's id (a bench item, an ABSA sentence, a gold example)."""
    part: str = ""
    """``unit_completed``: the unit's part (a bench method, an evaluated method); may be empty."""
    correct: bool | None = None
    """``unit_completed``: whether the unit's answer is right, when it is scored."""
    request: BaseModel | None = Field(None, exclude=True)
    """``model_request``: the request's :class:`~moot.transcript.RequestRecord` (never serialised)."""
    time: float = Field(default_factory=time.time)
    """Unix seconds."""


@dataclass(frozen=True)
class RunStart:
    """What a run is, told to every observer before its first event.

    Attributes:
        kind: ``run`` (a debate), ``absa``, ``absa-eval``, ``arbitrate``, ``bench``... The run
            store keeps only this string; what a kind's config, events and result mean belongs
            to the layer that owns the kind.
        title: the topic, sentence, reports file or task, for lists and search.
        model: the main model spec.
        config: everything needed to re-run it, JSON-serialisable (secret-looking keys are
            masked by whoever stores it).
        argv: the command line that started it (None: the process's ``sys.argv``).
        continues: the id of a stored run this one continues (``moot bench --resume``, or a
            debate a LangGraph graph resumes in another process), or None.
        run_id: the id the run gave itself (a debate's ``DebateResult.id``), or None. A recorder
            names the stored run by it, so the id in a result, a LangGraph state and the store
            is one id; a run that continues its own id (``continues == run_id``) is stored anew
            when the store never saw it.
    """

    kind: str
    title: str = ""
    model: str = ""
    config: Mapping[str, Any] = field(default_factory=dict)
    argv: Sequence[str] | None = None
    continues: str | None = None
    run_id: str | None = None


@dataclass(frozen=True)
class RunEnd:
    """How a run ended, told to every observer once, last.

    Attributes:
        status: see :data:`EndStatus`.
        result: the run's result (a pydantic model or JSON data: a ``DebateResult``,
            ``FinalResult``, ``ArbitrationResult``, a list of results), None when there is none.
        usage: the run's token usage (a :class:`moot.models.Usage`), or None to take
            ``result.usage`` when it has one.
        summary: a short JSON summary (a bench's accuracy per method...), or None.
        score: one headline number (a bench's best accuracy), or None.
        error: why it failed or was interrupted (``"interrupted"``, ``"TypeName: message"``, or
            the pipeline's own reason), None otherwise.
        exception: the exception that ended it, when one did.
    """

    status: EndStatus
    result: Any = None
    usage: Any = None
    summary: Mapping[str, Any] | None = None
    score: float | None = None
    error: str | None = None
    exception: BaseException | None = None


@runtime_checkable
class Observer(Protocol):
    """A subscriber to one run's event stream (see the module docstring for the rules)."""

    def on_start(self, start: RunStart) -> None:
        """The run starts (before its first event)."""

    def on_event(self, event: BaseModel) -> None:
        """One event: a pydantic model with ``kind`` and ``time``."""

    def on_end(self, end: RunEnd) -> None:
        """The run ended (called once, last)."""


ObserverFactory = Callable[[RunStart, Mapping[str, Any]], "Observer | None"]
"""``factory(start, options) -> Observer | None``, called once per top-level run."""

_factories: dict[str, ObserverFactory] = {}
_current: ContextVar[RunHandle | None] = ContextVar("moot_observed_run", default=None)
_notes: ContextVar[dict[str, Any] | None] = ContextVar("moot_run_notes", default=None)


@contextmanager
def annotate(
    *,
    title: str | None = None,
    config: Mapping[str, Any] | None = None,
    continues: str | None = None,
    argv: Sequence[str] | None = None,
) -> Iterator[None]:
    """Top-level runs started inside the block take ``title``, ``config``'s keys, ``continues``, ``argv``."""
    notes = {
        k: v
        for k, v in {"title": title, "config": config, "continues": continues, "argv": argv}.items()
        if v is not None
    }
    token = _notes.set(notes)
    try:
        yield
    finally:
        _notes.reset(token)


def register(name: str, factory: ObserverFactory) -> None:
    """Make ``factory`` attach observers to every run from now on (same ``name``: replaced)."""
    _factories[name] = factory


def unregister(name: str) -> None:
    """Stop attaching ``name``'s observers to new runs (runs under way keep theirs)."""
    _factories.pop(name, None)


def registered() -> tuple[str, ...]:
    """The names of the registered factories, in registration order."""
    return tuple(_factories)


def current() -> RunHandle | None:
    """The run observed in this context (a door's :func:`observed` block), or None."""
    return _current.get()


def degraded_status(failed: int, total: int) -> EndStatus:
    """How a batch run that finished ends, from its failed units: the status matches the exit code.

    ``complete`` (exit 0) with none failed; ``failed`` (exit 1) when every unit failed, as against
    an unreachable endpoint; ``fell_back`` (exit 1) when some did.
    """
    if failed <= 0:
        return "complete"
    return "failed" if failed >= total else "fell_back"


def end_status(exc: BaseException) -> tuple[EndStatus | None, str | None]:
    """``(status, error)`` for a run ended by ``exc``; ``(None, None)`` for a clean exit (code 0).

    Ctrl-C, a cancelled task and exit code 130 interrupt; any other exception or non-zero exit
    fails (``error`` names its type and message).
    """
    if isinstance(exc, KeyboardInterrupt | asyncio.CancelledError):
        return "interrupted", "interrupted"
    code = getattr(exc, "exit_code", getattr(exc, "code", None))
    if isinstance(exc, SystemExit) or code is not None:
        if code in (0, None):
            return None, None
        if code == 130:
            return "interrupted", "interrupted"
    return "failed", error_text(exc)


class RunHandle:
    """One observed run: emit its events, then end it once (made by :func:`open_run`).

    Attributes:
        start: what the run is.
        observers: the observers attached to it (empty for a nested run or when nobody listens).
        parent: the enclosing run, for a nested run; None for a top-level run.
        ended: the :class:`RunEnd` once the run ended, else None.
    """

    def __init__(self, start: RunStart, observers: Sequence[Observer], parent: RunHandle | None) -> None:
        self.start = start
        self.observers: list[Observer] = list(observers)
        self.parent = parent
        self.ended: RunEnd | None = None

    @property
    def nested(self) -> bool:
        """True for a run inside another run: its events go to the enclosing run."""
        return self.parent is not None

    @property
    def listened(self) -> bool:
        """True when some observer receives this run's events (nested runs: the enclosing run's)."""
        if self.parent is not None:
            return self.parent.listened
        return bool(self.observers)

    def wants(self, kind: str) -> bool:
        """True when some observer of this run uses pipeline events of ``kind``.

        An observer may name the :class:`PipelineEvent` kinds it never uses in an ``ignores``
        attribute (a set of strings; none by default); a pipeline asks before building an event
        that costs something to make, such as a ``model_request`` per plain model call.
        """
        if self.parent is not None:
            return self.parent.wants(kind)
        return any(kind not in getattr(obs, "ignores", ()) for obs in self.observers)

    def _call(self, what: str, arg: Any) -> None:
        for obs in list(self.observers):
            try:
                getattr(obs, what)(arg)
            except Exception as exc:  # one broken observer must not stop the run or the others
                print(
                    f"moot: warning: run observer {type(obs).__name__} failed in {what} ({exc}); "
                    "it no longer receives this run",
                    file=sys.stderr,
                )
                self.observers.remove(obs)

    def emit(self, event: BaseModel) -> None:
        """Deliver ``event`` to the observers (a nested run's: to the enclosing run's)."""
        if self.parent is not None:
            self.parent.emit(event)
        elif self.observers:
            self._call("on_event", event)

    def end(
        self,
        status: EndStatus,
        result: Any = None,
        *,
        usage: Any = None,
        summary: Mapping[str, Any] | None = None,
        score: float | None = None,
        error: str | None = None,
        exception: BaseException | None = None,
    ) -> None:
        """End the run (once: later calls are ignored); a nested run's end reaches no observer."""
        if self.ended is not None:
            return
        self.ended = RunEnd(status, result, usage, summary, score, error, exception)
        if self.parent is None:
            self._call("on_end", self.ended)

    def fail(self, exc: BaseException) -> None:
        """End the run as ``exc`` ends it (see :func:`end_status`); a clean exit ends it ``complete``."""
        status, error = end_status(exc)
        self.end(status or "complete", error=error, exception=exc)


def open_run(start: RunStart, **options: Any) -> RunHandle:
    """Start observing one run: attach the registered factories' observers and tell them it starts.

    Inside another observed run (see :func:`current`) the run is nested: nothing is attached and
    its events go to the enclosing run. The caller must end the handle (:meth:`RunHandle.end` or
    :meth:`RunHandle.fail`); :func:`observed` does it for a ``with`` block.

    Args:
        start: what the run is.
        **options: the door's options, passed to each factory (``store=...``).
    """
    parent = _current.get()
    if parent is not None:
        return RunHandle(start, (), parent)
    notes = _notes.get()
    if notes:
        extra = notes.get("config")
        start = replace(
            start,
            title=notes.get("title", start.title),
            config=dict(start.config) | dict(extra) if extra else start.config,
            continues=notes.get("continues", start.continues),
            argv=notes.get("argv", start.argv),
        )
    observers: list[Observer] = []
    for factory in list(_factories.values()):
        obs = factory(start, options)
        if obs is not None:
            observers.append(obs)
    handle = RunHandle(start, observers, None)
    handle._call("on_start", start)
    return handle


@contextmanager
def observed(start: RunStart, **options: Any) -> Iterator[RunHandle]:
    """Observe the run inside the ``with`` block (see :func:`open_run`).

    Runs started inside the block, in this context or in tasks it creates, are nested in it.
    Leaving the block ends the run: ``complete`` unless :meth:`RunHandle.end` said otherwise,
    ``interrupted``/``failed`` for an exception (which propagates).
    """
    handle = open_run(start, **options)
    token = _current.set(handle)
    try:
        yield handle
    except BaseException as exc:
        handle.fail(exc)
        raise
    finally:
        _current.reset(token)
        handle.end("complete")
