"""The ``moot`` command's tracer provider (moot.app.sdk) makes the spans the SDK's provider makes.

Each scenario runs once through OpenTelemetry's SDK provider and once through moot's, with
the same counting id generator, and the spans the span processors received are compared
field by field: names, ids, parents, kinds, times, attributes (cleaned, truncated, dropped),
events, links, status, resource and scope.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import context, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider, sampling
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    StatusCode,
    TraceFlags,
    TraceState,
)
from opentelemetry.trace.status import Status

from moot.app.sdk import TracerProvider as MootTracerProvider


class _Counting(IdGenerator):
    """Ids 1, 2, 3...: both providers give the same spans the same ids."""

    def __init__(self) -> None:
        self.n = 0

    def generate_span_id(self) -> int:
        self.n += 1
        return self.n

    def generate_trace_id(self) -> int:
        self.n += 1
        return 0xABC0000 + self.n


Scenario = Callable[[trace.Tracer], None]


def _view(span: ReadableSpan) -> dict[str, Any]:
    def attrs(mapping: Any) -> dict[str, Any]:
        return dict(mapping or {})

    def when(t: int | None) -> int | str | None:
        return "now" if t is not None and t > 10**12 else t  # a clock reading: the same only in kind

    ctx = span.context
    assert ctx is not None
    return {
        "name": span.name,
        "ids": (
            ctx.trace_id,
            ctx.span_id,
            int(ctx.trace_flags),
            str(ctx.trace_state.to_header()),
            ctx.is_remote,
        ),
        "parent": (span.parent.span_id, span.parent.is_remote) if span.parent else None,
        "kind": span.kind,
        "times": (when(span.start_time), when(span.end_time)),
        "attributes": attrs(span.attributes),
        "dropped_attributes": span.dropped_attributes,
        "events": [
            (e.name, attrs(e.attributes), when(e.timestamp), e.dropped_attributes) for e in span.events
        ],
        "dropped_events": span.dropped_events,
        "links": [
            (link.context.trace_id, link.context.span_id, attrs(link.attributes), link.dropped_attributes)
            for link in span.links
        ],
        "dropped_links": span.dropped_links,
        "status": (span.status.status_code, span.status.description),
        "resource": attrs(span.resource.attributes),
        "scope": (
            span.instrumentation_scope.name if span.instrumentation_scope else None,
            span.instrumentation_scope.version if span.instrumentation_scope else None,
            span.instrumentation_scope.schema_url if span.instrumentation_scope else None,
        ),
    }


def _run(provider_class: type[TracerProvider], scenario: Scenario, **options: Any) -> list[dict[str, Any]]:
    exporter = InMemorySpanExporter()
    provider = provider_class(
        resource=Resource.create({"service.name": "t"}), id_generator=_Counting(), **options
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    scenario(provider.get_tracer("moot", "1.0", schema_url="https://opentelemetry.io/schemas/1.41.0"))
    provider.shutdown()
    return [_view(s) for s in exporter.get_finished_spans()]


def _same(scenario: Scenario, **options: Any) -> list[dict[str, Any]]:
    """The scenario's spans through both providers: equal, and returned for more checks."""
    sdk = _run(TracerProvider, scenario, **options)
    moot = _run(MootTracerProvider, scenario, **options)
    assert moot == sdk
    return moot


def test_the_tracer_is_moots_own() -> None:
    provider = MootTracerProvider()
    tracer = provider.get_tracer("moot")
    assert type(tracer).__module__ == "moot.app.sdk"
    assert provider.get_tracer("moot") is tracer


def test_an_sdk_whose_span_keeps_other_fields_gets_its_own_tracer(monkeypatch: pytest.MonkeyPatch) -> None:
    import moot.app.sdk as lean

    assert lean.layout_known()  # this SDK: the lean span is used (the test above)
    monkeypatch.setattr(lean, "_SPAN_FIELDS", lean._SPAN_FIELDS - {"_links"})  # as if the SDK kept more
    assert not lean.layout_known()
    tracer = MootTracerProvider().get_tracer("moot")
    assert type(tracer).__module__.startswith("opentelemetry.sdk")
    with tracer.start_as_current_span("still traced") as span:
        assert span.is_recording()


def test_a_span_tree_with_attributes_events_and_status() -> None:
    def scenario(tracer: trace.Tracer) -> None:
        root = tracer.start_span("root", attributes={"a": "x", "n": 3, "f": 0.5, "b": True}, start_time=10)
        parent = trace.set_span_in_context(root)
        for i in range(3):
            child = tracer.start_span(
                f"chat {i}",
                context=parent,
                kind=SpanKind.CLIENT,
                attributes={"gen_ai.response.finish_reasons": ("stop",), "i": i},
                start_time=20 + i,
            )
            child.add_event("moot.retry", {"error.type": "E", "wait": 0.5}, 25 + i)
            if i == 1:
                child.set_status(StatusCode.ERROR, "E")
            child.end(30 + i)
        root.set_attribute("moot.status", "complete")
        root.set_attributes({"moot.units": 3, "moot.score": 0.5})
        root.end(40)

    spans = _same(scenario)
    assert [s["name"] for s in spans] == ["chat 0", "chat 1", "chat 2", "root"]
    assert spans[1]["status"] == (StatusCode.ERROR, "E")
    assert spans[3]["attributes"]["moot.units"] == 3


def test_attributes_that_need_cleaning_are_cleaned_as_the_sdk_cleans_them() -> None:
    def scenario(tracer: trace.Tracer) -> None:
        span = tracer.start_span(
            "s",
            attributes={
                "list": ["a", "b"],
                "ints": (1, 2),
                "mixed": ("a", 1),
                "none": None,
                "": "empty key",
                "obj": object(),
                "nested": {"k": "v"},
                "bytes": b"x",
            },
            start_time=1,
        )
        span.add_event("e", {"list": [1, 2], "none": None}, 2)
        span.end(3)

    _same(scenario)


def test_limits_truncate_and_count_what_is_dropped() -> None:
    limits = SpanLimits(
        max_span_attributes=3,
        max_attribute_length=4,
        max_events=2,
        max_links=1,
        max_event_attributes=1,
        max_link_attributes=1,
    )

    def scenario(tracer: trace.Tracer) -> None:
        other = SpanContext(0x1, 0x2, is_remote=True, trace_flags=TraceFlags(1))
        span = tracer.start_span(
            "s",
            attributes={"a": "long value", "b": ("longer", "x"), "c": 1, "d": 2},
            links=[Link(other, {"x": 1, "y": 2}), Link(other)],
            start_time=1,
        )
        span.set_attribute("e", "another long value")
        for i in range(4):
            span.add_event(f"e{i}", {"k": "long text", "j": 1}, 2 + i)
        span.add_link(other, {"z": 1})
        span.end(9)
        short = tracer.start_span("short", attributes={"a": "abc", "t": ("ab",)}, start_time=1)
        short.end(2)

    spans = _same(scenario, span_limits=limits)
    assert spans[0]["dropped_attributes"] > 0 and spans[0]["dropped_events"] == 2


def test_exceptions_status_rules_names_and_ended_spans() -> None:
    def scenario(tracer: trace.Tracer) -> None:
        with pytest.raises(ValueError), tracer.start_span("with", start_time=1) as span:
            span.update_name("renamed")
            raise ValueError("boom")
        quiet = tracer.start_span(
            "quiet", start_time=1, record_exception=False, set_status_on_exception=False
        )
        with pytest.raises(KeyError), quiet:
            raise KeyError("k")
        ok = tracer.start_span("ok", start_time=1)
        ok.set_status(Status(StatusCode.UNSET))
        ok.set_status(StatusCode.OK)
        ok.set_status(StatusCode.ERROR, "ignored after OK")
        ok.record_exception(RuntimeError("r"), {"extra": 1}, timestamp=2)
        ok.end(3)
        assert not ok.is_recording()
        ok.set_attribute("late", 1)
        ok.add_event("late")
        ok.update_name("late")
        ok.end(4)  # a second end: ignored

    spans = _same(scenario)
    names = [s["name"] for s in spans]
    assert names == ["renamed", "quiet", "ok"]
    assert spans[0]["status"][0] is StatusCode.ERROR and spans[0]["events"][0][0] == "exception"
    assert spans[1]["events"] == [] and spans[2]["status"] == (StatusCode.OK, None)


def test_current_spans_remote_parents_and_trace_state() -> None:
    remote = SpanContext(
        0x0AF7651916CD43DD8448EB211C80319C,
        0xB7AD6B7169203331,
        is_remote=True,
        trace_flags=TraceFlags(1),
        trace_state=TraceState([("vendor", "x")]),
    )

    def scenario(tracer: trace.Tracer) -> None:
        token = context.attach(trace.set_span_in_context(NonRecordingSpan(remote)))
        try:
            with tracer.start_as_current_span("outer", start_time=1, end_on_exit=False) as outer:
                inner = tracer.start_span("inner", start_time=2)
                inner.end(3)
            outer.end(4)
        finally:
            context.detach(token)

    spans = _same(scenario)
    inner, outer = spans
    assert outer["parent"] == (remote.span_id, True) and inner["parent"] == (outer["ids"][1], False)
    assert outer["ids"][0] == remote.trace_id and "vendor=x" in outer["ids"][3]


@pytest.mark.parametrize(
    "sampler",
    [
        sampling.ALWAYS_OFF,
        sampling.ALWAYS_ON,
        sampling.TraceIdRatioBased(0.0),
        sampling.ParentBased(sampling.ALWAYS_ON, remote_parent_sampled=sampling.ALWAYS_OFF),
    ],
)
def test_samplers_decide_as_they_do_for_the_sdk(sampler: sampling.Sampler) -> None:
    remote = SpanContext(0x5, 0x6, is_remote=True, trace_flags=TraceFlags(1))
    recording: list[bool] = []

    def scenario(tracer: trace.Tracer) -> None:
        root = tracer.start_span("root", start_time=1)
        recording.append(root.is_recording())
        child = tracer.start_span("child", context=trace.set_span_in_context(root), start_time=2)
        child.end(3)
        root.end(4)
        under = tracer.start_span(
            "under remote", context=trace.set_span_in_context(NonRecordingSpan(remote)), start_time=5
        )
        recording.append(under.is_recording())
        under.end(6)

    _same(scenario, sampler=sampler)
    assert recording[:2] == recording[2:]  # the same decisions through both providers


def test_an_unsampled_parent_makes_unsampled_children() -> None:
    unsampled = SpanContext(0x7, 0x8, is_remote=False, trace_flags=TraceFlags(0))

    def scenario(tracer: trace.Tracer) -> None:
        span = tracer.start_span("s", context=trace.set_span_in_context(NonRecordingSpan(unsampled)))
        assert not span.is_recording() and not span.get_span_context().trace_flags.sampled
        span.end()

    assert _same(scenario) == []


def test_every_span_processor_hears_every_span() -> None:
    class Starts(SimpleSpanProcessor):
        def __init__(self, exporter: InMemorySpanExporter) -> None:
            super().__init__(exporter)
            self.started: list[str] = []

        def on_start(self, span: Any, parent_context: Any = None) -> None:
            self.started.append(span.name)

    first, second = InMemorySpanExporter(), InMemorySpanExporter()
    provider = MootTracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(first))
    tracer = provider.get_tracer("moot")
    tracer.start_span("one").end()
    starts = Starts(second)
    provider.add_span_processor(starts)
    tracer.start_span("two").end()
    assert [s.name for s in first.get_finished_spans()] == ["one", "two"]
    assert [s.name for s in second.get_finished_spans()] == ["two"] and starts.started == ["two"]


def test_moots_encoder_writes_what_the_official_encoder_writes_for_these_spans() -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as official
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from moot.app.otlp import encode_spans

    exporter = InMemorySpanExporter()
    provider = MootTracerProvider(resource=Resource.create({"service.name": "t"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("moot", "1.0", schema_url="https://opentelemetry.io/schemas/1.41.0")
    root = tracer.start_span("root", attributes={"a": "x"}, start_time=1)
    child = tracer.start_span(
        "chat m",
        context=trace.set_span_in_context(root),
        kind=SpanKind.CLIENT,
        attributes={"gen_ai.response.finish_reasons": ("stop",), "n": 3, "t": 0.5, "b": True},
        start_time=2,
    )
    child.add_event("moot.retry", {"error.type": "E"}, 3)
    child.set_status(StatusCode.ERROR, "E")
    child.end(4)
    root.add_link(SpanContext(0x1, 0x2, is_remote=True, trace_flags=TraceFlags(1)), {"moot.link": "x"})
    root.end(5)
    spans = exporter.get_finished_spans()
    ours = ExportTraceServiceRequest.FromString(encode_spans(spans))
    assert ours == official(spans)
