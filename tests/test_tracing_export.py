"""``moot`` with OTEL_EXPORTER_OTLP_ENDPOINT: its spans reach a real OTLP/HTTP endpoint, Ctrl-C included.

The endpoint is a small collector on 127.0.0.1 that decodes what the exporter posts (OTLP protobuf),
so ``make test`` checks the CLI's export path; ``make phoenix-test`` does it against Phoenix.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from fault_server import Fate, FaultServer, schema_reply


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def _spans(request: ExportTraceServiceRequest) -> list[dict[str, Any]]:
    out = []
    for rs in request.resource_spans:
        resource = {a.key: _value(a.value) for a in rs.resource.attributes}
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append(
                    {
                        "name": s.name,
                        "id": s.span_id.hex(),
                        "parent": s.parent_span_id.hex() or None,
                        "attributes": {a.key: _value(a.value) for a in s.attributes},
                        "status": s.status.code,
                        "resource": resource,
                    }
                )
    return out


class Collector:
    """An OTLP/HTTP trace endpoint that keeps every span it is sent (name, ids, attributes, resource)."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                collector.spans.extend(_spans(request))
                payload = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> Collector:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def collector() -> Iterator[Collector]:
    with Collector() as c:
        yield c


def _env(collector: Collector, tmp: Any, **extra: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return {**clean, "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url, "MOOT_STORE": str(tmp / "r.db"), **extra}


def test_moot_run_exports_its_trace(collector: Collector, tmp_path: Any) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "moot", "run", "Is tea good for you?", "--model", "test", "--json"],
        env=_env(collector, tmp_path, OTEL_SERVICE_NAME="rag-pipeline"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    result = json.loads(done.stdout)
    spans = collector.spans  # flushed before the process exited
    (root,) = [s for s in spans if s["parent"] is None]
    assert (
        root["name"] == "invoke_workflow answer"
        and root["attributes"]["gen_ai.conversation.id"] == result["id"]
    )
    assert root["resource"]["service.name"] == "rag-pipeline"
    agents = [s for s in spans if s["parent"] == root["id"]]
    chats = [s for s in spans if s["name"].startswith("chat ")]
    assert len(agents) == 5 and len(chats) == result["usage"]["calls"] == 5
    assert {c["parent"] for c in chats} == {a["id"] for a in agents}
    assert "Is tea good for you?" not in json.dumps(spans)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_still_sends_what_the_run_did(collector: Collector, tmp_path: Any) -> None:
    def slow(n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
        return Fate(content=schema_reply(body), delay=0.6)

    with FaultServer(slow) as server:
        spec = f"openai:fake?base_url={server.url}"
        proc = subprocess.Popen(
            [sys.executable, "-m", "moot", "run", "Is tea good for you?", "--model", spec, "--timeout", "60"],
            env=_env(collector, tmp_path, OPENAI_API_KEY="sk-test"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            # A suite started in the background (`make test &`) inherits Ctrl-C ignored, and so
            # would the child: give it the default disposition, as a terminal's process has.
            preexec_fn=_default_sigint,
        )
        deadline = time.monotonic() + 60
        while server.requests < 3 and time.monotonic() < deadline:  # round 2 under way
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    (root,) = [s for s in collector.spans if s["parent"] is None]
    assert (
        root["attributes"]["moot.status"] == "interrupted"
        and root["attributes"]["error.type"] == "interrupted"
    )
    agents = [s for s in collector.spans if s["parent"] == root["id"]]
    assert len(agents) >= 3  # round 1's two turns, and what round 2 had started
    assert sum(1 for s in collector.spans if s["name"] == "chat fake") >= 2


def test_an_unreachable_endpoint_does_not_fail_the_run(tmp_path: Any) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env = {
        **clean,
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "2",
        "MOOT_STORE": str(tmp_path / "r.db"),
    }
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "moot", "run", "Is tea good for you?", "--model", "test", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and json.loads(done.stdout)["final_answer"]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("moot: warning: cannot export traces"), done.stderr
    assert time.monotonic() - started < 2 + 20  # the exporter's own timeout, plus the process itself


def _run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "moot", "run", "Is tea good for you?", "--model", "test", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_sampler_that_drops_every_trace_exports_nothing(collector: Collector, tmp_path: Any) -> None:
    # OTEL_TRACES_SAMPLER is the documented knob for less tracing overhead (read by the SDK itself).
    done = _run(_env(collector, tmp_path, OTEL_TRACES_SAMPLER="traceidratio", OTEL_TRACES_SAMPLER_ARG="0"))
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert collector.spans == []
    kept = _run(_env(collector, tmp_path, OTEL_TRACES_SAMPLER="always_on"))
    assert kept.returncode == 0 and len(collector.spans) == 11  # 1 run + 5 turns + 5 requests


def test_http_json_is_one_warning_and_exports_http_protobuf(collector: Collector, tmp_path: Any) -> None:
    done = _run(_env(collector, tmp_path, OTEL_EXPORTER_OTLP_PROTOCOL="http/json"))
    lines = done.stderr.splitlines()
    assert done.returncode == 0 and len(lines) == 1 and "http/protobuf" in lines[0], done.stderr
    assert any(s["name"] == "invoke_workflow answer" for s in collector.spans)


def test_grpc_exports_to_an_otlp_grpc_endpoint(tmp_path: Any) -> None:
    grpc = pytest.importorskip("grpc")
    pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc")
    from concurrent.futures import ThreadPoolExecutor

    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

    received: list[dict[str, Any]] = []

    class Service(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
        def Export(self, request: ExportTraceServiceRequest, context: Any) -> ExportTraceServiceResponse:  # noqa: N802 - gRPC's name
            received.extend(_spans(request))
            return ExportTraceServiceResponse()

    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Service(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env = {
            **clean,
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "MOOT_STORE": str(tmp_path / "r.db"),
        }
        done = _run(env)
    finally:
        server.stop(grace=None)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    (root,) = [s for s in received if s["parent"] is None]
    assert root["name"] == "invoke_workflow answer" and len(received) == 11
