"""The ``moot`` command's tracer provider: the SDK's, with a leaner span (needs ``moot[otel]``).

The SDK's span is built for spans that live a while and change from several threads: each
takes three locks, two bounded lists, a bounded attribute mapping that checks and copies
each attribute, a sampler call and, when it ends, a second object (the ``ReadableSpan`` its
span processors receive). moot makes its spans when the work they describe has ended, each
with its attributes, times and events at once, thousands a run (a span per model call):
about 20 us of CPU each through the SDK, ~5 us through this provider (a tight loop of spans
with a bench chat span's 12 attributes; tests/test_tracing_sdk.py checks that both make the
same spans).

:class:`TracerProvider` is the SDK's provider (same resource, sampler, id generator, limits,
span processors; what :func:`moot.app.tracing.install_from_env` installs) whose tracers make
:class:`_Span`: an OpenTelemetry API span that is also the SDK's ``ReadableSpan`` (as the SDK's
span is), keeps what it is told in plain fields and, when it ends, hands itself to the span
processors (the SDK's hands them a copy: its span may still change; this one ignores every
change once ended). Attributes that need no cleaning under the span limits (strings, numbers,
booleans, tuples of strings, within the count and length limits) are kept as given; anything
else goes through the SDK's own ``BoundedAttributes``, which cleans, truncates and counts what
it drops as the SDK's span does. The sampler is asked as the SDK asks it, except the default
(parent-based, always on), whose answer is known without the call.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from time import time_ns
from types import TracebackType
from typing import Any

from opentelemetry import context as context_api
from opentelemetry import trace as trace_api
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import (
    Event,
    ReadableSpan,
    SpanLimits,
    SpanProcessor,
    SynchronousMultiSpanProcessor,
    sampling,
)
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.util import BoundedList
from opentelemetry.sdk.util.instrumentation import InstrumentationInfo, InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags, TraceState
from opentelemetry.trace.status import Status, StatusCode
from opentelemetry.util import types

import moot.app.otlp as otlp

__all__ = ["TracerProvider"]

_ATOMS = frozenset((str, bool, int, float))
_RANDOM_TRACE_ID = int(getattr(TraceFlags, "RANDOM_TRACE_ID", 0))
_TRACE_FLAGS = {
    n: TraceFlags(n) for n in range(4)
}  # immutable ints, with a __dict__: shared, not made per span
_UNSET = Status(StatusCode.UNSET)  # immutable: one for every span whose status is not set


_SPAN_FIELDS = frozenset(
    {
        "_name", "_context", "_parent", "_kind", "_start_time", "_end_time", "_attributes", "_events",
        "_links", "_status", "_resource", "_instrumentation_info", "_instrumentation_scope",
    }
)  # fmt: skip
"""What :class:`_Span` keeps under ``ReadableSpan``'s own names (its properties read them)."""


def layout_known() -> bool:
    """Whether this SDK's ``ReadableSpan`` keeps nothing but :data:`_SPAN_FIELDS`.

    :class:`_Span` is read through ``ReadableSpan``'s properties, which read those fields: an SDK
    version that keeps another field (or slots) would find it missing, so its own span is used.
    """
    try:
        fields = set(vars(ReadableSpan(name="probe")))
    except TypeError:  # no __dict__, or another constructor
        return False
    return fields <= _SPAN_FIELDS


def _valid_link(context: SpanContext | None, attributes: types.Attributes) -> bool:
    """A link the SDK keeps: a valid context, or one with attributes or a trace state."""
    return bool(context and (context.is_valid or attributes or context.trace_state))


def _attributes(attributes: types.Attributes, limit: int | None, length: int | None) -> Mapping[str, Any]:
    """``attributes`` as the span keeps them: as given when nothing needs cleaning, else the SDK's way."""
    if not attributes:
        return {}
    items: Mapping[str, Any] = attributes
    if limit is None or len(items) <= limit:
        for key, value in items.items():
            cls = value.__class__
            if key.__class__ is not str or not key:
                break
            if cls is str:
                if length is not None and len(value) > length:
                    break
            elif cls is tuple:
                if not all(v.__class__ is str and (length is None or len(v) <= length) for v in value):
                    break
            elif cls not in _ATOMS:
                break
        else:
            return dict(items)
    return BoundedAttributes(limit, attributes, immutable=True, max_value_len=length)


class _Span(trace_api.Span, ReadableSpan):
    """A recording span, which is also the ``ReadableSpan`` its span processors receive when it ends.

    As the SDK's span, it is both (``ReadableSpan``'s fields, read by its properties); the SDK's
    hands its processors a copy, as its span may still change: this one does not once ended.
    """

    def __init__(
        self,
        tracer: _Tracer,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        kind: SpanKind,
        attributes: Mapping[str, Any],
        links: Sequence[trace_api.Link],
        start: int,
        record_exception: bool,
        set_status_on_exception: bool,
    ) -> None:
        self._tracer = tracer
        self._name = name
        self._context = context
        self._parent = parent
        self._kind = kind
        self._start_time = start
        self._end_time: int | None = None
        self._attributes = attributes
        self._events: Sequence[Event] = ()  # a list once an event comes (most spans have none)
        self._links = links
        self._status = _UNSET
        self._record_exception = record_exception
        self._set_status_on_exception = set_status_on_exception

    @property
    def _resource(self) -> Resource:  # type: ignore[override]
        return self._tracer.provider.resource

    @property
    def _instrumentation_info(self) -> InstrumentationInfo:  # type: ignore[override]
        return self._tracer.info

    @property
    def _instrumentation_scope(self) -> InstrumentationScope:  # type: ignore[override]
        return self._tracer.scope

    def __repr__(self) -> str:
        return f'{type(self).__name__}(name="{self._name}", context={self._context})'

    def get_span_context(self) -> SpanContext:
        return self._context  # type: ignore[return-value]  # always set: ReadableSpan allows None

    def is_recording(self) -> bool:
        return self._end_time is None

    def _writable(self) -> BoundedAttributes:
        """The attributes as a mapping that takes new keys under the span limits (the SDK's)."""
        attrs = self._attributes
        if isinstance(attrs, BoundedAttributes) and not attrs._immutable:  # noqa: SLF001
            return attrs
        limits = self._tracer.limits
        writable = BoundedAttributes(
            limits.max_span_attributes, attrs, immutable=False, max_value_len=limits.max_span_attribute_length
        )
        if isinstance(attrs, BoundedAttributes):
            writable.dropped += attrs.dropped
        self._attributes = writable
        return writable

    def set_attributes(self, attributes: Mapping[str, types.AnyValue]) -> None:
        if self._end_time is not None:
            return
        target = self._writable()
        for key, value in attributes.items():
            target[key] = value

    def set_attribute(self, key: str, value: types.AnyValue) -> None:
        if self._end_time is not None:
            return
        self._writable()[key] = value

    def add_event(self, name: str, attributes: types.Attributes = None, timestamp: int | None = None) -> None:
        if self._end_time is not None:
            return
        limits = self._tracer.limits
        events = self._events
        if type(events) is tuple:
            events = self._events = []
        if limits.max_events is not None and len(events) >= limits.max_events and type(events) is list:
            events = self._events = BoundedList.from_seq(limits.max_events, events)  # drops and counts
        cleaned = _attributes(attributes, limits.max_event_attributes, limits.max_attribute_length)
        events.append(Event(name, cleaned, timestamp if timestamp is not None else time_ns()))  # type: ignore[attr-defined]

    def add_link(self, context: SpanContext, attributes: types.Attributes = None) -> None:
        if self._end_time is not None or not _valid_link(context, attributes):
            return
        limits = self._tracer.limits
        cleaned = BoundedAttributes(
            limits.max_link_attributes, attributes, immutable=True, max_value_len=limits.max_attribute_length
        )
        if type(self._links) is not BoundedList:
            self._links = BoundedList.from_seq(limits.max_links, self._links)
        self._links.append(trace_api.Link(context, cleaned))

    def update_name(self, name: str) -> None:
        if self._end_time is None:
            self._name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        if self._end_time is not None:
            return
        if self._status.status_code is StatusCode.OK:
            return  # the SDK's rule: OK is final
        if isinstance(status, Status):
            if status.status_code is not StatusCode.UNSET:
                self._status = status
        elif status is not StatusCode.UNSET:
            self._status = Status(status, description)

    def record_exception(
        self,
        exception: BaseException,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        import traceback

        kind = type(exception)
        module = kind.__module__
        attrs: dict[str, Any] = {
            "exception.type": f"{module}.{kind.__qualname__}"
            if module and module != "builtins"
            else kind.__qualname__,
            "exception.message": str(exception),
            "exception.stacktrace": "".join(traceback.format_exception(exception)),
            "exception.escaped": str(escaped),
        }
        if attributes:
            attrs.update(attributes)
        self.add_event("exception", attrs, timestamp)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        if exc_val is not None and self._end_time is None:
            if self._record_exception:
                self.record_exception(exc_val, escaped=True)
            if self._set_status_on_exception:
                self.set_status(Status(StatusCode.ERROR, f"{type(exc_val).__name__}: {exc_val}"))
        super().__exit__(exc_type, exc_val, exc_tb)

    def end(self, end_time: int | None = None) -> None:
        if self._end_time is not None:
            return
        self._end_time = end_time if end_time is not None else time_ns()
        self._tracer.provider.target.on_end(self)


class _Tracer(trace_api.Tracer):
    """A tracer making :class:`_Span` for one instrumentation scope of a :class:`TracerProvider`."""

    def __init__(
        self, provider: TracerProvider, info: InstrumentationInfo, scope: InstrumentationScope
    ) -> None:
        self.provider = provider
        self.limits = provider.limits
        self.info = info
        self.scope = scope

    def start_span(
        self,
        name: str,
        context: context_api.Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[trace_api.Link] | None = (),
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace_api.Span:
        """A span as the SDK's tracer starts it (see the module docstring for what differs: only its cost)."""
        provider = self.provider
        parent: SpanContext | None = trace_api.get_current_span(context).get_span_context()
        if parent is not None and not isinstance(parent, SpanContext):
            raise TypeError("parent_span_context must be a SpanContext or None.")
        if parent is None or not parent.is_valid:
            parent = None
            trace_id = provider.id_generator.generate_trace_id()
        else:
            trace_id = parent.trace_id
        sampler = provider.sampler
        trace_state: TraceState | None
        if sampler is sampling.DEFAULT_ON:  # parent-based, always on: the parent's decision, its state
            sampled = parent is None or parent.trace_flags.sampled
            recording = sampled
            trace_state = parent.trace_state if parent is not None else None
        else:
            result = sampler.should_sample(context, trace_id, name, kind, attributes, links)
            sampled = result.decision is sampling.Decision.RECORD_AND_SAMPLE
            recording = result.decision is not sampling.Decision.DROP
            trace_state = result.trace_state
            attributes = result.attributes
        flags = TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT
        if _RANDOM_TRACE_ID and (
            provider.random_ids if parent is None else parent.trace_flags & _RANDOM_TRACE_ID
        ):
            flags |= _RANDOM_TRACE_ID
        span_context = SpanContext(
            trace_id,
            provider.id_generator.generate_span_id(),
            is_remote=False,
            trace_flags=_TRACE_FLAGS[flags] if flags in _TRACE_FLAGS else TraceFlags(flags),
            trace_state=trace_state,
        )
        if not recording:
            return trace_api.NonRecordingSpan(context=span_context)
        limits = self.limits
        kept: Sequence[trace_api.Link] = ()
        if links:
            valid = [
                trace_api.Link(
                    link.context,
                    BoundedAttributes(
                        limits.max_link_attributes,
                        link.attributes,
                        immutable=True,
                        max_value_len=limits.max_attribute_length,
                    ),
                )
                for link in links
                if link and _valid_link(link.context, link.attributes)
            ]
            kept = BoundedList.from_seq(limits.max_links, valid)
        span = _Span(
            self,
            name,
            span_context,
            parent,
            kind,
            _attributes(attributes, limits.max_span_attributes, limits.max_span_attribute_length),
            kept,
            start_time if start_time is not None else time_ns(),
            record_exception,
            set_status_on_exception,
        )
        if provider.starts:
            provider.target.on_start(span, parent_context=context)  # type: ignore[arg-type]
        return span

    @contextmanager  # the API's own decorator (a context manager usable as a decorator too) is private
    def start_as_current_span(  # type: ignore[override]
        self,
        name: str,
        context: context_api.Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[trace_api.Link] | None = (),
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Iterator[trace_api.Span]:
        """:meth:`start_span`, current for the ``with`` block."""
        span = self.start_span(
            name, context, kind, attributes, links, start_time, record_exception, set_status_on_exception
        )
        with trace_api.use_span(
            span,
            end_on_exit=end_on_exit,
            record_exception=record_exception,
            set_status_on_exception=set_status_on_exception,
        ) as current:
            yield current


class TracerProvider(SdkTracerProvider):
    """The SDK's tracer provider whose tracers make leaner spans (see the module docstring).

    Takes the SDK provider's arguments but ``active_span_processor`` (it makes its own, to which
    ``add_span_processor`` adds as usual). With the SDK's internal metrics switched on
    (``OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED``), its tracers are the SDK's own.
    """

    def __init__(self, **kwargs: Any) -> None:
        """Build the SDK provider (``resource``, ``sampler``, ``span_limits``... as the SDK's)."""
        self.processor = SynchronousMultiSpanProcessor()  # type: ignore[no-untyped-call]
        self.limits: SpanLimits = kwargs.pop("span_limits", None) or SpanLimits()
        super().__init__(active_span_processor=self.processor, span_limits=self.limits, **kwargs)
        self._added: list[SpanProcessor] = []
        self.target: SpanProcessor = self.processor
        """Where ended spans go: the one span processor when there is one, else all of them."""
        self.starts = True
        """Whether a started span is told to the processors (not when that is known to do nothing)."""
        check = getattr(self.id_generator, "is_trace_id_random", None)
        self.random_ids = bool(check()) if callable(check) else False
        self._lean: dict[int, tuple[trace_api.Tracer, _Tracer]] = {}
        self._layout: bool | None = None  # layout_known(), asked at the first get_tracer

    def add_span_processor(self, span_processor: SpanProcessor) -> None:
        """Add a span processor, as the SDK's provider does."""
        super().add_span_processor(span_processor)
        self._added.append(span_processor)
        only = self._added[0] if len(self._added) == 1 else None
        self.target = only if only is not None else self.processor
        # The batch processor's on_start does nothing: a span tells it only its end.
        self.starts = type(only) is not BatchSpanProcessor

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: types.Attributes = None,
    ) -> trace_api.Tracer:
        """The SDK's tracer for that scope, or one making :class:`_Span` for it."""
        sdk_tracer = super().get_tracer(
            instrumenting_module_name, instrumenting_library_version, schema_url, attributes
        )
        scope = getattr(sdk_tracer, "_instrumentation_scope", None)
        info = getattr(sdk_tracer, "instrumentation_info", None)
        if self._layout is None:
            self._layout = layout_known()
        if (
            not self._layout
            or not isinstance(scope, InstrumentationScope)
            or not isinstance(info, InstrumentationInfo)
            or os.environ.get("OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED", "").strip().lower() == "true"
            or not getattr(sdk_tracer, "_is_enabled", lambda: True)()
        ):
            return sdk_tracer  # an SDK whose span differs, the SDK's own metrics, or a disabled tracer
        found = self._lean.get(id(sdk_tracer))
        if found is None or found[0] is not sdk_tracer:
            found = self._lean[id(sdk_tracer)] = (sdk_tracer, _Tracer(self, info, scope))
        return found[1]


otlp._PLAIN_SPANS.add(_Span)  # its fields are ReadableSpan's: the encoder reads them directly
