"""OpenTelemetry spans for moot runs, built from the run's event stream (``pip install 'moot[otel]'``).

A :class:`DebateTracer` is a subscriber: it reads the events a debate emits and turns them
into spans following OpenTelemetry's GenAI semantic conventions, version
:data:`SEMCONV_VERSION` (attribute names pinned to it; the conventions are still marked
Development)::

    invoke_workflow {protocol}        gen_ai.conversation.id = the run id; status, decision
    ├── invoke_agent {persona}        one per turn (speakers, moderator, judge): round, phase
    │   └── chat {model}              one per model request: parameters, usage, finish reason
    │       · moot.retry events        transient failures retried inside the request
    ├── invoke_agent {persona}        concurrent turns of a round are siblings
    · gen_ai.evaluation.result        a judge's or moderator's verdict (score, label)

The engine knows nothing of this module: the application layer attaches the tracer where it
attaches the run store. moot uses only the OpenTelemetry API's global tracer provider, as a
library should: :func:`active_tracer` is None (and nothing is built) until the application,
or ``moot``'s CLI from ``OTEL_EXPORTER_OTLP_ENDPOINT`` (:func:`install_from_env`), sets one.
Without the extra nothing here imports OpenTelemetry.

Content (topic, context, prompts, replies, explanations) is left out unless
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is true. Never recorded, with or without
it: error messages (only their class, ``error.type``), API keys, endpoint URLs (only
``server.address`` and ``server.port``).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .transcript import DebateResult, Event, RequestRecord, Turn

if TYPE_CHECKING:  # pragma: no cover - only with the extra
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer

__all__ = [
    "CAPTURE_ENV",
    "SEMCONV_VERSION",
    "DebateTracer",
    "active_tracer",
    "capture_content",
    "install_from_env",
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


def capture_content() -> bool:
    """True when ``$OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is ``true`` (or 1, yes)."""
    return os.environ.get(CAPTURE_ENV, "").strip().lower() in ("true", "1", "yes")


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
    from . import __version__

    tracer: Tracer = provider.get_tracer(
        SCOPE, __version__, schema_url=f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"
    )
    return tracer


def _ns(t: float) -> int:
    return int(t * 1e9)


def provider_name(model: str) -> str:
    """``gen_ai.provider.name`` for a moot model spec: ``openai:gpt-4o`` -> ``openai``.

    moot's offline and in-process models are named ``moot.test`` and ``moot.local``.
    """
    head = model.partition("?")[0].partition(":")[0].strip() or "_OTHER"
    return _PROVIDERS.get(head, head)


def model_name(model: str) -> str:
    """``gen_ai.request.model``: the spec without its provider and options (``openai:m?x=1`` -> ``m``)."""
    head = model.partition("?")[0]
    provider, sep, rest = head.partition(":")
    return rest.strip() if sep else provider.strip()


def _server(endpoint: str | None) -> dict[str, Any]:
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
        [{"role": m.role, "parts": [{"type": "text", "content": m.content}]} for m in messages],
        ensure_ascii=False,
    )


def _reply_json(text: str, finish_reason: str | None) -> str:
    message: dict[str, Any] = {"role": "assistant", "parts": [{"type": "text", "content": text}]}
    message["finish_reason"] = finish_reason or "stop"
    return json.dumps([message], ensure_ascii=False)


@dataclass
class _Run:
    """The open spans of one debate."""

    root: Span
    context: Context
    turns: dict[tuple[int | None, str | None, str | None], tuple[Span, Context, int]] = field(
        default_factory=dict
    )


class DebateTracer:
    """Spans for debate runs, from their events: pass :meth:`on_event` as (or into) ``on_event``.

    One tracer serves any number of concurrent runs (spans are kept per ``debate_id``). A run's
    root span nests under the OpenTelemetry context current when its first event arrives (the
    caller's span: a LangGraph node, a web request), or under ``parent`` when given. Every
    other span is parented explicitly, so nothing here changes the caller's current span.

    Args:
        tracer: an OpenTelemetry tracer (:func:`active_tracer`).
        capture: record content (topic, messages, replies); default :func:`capture_content`.
        parent: the context to nest runs under instead of the current one.
    """

    def __init__(self, tracer: Tracer, *, capture: bool | None = None, parent: Context | None = None) -> None:
        from opentelemetry import trace

        self._tracer = tracer
        self._trace = trace
        self.capture = capture_content() if capture is None else capture
        self._parent = parent
        self._runs: dict[str, _Run] = {}
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
        """Runs whose root span is still open."""
        return len(self._runs)

    # -- spans ----------------------------------------------------------------------------------
    def _open(self, event: Event, start: float) -> _Run:
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_workflow",
            "gen_ai.conversation.id": event.debate_id,
        }
        if self.capture and event.message:
            attrs["moot.topic"] = event.message
        root = self._tracer.start_span(
            "invoke_workflow",
            context=self._parent,
            kind=self._trace.SpanKind.INTERNAL,
            attributes=attrs,
            start_time=_ns(start),
        )
        run = self._runs[event.debate_id] = _Run(root, self._trace.set_span_in_context(root))
        return run

    def _started(self, event: Event) -> None:
        self._open(event, event.time)

    def _turn_started(self, event: Event) -> None:
        run = self._runs.get(event.debate_id) or self._open(event, event.time)
        start = _ns(event.time)
        span = self._tracer.start_span(
            f"invoke_agent {event.speaker}",
            context=run.context,
            kind=self._trace.SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": event.speaker or "",
                "gen_ai.conversation.id": event.debate_id,
                "moot.round": event.round or 0,
                "moot.phase": event.phase or "turn",
            },
            start_time=start,
        )
        key = (event.round, event.speaker, event.phase or "turn")
        run.turns[key] = (span, self._trace.set_span_in_context(span, run.context), start)

    def _request(self, event: Event) -> None:
        req = event.request
        run = self._runs.get(event.debate_id)
        if req is None or run is None:
            return
        turn = run.turns.get((event.round, event.speaker, event.phase or "turn"))
        parent = turn[1] if turn is not None else run.context
        if turn is not None and req.attempt > 0:
            turn[0].add_event("moot.repair", {"moot.attempt": req.attempt}, _ns(req.started))
        self.chat_span(req, parent)

    def chat_span(self, req: RequestRecord, parent: Context) -> None:
        """One ``chat`` span for a finished request, under ``parent`` (its times are the request's)."""
        model = model_name(req.model)
        provider = provider_name(req.model)
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model,
            "gen_ai.output.type": "json",
            "gen_ai.usage.input_tokens": req.usage.prompt_tokens,
            "gen_ai.usage.output_tokens": req.usage.completion_tokens,
            "moot.attempt": req.attempt,
            "moot.requests_sent": req.usage.attempts,
        }
        if req.max_tokens is not None:
            attrs["gen_ai.request.max_tokens"] = req.max_tokens
        if req.temperature is not None:
            attrs["gen_ai.request.temperature"] = req.temperature
        if req.response_model:
            attrs["gen_ai.response.model"] = model_name(req.response_model)
        if req.finish_reason:
            attrs["gen_ai.response.finish_reasons"] = [req.finish_reason]
        if req.endpoint:
            attrs.update(_server(req.endpoint))
        if req.error_kind:
            attrs["error.type"] = req.error_kind
        if self.capture:
            if req.messages:
                attrs["gen_ai.input.messages"] = _messages_json(req.messages)
            if req.reply is not None:
                attrs["gen_ai.output.messages"] = _reply_json(req.reply, req.finish_reason)
        span = self._tracer.start_span(
            f"chat {model}",
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

    def _turn_completed(self, event: Event) -> None:
        run = self._runs.get(event.debate_id)
        turn = event.turn
        if run is None or turn is None:
            return
        opened = run.turns.pop((event.round, event.speaker, turn.phase), None)
        if opened is None:
            return
        span, _, start = opened
        span.set_attributes(
            {
                "gen_ai.provider.name": provider_name(turn.model),
                "gen_ai.request.model": model_name(turn.model),
                "gen_ai.usage.input_tokens": turn.usage.prompt_tokens,
                "gen_ai.usage.output_tokens": turn.usage.completion_tokens,
                "moot.ok": turn.ok,
                "moot.repaired": turn.repaired,
                "moot.trimmed": turn.trimmed,
            }
        )
        if not turn.ok:
            kind = turn.error_kind or "_OTHER"
            span.set_attribute("error.type", kind)
            span.set_status(self._trace.StatusCode.ERROR, kind)
        elif self.capture and turn.content is not None:
            span.set_attribute("moot.output", json.dumps(turn.content, ensure_ascii=False))
        if turn.phase in ("judge", "moderator") and turn.ok:
            self._evaluation(run.root, turn, event.time)
        # A cancelled turn is reported when the run finishes: it ended when it was cut, not then.
        end = start + _ns((turn.latency_ms + turn.queue_ms) / 1000) if turn.cancelled else _ns(event.time)
        span.end(max(start, end))

    def _evaluation(self, root: Span, turn: Turn, time: float) -> None:
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
            attrs["gen_ai.evaluation.explanation"] = turn.text
        root.add_event("gen_ai.evaluation.result", attrs, _ns(time))

    def _completed(self, event: Event) -> None:
        result = event.result
        if result is None:
            return
        if event.debate_id not in self._runs:  # a skipped run: no debate_started, one span
            self._open(event, result.timings.started_at or event.time)
        run = self._runs.pop(event.debate_id)
        for span, _, _ in run.turns.values():  # a turn never reported (should not happen): close it
            span.set_status(self._trace.StatusCode.ERROR, "unfinished")
            span.end(_ns(event.time))
        run.root.update_name(f"invoke_workflow {result.protocol}")
        run.root.set_attributes(self._outcome(result))
        if result.fallback:
            kind = _fallback_kind(result.fallback)
            run.root.set_attribute("error.type", kind)
            run.root.set_status(self._trace.StatusCode.ERROR, kind)
        run.root.end(_ns(event.time))

    def _outcome(self, result: DebateResult) -> dict[str, Any]:
        status = "skipped" if result.skipped else "fell_back" if result.fallback else "complete"
        attrs: dict[str, Any] = {
            "gen_ai.workflow.name": result.protocol,
            "moot.status": status,
            "moot.rounds": len(result.rounds),
            "moot.failed_turns": result.failed_turns,
            "moot.cancelled_turns": result.cancelled_turns,
            "moot.stopped_early": result.stopped_early,
            "gen_ai.usage.input_tokens": result.usage.prompt_tokens,
            "gen_ai.usage.output_tokens": result.usage.completion_tokens,
            "moot.requests": result.usage.attempts,
        }
        decision = result.decision
        if decision is not None:
            attrs["moot.decision.strategy"] = decision.strategy
            if decision.label is not None:
                attrs["moot.decision.label"] = decision.label
            if decision.confidence is not None:
                attrs["moot.decision.confidence"] = decision.confidence
        if self.capture and result.final_answer is not None:
            attrs["moot.final_answer"] = result.final_answer
        return attrs


def _fallback_kind(reason: str) -> str:
    """A fallback reason's low-cardinality kind: ``timeout: the debate ...`` -> ``timeout``."""
    return reason.partition(":")[0].strip().replace(" ", "_") or "fallback"


def install_from_env(environ: Mapping[str, str] | None = None) -> Callable[[], None] | None:
    """Set the global tracer provider from OpenTelemetry's environment variables (the CLI's start).

    With ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` set and the
    extra installed: an SDK provider with a batch processor and the OTLP/HTTP exporter, the
    service named by ``OTEL_SERVICE_NAME`` (default ``moot``); the exporter reads its endpoint,
    headers and timeout from the same variables. Returns the function that flushes and shuts it
    down (call it before exit), or None when nothing was installed: no variable, a provider
    already set, or the extra missing (then one ``moot: warning:`` line says so).
    """
    env = os.environ if environ is None else environ
    if not (env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")):
        return None
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        print(
            "moot: warning: OTEL_EXPORTER_OTLP_ENDPOINT is set but tracing needs the otel extra: "
            "pip install 'moot[otel]' (this run is not traced)",
            file=sys.stderr,
        )
        return None
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return None  # the application set its own provider: leave it alone
    service = env.get("OTEL_SERVICE_NAME") or "moot"
    provider = TracerProvider(resource=Resource.create({"service.name": service}), shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _OneWarning.install()
    return provider.shutdown


class _OneWarning(logging.Handler):
    """The exporter's complaints (an endpoint that cannot be reached...) as one ``moot: warning:`` line.

    The OTLP exporter logs every failed attempt and retry; a run that cannot export its spans
    says so once, then goes on (export runs on the SDK's thread, bounded by the exporter's timeout).
    """

    _installed = False

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.said = False

    def emit(self, record: logging.LogRecord) -> None:
        if self.said:
            return
        self.said = True
        first = record.getMessage().splitlines()[0][:300] if record.getMessage() else record.levelname
        print(f"moot: warning: cannot export traces ({first})", file=sys.stderr)

    @classmethod
    def install(cls) -> None:
        if cls._installed:
            return
        cls._installed = True
        handler = cls()
        for name in ("opentelemetry.exporter", "opentelemetry.sdk.trace.export"):
            log = logging.getLogger(name)
            log.addHandler(handler)
            log.propagate = False
