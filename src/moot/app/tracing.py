"""OpenTelemetry spans for moot runs, built from the run's event stream (``pip install 'moot[otel]'``).

A second subscriber to every run, beside the run store's recorder (:mod:`moot.observe`): when an
OpenTelemetry tracer provider is set, :func:`trace_observer` attaches a :class:`TraceObserver` to
each run a public door starts, and it turns the run's events into spans following
OpenTelemetry's GenAI semantic conventions, version :data:`SEMCONV_VERSION` (attribute names
pinned to it; the conventions are still marked Development)::

    invoke_workflow {protocol}        gen_ai.conversation.id = the run id; status, decision
    ├── invoke_agent {persona}        one per turn (speakers, moderator, judge): round, phase
    │   └── chat {model}              one per model request: parameters, usage, finish reason
    │       · moot.retry events        transient failures retried inside the request
    ├── invoke_agent {persona}        concurrent turns of a round are siblings
    · gen_ai.evaluation.result        a judge's or moderator's verdict (score, label)

A benchmark, an ABSA analysis or an arbitration is one ``invoke_workflow moot.{kind}`` root
with a span per benchmark unit (its score as an evaluation event; a plain method's requests
as ``chat`` spans beneath it), per ABSA step, and the debates it ran (one per contradiction
for an arbitration) beneath it. An ABSA batch is a root per sentence (a trace each, with its
steps and debate) and an ``invoke_workflow moot.absa.batch`` root, linked both ways.

The engine knows nothing of this module. moot uses only the OpenTelemetry API's global tracer
provider, as a library should: :func:`active_tracer` is None (and no observer is made) until the
application, or ``moot``'s CLI from OpenTelemetry's ``OTEL_*`` variables (:func:`install_from_env`:
the SDK's provider, batch processor and OTLP exporter), sets one. Without the extra nothing here
imports OpenTelemetry.

Content (topic, context, prompts, replies, explanations) is left out unless
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` asks for it (:func:`capture_content`: the
boolean, or OpenTelemetry's ``SPAN_AND_EVENT``...). Never recorded, with or without it: error
messages (only their class, ``error.type``), API keys, endpoint URLs (only ``server.address`` and
``server.port``); captured text passes through :mod:`moot.redact` like everything the run store
keeps, so a credential inside a topic or a prompt is masked.
"""

from __future__ import annotations

import functools
import importlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import urlsplit

import moot.observe as observe
import moot.redact as redact

from ..transcript import DebateResult, Event, JudgingRecord, RequestRecord, Turn

if TYPE_CHECKING:  # pragma: no cover - only with the extra
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span, Tracer

__all__ = [
    "CAPTURE_ENV",
    "SEMCONV_VERSION",
    "DebateTracer",
    "TraceObserver",
    "active_tracer",
    "capture_content",
    "install_from_env",
    "model_name",
    "provider_name",
    "trace_observer",
]

SEMCONV_VERSION = "1.41.0"
"""The OpenTelemetry semantic conventions release whose GenAI attribute names moot emits."""

CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The conventions' switch for recording prompts and replies in spans (off by default)."""

SCOPE = "moot"
"""The instrumentation scope name of every span moot makes."""

# Low-cardinality labels a verdict may carry (never free text): the first one found is the label.
_LABEL_FIELDS = ("leaning", "resolution", "action", "sentence_polarity", "winner")

_PROVIDERS = {"test": "moot.test", "local": "moot.local"}

_log = logging.getLogger(__name__)

_SHAPES_MAX = 256  # kinds of requests (model, parameters, endpoint) whose common attributes are kept


# Both documented forms of the switch: the boolean, and the enum OpenTelemetry's GenAI utilities
# read (with OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental, whose attributes moot emits).
_CAPTURE_ON = frozenset(("true", "1", "yes", "span_only", "span_and_event"))
_CAPTURE_OFF = frozenset(("", "false", "0", "no", "no_content"))
_CAPTURE_WARNED: set[str] = set()


def capture_content() -> bool:
    """Whether ``$OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` asks for content on spans.

    Read in both documented forms: ``true`` / ``1`` / ``yes`` (``false`` / ``0`` / ``no``), and
    OpenTelemetry's ``ContentCapturingMode`` names, in any case: ``SPAN_ONLY`` and
    ``SPAN_AND_EVENT`` capture, ``NO_CONTENT`` does not, and ``EVENT_ONLY`` captures nothing
    either (moot records content on spans only; it emits no GenAI log events). ``EVENT_ONLY``
    and any other value are one warning on the ``moot`` logger (once per value and process).
    """
    raw = os.environ.get(CAPTURE_ENV, "").strip()
    value = raw.lower()
    if value in _CAPTURE_ON:
        return True
    if value in _CAPTURE_OFF:
        return False
    if value not in _CAPTURE_WARNED:
        _CAPTURE_WARNED.add(value)
        if value == "event_only":
            _log.warning(
                "%s=EVENT_ONLY captures no content: moot records content on spans only "
                "(SPAN_AND_EVENT or SPAN_ONLY capture it)",
                CAPTURE_ENV,
            )
        else:
            _log.warning(
                "%s=%r is not a known value (true/false, or NO_CONTENT, SPAN_ONLY, EVENT_ONLY, "
                "SPAN_AND_EVENT): no content is captured",
                CAPTURE_ENV,
                raw[:40],
            )
    return False


def active_tracer() -> Tracer | None:
    """Moot's tracer from the global provider, or None when no provider is set (then trace nothing).

    Imports nothing: if ``opentelemetry.trace`` was never imported, no provider can have been
    set, and this returns None at the cost of one dictionary look-up.
    """
    api = sys.modules.get("opentelemetry.trace")
    if api is None:
        return None
    provider = api.get_tracer_provider()
    if isinstance(provider, api.ProxyTracerProvider | api.NoOpTracerProvider):
        return None
    from .._version import __version__

    tracer: Tracer = provider.get_tracer(
        SCOPE, __version__, schema_url=f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"
    )
    return tracer


def _ns(t: float) -> int:
    return int(t * 1e9)


@functools.lru_cache(maxsize=512)
def provider_name(model: str) -> str:
    """``gen_ai.provider.name`` for a moot model spec: ``openai:gpt-4o`` -> ``openai``.

    moot's offline and in-process models are named ``moot.test`` and ``moot.local``.
    """
    head = model.partition("?")[0].partition(":")[0].strip() or "_OTHER"
    return _PROVIDERS.get(head, head)


@functools.lru_cache(maxsize=512)
def model_name(model: str) -> str:
    """``gen_ai.request.model``: the spec without its provider and options (``openai:m?x=1`` -> ``m``)."""
    head = model.partition("?")[0]
    provider, sep, rest = head.partition(":")
    return redact.text(rest.strip() if sep else provider.strip())


@functools.lru_cache(maxsize=256)
def _server(endpoint: str | None) -> Mapping[str, Any]:
    """``server.address`` and ``server.port`` of a base URL: never its path, query or credentials."""
    if not endpoint:
        return {}
    try:
        parts = urlsplit(endpoint.split(",")[0].strip())
        host, port = parts.hostname, parts.port
    except ValueError:
        return {}
    if not host:
        return {}
    out: dict[str, Any] = {"server.address": host}
    if port is None:
        port = {"http": 80, "https": 443}.get(parts.scheme)
    if port is not None:
        out["server.port"] = port
    return out


def _messages_json(messages: list[Any]) -> str:
    return json.dumps(
        [{"role": m.role, "parts": [{"type": "text", "content": redact.text(m.content)}]} for m in messages],
        ensure_ascii=False,
    )


def _reply_json(text: str, finish_reason: str | None) -> str:
    message: dict[str, Any] = {"role": "assistant", "parts": [{"type": "text", "content": redact.text(text)}]}
    message["finish_reason"] = finish_reason or "stop"
    return json.dumps([message], ensure_ascii=False)


def _chat_content(req: RequestRecord, attrs: dict[str, Any]) -> None:
    """A request's messages and reply (content capture on)."""
    if req.messages:
        attrs["gen_ai.input.messages"] = _messages_json(req.messages)
    if req.reply is not None:
        attrs["gen_ai.output.messages"] = _reply_json(req.reply, req.finish_reason)


def judging_attributes(record: JudgingRecord) -> dict[str, Any]:
    """A deciding turn's ``moot.judge.*`` span attributes (docs/judging.md); None values left out."""
    attrs: dict[str, Any] = {
        "moot.judge.order": list(record.order),
        "moot.judge.blind": record.blind,
        "moot.judge.shuffled": record.shuffled,
        "moot.judge.ruled_by": record.ruled_by,
        "moot.judge.failed_models": [f.model for f in record.failed_models],
        "moot.judge.position_flip": record.position_flip,
        "moot.judge.identity_flip": record.identity_flip,
        "moot.judge.first_slot": record.first_slot,
        "moot.judge.position_sensitive": record.position_sensitive or None,
        "moot.judge.audit_extra_calls": record.extra_calls or None,
    }
    return {k: v for k, v in attrs.items() if v is not None and v != []}


def _content(value: Any) -> str:
    """Captured content as an attribute: JSON for data, credentials masked (:mod:`moot.redact`)."""
    if isinstance(value, str):
        return redact.text(value)
    return json.dumps(redact.data(value), ensure_ascii=False)


@dataclass
class _Turn:
    """One turn while its run is under way: when it started and the requests it made."""

    started: float
    requests: list[RequestRecord] = field(default_factory=list)
    turn: Turn | None = None
    ended: float = 0.0


@dataclass
class _Run:
    """What one debate did so far; its spans are made when it ends."""

    parent: Context | None
    started: float
    topic: str | None
    open: dict[tuple[int | None, str | None, str], _Turn] = field(default_factory=dict)
    done: list[_Turn] = field(default_factory=list)


class DebateTracer:
    """Spans for debate runs, from their events: pass :meth:`on_event` as (or into) ``on_event``.

    One tracer serves any number of concurrent runs (kept apart by ``debate_id``). A run's root
    span nests under the OpenTelemetry context current when its ``debate_started`` event arrives
    (the caller's span: a LangGraph node, a web request), or under ``parent`` when given; the
    concurrent turns of a round are siblings under the root. Nothing here changes the caller's
    current span.

    A run's spans are made, each with all its attributes, when the run ends (its
    ``debate_completed`` event, or :meth:`close`), with the times the events recorded: spans
    are exported only once ended anyway, and this is the cheapest way through the SDK.

    Args:
        tracer: an OpenTelemetry tracer (:func:`active_tracer`).
        capture: record content (topic, messages, replies); default :func:`capture_content`.
        parent: the context to nest runs under instead of the current one.
    """

    def __init__(self, tracer: Tracer, *, capture: bool | None = None, parent: Context | None = None) -> None:
        from opentelemetry import context, trace

        self._tracer = tracer
        self._trace = trace
        self._context = context
        self.capture = capture_content() if capture is None else capture
        self.parent = parent
        """The context new runs nest under (None: the current one when a run starts)."""
        self.parent_for: Callable[[], Context | None] | None = None
        """Asked first, when a run starts, for the context it nests under (a pipeline's step)."""
        self._runs: dict[str, _Run] = {}
        self._shapes: dict[tuple[Any, ...], tuple[str, dict[str, Any]]] = {}
        self._handlers: Mapping[str, Callable[[Event], None]] = {
            "debate_started": self._started,
            "turn_started": self._turn_started,
            "model_request": self._request,
            "turn_completed": self._turn_completed,
            "judge_completed": self._turn_completed,
            "debate_completed": self._completed,
        }

    def on_event(self, event: Event) -> None:
        """Handle one event (events of other kinds are ignored)."""
        handler = self._handlers.get(event.kind)
        if handler is not None:
            handler(event)

    @property
    def open_runs(self) -> int:
        """Runs started and not yet ended."""
        return len(self._runs)

    def close(self, status: str = "interrupted", workflow: str | None = None) -> None:
        """End every run still open (the run was interrupted): its spans, marked ``status``.

        Args:
            status: the run's end (``interrupted``, ``failed``).
            workflow: the protocol's name, when known (the events never said it).
        """
        for debate_id in list(self._runs):
            run = self._runs.pop(debate_id)
            for turn in run.open.values():
                turn.ended = time.time()
                run.done.append(turn)
            attrs: dict[str, Any] = {"moot.status": status, "error.type": status}
            name = "invoke_workflow"
            if workflow:
                attrs["gen_ai.workflow.name"] = workflow
                name = f"invoke_workflow {workflow}"
            self._emit(run, debate_id, name, attrs, time.time(), error=status)

    # -- events -----------------------------------------------------------------------------------
    def _parent_now(self) -> Context | None:
        found = self.parent_for() if self.parent_for is not None else None
        if found is not None:
            return found
        return self.parent if self.parent is not None else self._context.get_current()

    def _run(self, event: Event, started: float) -> _Run:
        run = self._runs.get(event.debate_id)
        if run is None:
            run = self._runs[event.debate_id] = _Run(self._parent_now(), started, None)
        return run

    def _started(self, event: Event) -> None:
        self._run(event, event.time).topic = event.message

    def _turn_started(self, event: Event) -> None:
        run = self._run(event, event.time)
        run.open[(event.round, event.speaker, event.phase or "turn")] = _Turn(event.time)

    def _request(self, event: Event) -> None:
        run = self._runs.get(event.debate_id)
        if run is None or event.request is None:
            return
        turn = run.open.get((event.round, event.speaker, event.phase or "turn"))
        if turn is not None:
            turn.requests.append(event.request)

    def _turn_completed(self, event: Event) -> None:
        run = self._runs.get(event.debate_id)
        if run is None or event.turn is None:
            return
        turn = run.open.pop((event.round, event.speaker, event.turn.phase), None)
        if turn is None:
            return
        turn.turn = event.turn
        # A cancelled turn is reported when the run finishes: it ended when it was cut, not then.
        took = (event.turn.latency_ms + event.turn.queue_ms) / 1000
        turn.ended = max(turn.started, turn.started + took if event.turn.cancelled else event.time)
        run.done.append(turn)

    def _completed(self, event: Event) -> None:
        result = event.result
        if result is None:
            return
        run = self._runs.pop(event.debate_id, None)
        if run is None:  # a skipped run: no debate_started, one span
            run = _Run(self._parent_now(), result.timings.started_at or event.time, result.topic)
        attrs = self._outcome(result)
        error = _fallback_kind(result.fallback) if result.fallback else None
        if error:
            attrs["error.type"] = error
        self._emit(run, event.debate_id, f"invoke_workflow {result.protocol}", attrs, event.time, error=error)

    # -- spans ------------------------------------------------------------------------------------
    def _emit(
        self, run: _Run, debate_id: str, name: str, attrs: dict[str, Any], ended: float, *, error: str | None
    ) -> None:
        trace = self._trace
        attrs["gen_ai.operation.name"] = "invoke_workflow"
        attrs["gen_ai.conversation.id"] = debate_id
        if self.capture and run.topic:
            attrs["moot.topic"] = _content(run.topic)
        root = self._tracer.start_span(
            name,
            context=run.parent,
            kind=trace.SpanKind.INTERNAL,
            attributes=attrs,
            start_time=_ns(run.started),
        )
        if root.is_recording():  # a sampler that dropped the run drops its children: skip making them
            context = trace.set_span_in_context(root, run.parent)
            for turn in run.done:
                self._agent_span(turn, context, root)
        if error:
            root.set_status(trace.StatusCode.ERROR, error)
        root.end(_ns(max(ended, run.started)))

    def _agent_span(self, turn: _Turn, parent: Context, root: Span) -> None:
        t = turn.turn
        attrs: dict[str, Any] = {"gen_ai.operation.name": "invoke_agent"}
        name = "invoke_agent"
        if t is not None:
            name = f"invoke_agent {t.speaker}"
            attrs.update(
                {
                    "gen_ai.agent.name": t.speaker,
                    "gen_ai.provider.name": provider_name(t.model),
                    "gen_ai.request.model": model_name(t.model),
                    "moot.round": t.round,
                    "moot.phase": t.phase,
                }
            )
            if t.repaired:
                attrs["moot.repaired"] = True
            if t.trimmed:
                attrs["moot.trimmed"] = True
            if t.judging is not None:  # a deciding step: how it saw the candidates, its swap audit
                attrs.update(judging_attributes(t.judging))
            if not t.ok:
                attrs["error.type"] = t.error_kind or "_OTHER"
            elif self.capture and t.content is not None:
                attrs["moot.output"] = _content(t.content)
        else:  # still running when the run was closed
            attrs["error.type"] = "interrupted"
        span = self._tracer.start_span(
            name,
            context=parent,
            kind=self._trace.SpanKind.INTERNAL,
            attributes=attrs,
            start_time=_ns(turn.started),
        )
        context = self._trace.set_span_in_context(span, parent)
        for req in turn.requests:
            if req.attempt > 0:
                span.add_event("moot.repair", {"moot.attempt": req.attempt}, _ns(req.started))
            self.chat_span(req, context)
        if "error.type" in attrs:
            span.set_status(self._trace.StatusCode.ERROR, attrs["error.type"])
        elif t is not None and t.phase in ("judge", "moderator"):
            self._evaluation(root, t, turn.ended)
        span.end(_ns(turn.ended))

    def chat_span(self, req: RequestRecord, parent: Context, extra: Mapping[str, Any] | None = None) -> None:
        """One ``chat`` span for a finished request, under ``parent`` (its times are the request's).

        ``extra``: more attributes (a benchmark's plain request: its agent and round).
        """
        # The attributes a model and its endpoint give every request alike, worked out once.
        shape = (
            req.model,
            req.response_model,
            req.max_tokens,
            req.temperature,
            req.finish_reason,
            req.endpoint,
        )
        found = self._shapes.get(shape)
        if found is None:
            found = self._shape(req)
            if len(self._shapes) < _SHAPES_MAX:
                self._shapes[shape] = found
        name, attrs = found[0], found[1].copy()
        usage = req.usage
        attrs["gen_ai.usage.input_tokens"] = usage.prompt_tokens
        attrs["gen_ai.usage.output_tokens"] = usage.completion_tokens
        if extra:
            attrs.update(extra)
        # Each attribute costs ~5 us to make and export: the rare ones only when they say something.
        if req.attempt:
            attrs["moot.attempt"] = req.attempt
        if usage.attempts > 1:
            attrs["moot.requests_sent"] = usage.attempts
        if usage.cost_usd:
            attrs["moot.cost_usd"] = usage.cost_usd
        elif usage.cost_note:  # an unpriced model: unknown, never a silent 0
            attrs["moot.cost_note"] = usage.cost_note
        if req.error_kind:
            attrs["error.type"] = req.error_kind
        if self.capture:
            _chat_content(req, attrs)
        span = self._tracer.start_span(
            name,
            context=parent,
            kind=self._trace.SpanKind.CLIENT,
            attributes=attrs,
            start_time=_ns(req.started),
        )
        for retry in req.retries:
            info: dict[str, Any] = {"error.type": retry.error_kind, "moot.wait_s": retry.wait_s}
            if retry.status is not None:
                info["http.response.status_code"] = retry.status
            span.add_event("moot.retry", info, _ns(retry.time))
        if req.error_kind:
            span.set_status(self._trace.StatusCode.ERROR, req.error_kind)
        span.end(_ns(req.ended))

    @staticmethod
    def _shape(req: RequestRecord) -> tuple[str, dict[str, Any]]:
        """A request's span name and the attributes its model, parameters and endpoint give it."""
        model = model_name(req.model)
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider_name(req.model),
            "gen_ai.request.model": model,
        }
        if req.max_tokens is not None:
            attrs["gen_ai.request.max_tokens"] = req.max_tokens
        if req.temperature is not None:
            attrs["gen_ai.request.temperature"] = req.temperature
        if req.response_model:
            attrs["gen_ai.response.model"] = model_name(req.response_model)
        if req.finish_reason:
            attrs["gen_ai.response.finish_reasons"] = (req.finish_reason,)
        if req.endpoint:
            attrs.update(_server(req.endpoint))
        return f"chat {model}", attrs

    def _evaluation(self, root: Span, turn: Turn, at: float) -> None:
        attrs: dict[str, Any] = {
            "gen_ai.evaluation.name": f"moot.{turn.phase}",
            "gen_ai.agent.name": turn.speaker,
            "moot.round": turn.round,
        }
        score = turn.get("confidence")
        if isinstance(score, int | float) and not isinstance(score, bool):
            attrs["gen_ai.evaluation.score.value"] = float(score)
        for name in _LABEL_FIELDS:
            label = turn.get(name)
            if isinstance(label, str) and label:
                attrs["gen_ai.evaluation.score.label"] = label
                break
        if self.capture and turn.text:
            attrs["gen_ai.evaluation.explanation"] = _content(turn.text)
        root.add_event("gen_ai.evaluation.result", attrs, _ns(at))

    def _outcome(self, result: DebateResult) -> dict[str, Any]:
        status = "skipped" if result.skipped else "fell_back" if result.degraded else "complete"
        attrs: dict[str, Any] = {
            "gen_ai.workflow.name": result.protocol,
            "moot.status": status,
            "moot.rounds": len(result.rounds),
        }
        if result.usage.cost_usd is not None:  # what the debate cost (unknown: why)
            attrs["moot.cost_usd"] = result.usage.cost_usd
        elif result.usage.cost_note:
            attrs["moot.cost_note"] = result.usage.cost_note
        if result.failed_turns:
            attrs["moot.failed_turns"] = result.failed_turns
        if result.cancelled_turns:
            attrs["moot.cancelled_turns"] = result.cancelled_turns
        if result.stopped_early:
            attrs["moot.stopped_early"] = True
        decision = result.decision
        if decision is not None:
            attrs["moot.decision.strategy"] = decision.strategy
            if decision.label is not None:
                attrs["moot.decision.label"] = decision.label
            if decision.confidence is not None:
                attrs["moot.decision.confidence"] = decision.confidence
        if self.capture and result.final_answer is not None:
            attrs["moot.final_answer"] = _content(result.final_answer)
        return attrs


def trace_observer(start: observe.RunStart, options: Mapping[str, Any]) -> observe.Observer | None:
    """The observer factory for tracing: a :class:`TraceObserver` when a tracer provider is set."""
    tracer = active_tracer()
    if tracer is None or options.get("trace") is False:
        return None
    return TraceObserver(tracer)


@dataclass
class _Scope:
    """Where a pipeline's steps and debates nest: the run's root, or one sentence of a batch."""

    context: Context | None
    span: Span | None = None
    steps: dict[str, list[tuple[Span, Context]]] = field(default_factory=dict)
    step: Context | None = None


# The sentence of an ABSA batch that this task is running (each sentence runs in a task of its own,
# its steps, debates and its unit_completed event all in it): (the observer's id, its scope).
_SCOPE: ContextVar[tuple[int, _Scope] | None] = ContextVar("moot_trace_scope", default=None)


_Requests = list[tuple[RequestRecord, dict[str, Any]]]


class _Unit(NamedTuple):
    """An ended benchmark unit, until its span is made: name, attributes, times (ns), score, requests."""

    name: str
    attributes: dict[str, Any]
    started: int
    ended: int
    correct: bool | None
    failed: bool
    requests: _Requests


# A benchmark's unit spans (each with its requests' chat spans) are made in batches: at most this
# many units, or the units of at most this many seconds (when the next one ends), or the run's end.
# Made a unit (5 spans for society:3:2) at a time amid the event loop's work, the tracer took ~62 us
# of the main thread's CPU a model call in moot bench; 64 units (320 spans) at a time, ~51 (the
# SDK's code and data stay in the caches). The spans carry the units' own times: only when they
# reach the exporter changes (its batch processor holds them up to 5 s anyway).
_UNIT_BATCH = 64
_UNIT_WAIT_S = 1.0
_EXTRA = (("agent", "moot.agent"), ("round", "moot.round"))  # a plain request's attributes


class TraceObserver:
    """One run's spans (see the module docstring): an observer of :mod:`moot.observe`.

    A debate run's spans come from its own events; a pipeline run (``bench``, ``absa``,
    ``arbitrate``...) gets a root span of its own, made on :meth:`on_start` under the caller's
    current span, with its debates, steps and units beneath it; in an ABSA batch each sentence
    is a root (a trace) of its own with its steps and debate, linked to and from the batch's root.
    """

    def __init__(self, tracer: Tracer, *, capture: bool | None = None) -> None:
        from opentelemetry import context, trace

        self._tracer, self._trace, self._context = tracer, trace, context
        self.debates = DebateTracer(tracer, capture=capture)
        self.debates.parent_for = self._debate_parent
        self._root: Span | None = None
        self._single = _Scope(None)
        self._batch = False
        self._scopes: list[_Scope] = []
        self._workflow: str | None = None
        # A benchmark unit's plain requests until the unit ends (its span is made then).
        self._requests: dict[tuple[str, str], _Requests] = {}
        self._sentence_attrs: dict[str, Any] = {}
        # Ended units whose spans are not made yet (see _UNIT_BATCH), and when the first of them ended.
        self._pending: list[_Unit] = []
        self._pending_since = 0.0

    def _flush_units(self) -> None:
        """Make the spans of the units ended so far (a batch of them, or the run's end)."""
        pending, self._pending = self._pending, []
        for unit in pending:
            self._unit(unit)

    def on_start(self, start: observe.RunStart) -> None:
        """Note the caller's context; open the root span of a pipeline run."""
        parent = self._context.get_current()
        if start.kind == "run":  # a debate: its events make its root
            self.debates.parent = parent
            protocol = start.config.get("protocol")
            if isinstance(protocol, Mapping) and isinstance(protocol.get("name"), str):
                self._workflow = protocol["name"]
            return
        self._batch = start.kind == "absa" and start.config.get("batch") is True
        workflow = "moot.absa.batch" if self._batch else f"moot.{start.kind}"
        attrs: dict[str, Any] = {"gen_ai.operation.name": "invoke_workflow", "gen_ai.workflow.name": workflow}
        if start.model:
            attrs["gen_ai.request.model"] = model_name(start.model)
            attrs["gen_ai.provider.name"] = provider_name(start.model)
        # A batch's sentences are roots of their own: they carry the run's model, not its title.
        self._sentence_attrs = {**attrs, "gen_ai.workflow.name": "moot.absa", "moot.batch": True}
        if self.debates.capture and start.title:
            attrs["moot.title"] = _content(start.title)
        self._root = self._tracer.start_span(
            f"invoke_workflow {workflow}",
            context=parent,
            kind=self._trace.SpanKind.INTERNAL,
            attributes=attrs,
        )
        self._single.context = self.debates.parent = self._trace.set_span_in_context(self._root, parent)

    def on_event(self, event: Any) -> None:
        """One event: a debate's (spans of that debate), an ABSA step, a benchmark unit."""
        if isinstance(event, Event):
            self.debates.on_event(event)
            return
        kind = getattr(event, "kind", "")
        if kind == "model_request":  # the most frequent (a benchmark's plain requests)
            request = getattr(event, "request", None)
            if isinstance(request, RequestRecord):
                key = (str(getattr(event, "unit", "")), str(getattr(event, "part", "")))
                data = getattr(event, "data", None) or {}
                extra = {name: data[k] for k, name in _EXTRA if isinstance(data.get(k), int)}
                requests = self._requests.get(key)
                if requests is None:
                    self._requests[key] = [(request, extra)]
                else:
                    requests.append((request, extra))
        elif kind == "step_started":
            self._step_started(str(getattr(event, "name", "")))
        elif kind == "step_completed":
            self._step_completed(event)
        elif kind in ("unit_completed", "unit_failed"):
            if not self._sentence_done(event):
                self._unit_ended(event)
        elif kind == "bench_started" and self._root is not None:
            total = getattr(event, "data", {}).get("total")
            if isinstance(total, int):
                self._root.set_attribute("moot.units", total)

    def on_end(self, end: observe.RunEnd) -> None:
        """Close what is still open and end the root with the run's status."""
        self._flush_units()
        self.debates.close(
            end.status if end.status in ("interrupted", "failed") else "interrupted", self._workflow
        )
        for scope in [self._single, *self._scopes]:
            for stack in scope.steps.values():
                for span, _ in stack:
                    span.set_status(self._trace.StatusCode.ERROR, end.status)
                    span.end()
            scope.steps.clear()
            if scope.span is not None:
                scope.span.set_status(self._trace.StatusCode.ERROR, end.status)
                scope.span.end()
        self._scopes.clear()
        self._requests.clear()  # units that never ended: their requests have no span to go under
        root = self._root
        if root is None:
            return
        root.set_attribute("moot.status", end.status)
        usage = end.usage if end.usage is not None else getattr(end.result, "usage", None)
        if usage is not None:  # the run's cost, or why it is unknown (an unpriced model)
            cost = getattr(usage, "cost_usd", 0.0)
            if cost is not None:
                root.set_attribute("moot.cost_usd", cost)
            else:
                root.set_attribute("moot.cost_note", getattr(usage, "cost_note", None) or "unknown")
            root.set_attribute("moot.cost_source", getattr(usage, "cost_source", "") or "")
        if end.score is not None:
            root.set_attribute("moot.score", end.score)
        if end.status in ("failed", "interrupted"):
            kind = type(end.exception).__name__ if end.exception is not None else end.status
            root.set_attribute("error.type", kind)
            root.set_status(self._trace.StatusCode.ERROR, kind)
        root.end()

    # -- pipeline events ------------------------------------------------------------------------
    def _scope(self, create: bool) -> _Scope | None:
        """The scope of the current task: the run's, or (a batch) the sentence this task runs."""
        if not self._batch:
            return self._single
        held = _SCOPE.get()
        if held is not None and held[0] == id(self):
            return held[1]
        if not create:
            return None
        # Each sentence of a batch is a trace of its own (the issue's "a root per sentence with its
        # stages"): a trace list (Phoenix's, Jaeger's search) then shows one row per sentence with
        # its own duration and status, and a sentence's steps and debate are not lost among a
        # thousand others. The batch stays one root too, linked both ways: each sentence's root
        # links to the batch's span (Jaeger shows it under References, a click away), and the
        # batch's span links to every sentence (from the batch, each sentence's trace).
        links = []
        if self._root is not None:
            links.append(self._trace.Link(self._root.get_span_context(), {"moot.link": "batch"}))
        span = self._tracer.start_span(
            "invoke_workflow moot.absa",
            context=self._context.Context(),  # a new trace, not a child of the caller's span
            kind=self._trace.SpanKind.INTERNAL,
            attributes=self._sentence_attrs,
            links=links,
        )
        if self._root is not None:
            self._root.add_link(span.get_span_context(), {"moot.link": "sentence"})
        context = self._trace.set_span_in_context(span, self._context.Context())
        scope = _Scope(context, span)
        _SCOPE.set((id(self), scope))
        self._scopes.append(scope)
        return scope

    def _debate_parent(self) -> Context | None:
        scope = self._scope(False) or self._single
        return scope.step or scope.context

    def _step_started(self, name: str) -> None:
        scope = self._scope(True) or self._single
        span = self._tracer.start_span(
            f"step {name}",
            context=scope.context,
            kind=self._trace.SpanKind.INTERNAL,
            attributes={"moot.step": name},
        )
        scope.step = self._trace.set_span_in_context(span, scope.context)
        scope.steps.setdefault(name, []).append(
            (span, scope.step)
        )  # a debate run by this step nests under it

    def _step_completed(self, event: Any) -> None:
        scope = self._scope(False) or self._single
        stack = scope.steps.get(str(getattr(event, "name", "")))
        if not stack:
            return
        span, _ = stack.pop(0)
        step = getattr(event, "step", None)
        if step is not None:
            if getattr(step, "skipped", False):
                span.set_attribute("moot.skipped", True)
            if not getattr(step, "ok", True):
                span.set_attribute("error.type", "step_failed")
                span.set_status(self._trace.StatusCode.ERROR, "step_failed")
        span.end()
        scope.step = None

    def _sentence_done(self, event: Any) -> bool:
        """A batch sentence's result: end its span (True), or False when this is no batch sentence."""
        scope = self._scope(False) if self._batch else None
        if scope is None or scope.span is None:
            return False
        unit = getattr(event, "unit", None)
        scope.span.set_attribute("moot.unit", str(unit))
        result = (getattr(event, "data", {}) or {}).get("result") or {}
        if isinstance(result, Mapping) and result.get("errors"):
            scope.span.set_attribute("error.type", "sentence_failed")
            scope.span.set_status(self._trace.StatusCode.ERROR, "sentence_failed")
        scope.span.end()
        self._scopes.remove(scope)
        _SCOPE.set(None)
        return True

    @staticmethod
    def _unit_key(event: Any) -> tuple[Any, Any]:
        data: Mapping[str, Any] = getattr(event, "data", {}) or {}
        unit, part = getattr(event, "unit", None), getattr(event, "part", "")
        if unit is None:
            unit = data.get("item_id")
            part = part or data.get("method", "")
        return unit, part

    def _unit_ended(self, event: Any) -> None:
        """Keep an ended unit (what its span says, the requests it made) for the next batch of unit spans.

        Only that is kept, not the event: a bench unit's event holds its whole record.
        """
        unit, part = self._unit_key(event)
        data: Mapping[str, Any] = getattr(event, "data", {}) or {}
        ended = float(getattr(event, "time", 0.0) or time.time())
        wall = data.get("wall_s")
        started = ended - wall if isinstance(wall, int | float) and wall > 0 else ended
        attrs: dict[str, Any] = {"moot.unit": str(unit), "moot.part": str(part)}
        for key in ("calls", "prompt_tokens", "completion_tokens", "cost_usd"):
            value = data.get(key)
            if isinstance(value, int | float):
                attrs[f"moot.{key}"] = value
        failed = getattr(event, "kind", "") == "unit_failed"
        if failed:
            attrs["error.type"] = "unit_failed"
        correct = getattr(event, "correct", None)
        now = time.monotonic()
        if not self._pending:
            self._pending_since = now
        self._pending.append(
            _Unit(
                f"unit {unit}" + (f" {part}" if part else ""),
                attrs,
                _ns(started),
                _ns(ended),
                correct if isinstance(correct, bool) else None,
                failed,
                self._requests.pop((str(unit), str(part)), []),
            )
        )
        if len(self._pending) >= _UNIT_BATCH or now - self._pending_since >= _UNIT_WAIT_S:
            self._flush_units()

    def _unit(self, unit: _Unit) -> None:
        span = self._tracer.start_span(
            unit.name,
            context=self._single.context,
            kind=self._trace.SpanKind.INTERNAL,
            attributes=unit.attributes,
            start_time=unit.started,
        )
        correct = unit.correct
        if correct is not None:
            span.add_event(
                "gen_ai.evaluation.result",
                {
                    "gen_ai.evaluation.name": "moot.correct",
                    "gen_ai.evaluation.score.value": 1.0 if correct else 0.0,
                    "gen_ai.evaluation.score.label": "correct" if correct else "incorrect",
                },
                unit.ended,
            )
        if unit.requests and span.is_recording():
            context = self._trace.set_span_in_context(span, self._single.context)
            for req, extra in unit.requests:
                self.debates.chat_span(req, context, extra)
        if unit.failed:
            span.set_status(self._trace.StatusCode.ERROR, "unit_failed")
        span.end(unit.ended)


def _fallback_kind(reason: str) -> str:
    """A fallback reason's low-cardinality kind: ``timeout: the debate ...`` -> ``timeout``."""
    return reason.partition(":")[0].strip().replace(" ", "_") or "fallback"


def install_from_env() -> Callable[[], None] | None:
    """Set the global tracer provider from OpenTelemetry's environment variables (the CLI's start).

    What OpenTelemetry's own SDK and exporters do, with their own classes: a
    ``TracerProvider`` (it reads ``OTEL_TRACES_SAMPLER``, ``OTEL_TRACES_SAMPLER_ARG`` and the
    ``OTEL_SPAN_*`` limits itself), a resource from ``OTEL_SERVICE_NAME`` and
    ``OTEL_RESOURCE_ATTRIBUTES`` (service ``moot`` when neither names one), and a
    ``BatchSpanProcessor`` (``OTEL_BSP_*``) per exporter named by ``OTEL_TRACES_EXPORTER``
    (default ``otlp`` when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``
    is set): ``otlp`` is the ``OTLPSpanExporter`` for ``OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL``
    (``http/protobuf`` by default, ``grpc`` with the ``otel-grpc`` extra), which reads its endpoint,
    headers, compression, certificates and timeout from the ``OTEL_EXPORTER_OTLP_*`` variables;
    ``console`` prints spans to stderr (stdout is the command's output); any other name is an
    exporter installed under the SDK's ``opentelemetry_traces_exporter`` entry points; ``none``
    exports nothing.

    Returns the function that flushes and shuts the provider down (call it before exit), or None
    when nothing was installed: no variable, ``OTEL_SDK_DISABLED=true``, a provider already set
    (the application's: left alone), or nothing to export to (one ``moot: warning:`` line says
    why: the extra missing, an exporter that is not installed).
    """
    env = os.environ
    names = _exporter_names(env)
    if not names or env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        _warn(_NEEDS_OTEL)
        return None
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return None  # the application set its own provider: leave it alone
    exporters = []
    for name in names:
        try:
            exporter = _exporter(name, env)
        except Exception as exc:  # noqa: BLE001 - a bad setting (compression, certificate...) costs the trace only
            why = f"{type(exc).__name__}: {redact.text(str(exc))[:200]}"
            _warn(f"cannot set up the {name!r} span exporter ({why}); spans are not exported there")
            continue
        if exporter is not None:
            exporters.append(exporter)
    if not exporters:
        return None
    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "moot"}))
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    _ExportWarning.install()
    return provider.shutdown


_NEEDS_OTEL = "tracing needs the otel extra: pip install 'moot[otel]' (this run is not traced)"


def _warn(message: str) -> None:
    print(f"moot: warning: {message}", file=sys.stderr)


def _exporter_names(env: Mapping[str, str]) -> list[str]:
    """The exporters ``OTEL_TRACES_EXPORTER`` names (``none`` left out), or ``otlp`` for an endpoint."""
    raw = env.get("OTEL_TRACES_EXPORTER", "").strip()
    if not raw:
        endpoint = env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        return ["otlp"] if endpoint else []
    names = dict.fromkeys(name.strip().lower() for name in raw.split(","))
    return [name for name in names if name and name != "none"]


def _exporter(name: str, env: Mapping[str, str]) -> SpanExporter | None:
    """The span exporter ``OTEL_TRACES_EXPORTER`` calls ``name``, or None (then one warning said why)."""
    if name == "otlp":
        return _otlp_exporter(env)
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter(out=sys.stderr)
    # Another exporter (zipkin...): found as the SDK's own configuration finds it, by entry point.
    from importlib.metadata import entry_points

    found = entry_points(group="opentelemetry_traces_exporter", name=name)
    if not found:
        _warn(f"OTEL_TRACES_EXPORTER names {name!r}, which is not installed (no spans are exported there)")
        return None
    exporter: SpanExporter = next(iter(found)).load()()
    return exporter


_GRPC = "opentelemetry.exporter.otlp.proto.grpc.trace_exporter"
_HTTP = "opentelemetry.exporter.otlp.proto.http.trace_exporter"


def _otlp_exporter(env: Mapping[str, str]) -> SpanExporter | None:
    """The OTLP exporter for ``OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL`` (``http/protobuf`` by default)."""
    var = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
    if not env.get(var, "").strip():
        var = "OTEL_EXPORTER_OTLP_PROTOCOL"
    protocol = env.get(var, "").strip().lower() or "http/protobuf"
    module = _HTTP
    if protocol == "grpc":
        module = _GRPC
    elif protocol != "http/protobuf":
        # http/json has no Python exporter; a collector takes http/protobuf on the same endpoint.
        _warn(f"{var}={protocol[:40]!r} is not supported here: exporting with http/protobuf")
    try:
        exporter_class = importlib.import_module(module).OTLPSpanExporter
    except ImportError:
        if module == _GRPC:
            _warn(
                f"{var}=grpc needs OpenTelemetry's gRPC exporter: pip install 'moot[otel-grpc]' "
                "(this run is not traced)"
            )
        else:
            _warn(_NEEDS_OTEL)
        return None
    exporter: SpanExporter = exporter_class()
    return exporter


class _ExportWarning(logging.Handler):
    """The exporter's complaints (an endpoint that cannot be reached...) as one ``moot: warning:`` line.

    The OTLP exporter logs every failed attempt and retry; a run that cannot export its spans
    says so once, then goes on (export runs on the SDK's thread, bounded by the exporter's timeout).
    The handler is added to the exporters' and the batch processor's loggers, as an application
    configures logging; nothing else about those loggers changes: their records still reach the
    root logger's handlers when an application set some. With none (the ``moot`` command), the one
    line is all that is printed: Python's last-resort handler speaks only when no handler is found.
    """

    _installed = False

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.said = False

    def emit(self, record: logging.LogRecord) -> None:
        if self.said:
            return
        self.said = True
        message = record.getMessage()
        first = message.splitlines()[0][:300] if message else record.levelname
        _warn(f"cannot export traces ({redact.text(first)})")

    @classmethod
    def install(cls) -> None:
        if cls._installed:
            return
        cls._installed = True
        handler = cls()
        for name in ("opentelemetry.exporter", "opentelemetry.sdk.trace.export"):
            logging.getLogger(name).addHandler(handler)
