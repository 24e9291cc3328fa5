"""moot's OTLP span encoder writes what OpenTelemetry's own encoder writes (parsed back and compared)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread
from typing import Any

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as official_encode
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    StatusCode,
    TraceFlags,
    TraceState,
)

from moot.app.otlp import SpanExporter, encode_spans


def _spans(resource: Resource | None = None) -> list[ReadableSpan]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=resource or Resource.create({"service.name": "moot", "n": 3}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("moot", "1.2.3", schema_url="https://opentelemetry.io/schemas/1.41.0")
    other = provider.get_tracer("other")
    remote = SpanContext(
        0x0AF7651916CD43DD8448EB211C80319C,
        0xB7AD6B7169203331,
        is_remote=True,
        trace_flags=TraceFlags(1),
        trace_state=TraceState([("vendor", "x1"), ("moot", "y")]),
    )
    values: dict[str, Any] = {
        "s": "text",
        "unicode": "débat — 論争 \U0001f600",
        "long": "x" * 300,
        "t": True,
        "f": False,
        "i": 7,
        "zero": 0,
        "neg": -5,
        "big": 2**62,
        "d": 0.25,
        "nan": float("nan"),
        "strs": ("stop", "length"),
        "ints": [1, 2, 300],
        "bools": (True, False),
        "floats": (0.5, -1.0),
        "empty": "",
    }
    with tracer.start_as_current_span(
        "root", context=trace.set_span_in_context(NonRecordingSpan(remote)), attributes=values
    ) as root:
        root.add_event("gen_ai.evaluation.result", {"score": 0.9, "label": "pro"}, timestamp=123)
        root.add_event("bare")
        child = tracer.start_span(
            "chat m",
            kind=SpanKind.CLIENT,
            attributes={"gen_ai.operation.name": "chat", "server.port": 8080},
            links=[Link(remote, {"why": "batch"}), Link(root.get_span_context())],
            start_time=1_700_000_000_000_000_000,
        )
        child.set_status(StatusCode.ERROR, "RateLimited")
        child.end(end_time=1_700_000_000_500_000_000)
        ok = other.start_span("ok", kind=SpanKind.SERVER)
        ok.set_status(StatusCode.OK)
        ok.end()
        for kind in (SpanKind.PRODUCER, SpanKind.CONSUMER, SpanKind.INTERNAL):
            tracer.start_span(f"k{kind.value}", kind=kind).end()
    return list(memory.get_finished_spans())


def _parsed(data: bytes) -> ExportTraceServiceRequest:
    message = ExportTraceServiceRequest()
    message.ParseFromString(data)
    return message


def test_the_encoding_parses_to_what_the_official_encoder_makes() -> None:
    spans = _spans()
    ours, theirs = _parsed(encode_spans(spans)), official_encode(spans)
    # NaN != NaN: compare those attributes apart, the rest as whole messages.
    for message in (ours, theirs):
        for kv in message.resource_spans[0].scope_spans[0].spans[-1].attributes:
            if kv.key == "nan":
                assert kv.value.double_value != kv.value.double_value
                kv.value.double_value = 0.0
    assert ours == theirs
    assert len(ours.resource_spans[0].scope_spans) == 2  # spans grouped by their scope
    assert encode_spans(spans) == encode_spans(spans)  # the caches change nothing


def test_equal_values_of_other_types_are_encoded_each_as_itself() -> None:
    # 1 == 1.0 == True, and so are tuples of them: the encoder's cache must not mix them up.
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("moot")
    for value in (1, True, 1.0, (1, 2), (True, False), (1.0, 2.0), ("1",), "1"):
        tracer.start_span("s", attributes={"v": value, "w": value}).end()
    spans = memory.get_finished_spans()
    assert _parsed(encode_spans(spans)) == official_encode(spans)
    assert _parsed(encode_spans(spans)) == official_encode(spans)  # again, from the cache


def test_spans_of_two_resources_are_two_resource_spans() -> None:
    a, b = _spans(Resource.create({"service.name": "a"})), _spans(Resource.create({"service.name": "b"}))
    mixed = a[:2] + b + a[2:]
    ours = _parsed(encode_spans(mixed))
    assert len(ours.resource_spans) == 2
    for rs in ours.resource_spans:
        for kv in rs.scope_spans[0].spans[-1].attributes:
            if kv.key == "nan":
                kv.value.double_value = 0.0
    theirs = official_encode(mixed)
    for rs in theirs.resource_spans:
        for kv in rs.scope_spans[0].spans[-1].attributes:
            if kv.key == "nan":
                kv.value.double_value = 0.0
    assert ours == theirs


def test_an_unknown_value_type_falls_back_to_the_exporters_own_encoding(sink: _Sink) -> None:
    class Odd:
        pass

    span = _with_attribute(Odd())
    with pytest.raises(TypeError):
        encode_spans([span])
    exporter = SpanExporter(endpoint=sink.url, timeout=5)
    assert exporter.export([span]) is SpanExportResult.SUCCESS
    (body,) = sink.bodies
    (posted,) = _parsed(body).resource_spans[0].scope_spans[0].spans
    assert posted.name == "odd"
    exporter.shutdown()


def _with_attribute(value: Any) -> ReadableSpan:
    span = _spans()[0]
    return ReadableSpan(
        name="odd",
        context=span.get_span_context(),
        attributes={"odd": value},
        resource=span.resource,
        start_time=1,
        end_time=2,
    )


class _Sink:
    """An OTLP/HTTP endpoint on 127.0.0.1 keeping the requests it is posted."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
                pass

            def do_POST(self) -> None:
                sink.bodies.append(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def sink() -> Iterator[_Sink]:
    s = _Sink()
    yield s
    s.server.shutdown()
    s.server.server_close()


def test_the_exporter_posts_the_encoding_through_the_exporters_client(sink: _Sink) -> None:
    spans = _spans()
    exporter = SpanExporter(endpoint=sink.url, timeout=5)
    assert exporter.export(spans) is SpanExportResult.SUCCESS
    assert sink.bodies == [encode_spans(spans)]
    exporter.shutdown()


def test_the_exporter_reports_an_unreachable_endpoint_within_its_timeout() -> None:
    exporter = SpanExporter(endpoint="http://127.0.0.1:9/v1/traces", timeout=1)
    started = time.monotonic()
    assert exporter.export(_spans()) is SpanExportResult.FAILURE
    assert time.monotonic() - started < 5
    exporter.shutdown()


def test_an_integer_beyond_int64_goes_the_exporters_own_way(sink: _Sink) -> None:
    span = _with_attribute(2**70)
    with pytest.raises(TypeError):
        encode_spans([span])
    exporter = SpanExporter(endpoint=sink.url, timeout=5)
    assert exporter.export([span]) is SpanExportResult.SUCCESS
    (body,) = sink.bodies
    assert _parsed(body) == official_encode([span])  # the official encoder drops that attribute
    exporter.shutdown()


_FRESH = """
import sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import moot.app.otlp as otlp
assert "google.protobuf" not in sys.modules, "importing the exporter loaded protobuf"
bodies = []
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_POST(self):
        bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
server = ThreadingHTTPServer(("127.0.0.1", 0), H)
threading.Thread(target=server.serve_forever, daemon=True).start()
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
span = TracerProvider().get_tracer("t").start_span("odd", attributes={"big": 2**70, "n": 1})
span.end()
exporter = otlp.SpanExporter(endpoint=f"http://127.0.0.1:{server.server_address[1]}/v1/traces", timeout=5)
assert exporter.export([span]).name == "SUCCESS"
assert "requests" not in sys.modules, "a plain http:// endpoint loaded requests"
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
assert bodies == [encode_spans([span]).SerializeToString()]
import opentelemetry.exporter.otlp.proto.http.trace_exporter as official
assert official.encode_spans is encode_spans
print("ok")
"""


def test_the_exporter_loads_protobuf_only_when_its_own_path_is_taken() -> None:
    """Importing moot's exporter leaves the protobuf runtime unloaded (~26 ms of every traced start);
    the exporter's own path (an integer beyond int64) imports it then and posts what it encodes."""
    import os
    import subprocess
    import sys

    import moot

    src = os.path.dirname(os.path.dirname(moot.__file__))
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", _FRESH], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


class _Flaky(_Sink):
    """A sink answering its first post 503 with Retry-After: 0, then 200."""

    def __init__(self) -> None:
        super().__init__()
        handler = self.server.RequestHandlerClass
        sink = self
        first = [True]

        def do_post(h: Any) -> None:
            body = h.rfile.read(int(h.headers.get("Content-Length", "0")))
            if first[0]:
                first[0] = False
                h.send_response(503)
                h.send_header("Retry-After", "0")
                h.send_header("Content-Length", "0")
                h.end_headers()
                return
            sink.bodies.append(body)
            h.send_response(200)
            h.send_header("Content-Length", "0")
            h.end_headers()

        handler.do_POST = do_post  # type: ignore[attr-defined]


def test_a_plain_http_endpoint_is_posted_without_requests_and_retried_on_503() -> None:
    sink = _Flaky()
    try:
        spans = _spans()
        exporter = SpanExporter(endpoint=sink.url, timeout=5)
        assert type(exporter._client._transport).__module__ == "moot.app.otlp"
        started = time.monotonic()
        assert exporter.export(spans) is SpanExportResult.SUCCESS
        assert sink.bodies == [encode_spans(spans)]  # the second post, after the 503
        assert exporter.export(spans) is SpanExportResult.SUCCESS  # the kept connection
        assert len(sink.bodies) == 2
        assert time.monotonic() - started < 4
        exporter.shutdown()
    finally:
        sink.server.shutdown()
        sink.server.server_close()


@pytest.mark.parametrize(
    ("endpoint", "env"),
    [
        ("https://collector.example:4318/v1/traces", {}),
        ("http://127.0.0.1:9/v1/traces", {"HTTP_PROXY": "http://proxy.example:3128"}),
        ("http://127.0.0.1:9/v1/traces", {"OTEL_PYTHON_EXPORTER_OTLP_HTTP_CREDENTIAL_PROVIDER": "x"}),
    ],
)
def test_https_a_proxy_or_a_credential_provider_keep_the_exporters_own_transport(
    endpoint: str, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from moot.app.otlp import _plain_http

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert not _plain_http(endpoint)
    if not env:
        exporter = SpanExporter(endpoint=endpoint, timeout=1)
        assert type(exporter._client._transport).__module__ != "moot.app.otlp"
        exporter.shutdown()
