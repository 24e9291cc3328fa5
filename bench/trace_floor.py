"""Tracing's client CPU per model call, split: moot's tracer against the bare SDK making the same spans.

``throughput.py --trace off,on`` measures what tracing adds to a whole run; this script says how
much of that moot's own subscriber costs and how much is OpenTelemetry's floor. It runs a
benchmark in-process (moot's ``openai:`` backend against ``throughput.py``'s fake server, with
the run's event stream recorded), then times, per model call and best of ``--reps``:

* ``moot``: the recorded events replayed into moot's tracer (``moot.app.tracing.TraceObserver``),
  which makes the spans through the SDK;
* ``bare SDK``: the same spans (names, parents, kinds, times, attributes, events, status) made
  directly with ``tracer.start_span``, no moot at all: the floor for that span tree;

each with two span processors on the SDK's provider: none (making the spans only), and a batch
processor whose exporter encodes each batch with OpenTelemetry's own OTLP encoder (what the
``moot`` command's ``OTLPSpanExporter`` does before it posts). Encoding is timed, the HTTP post
is not (``throughput.py`` includes it). What happens in the engine while a run is listened to
(building its events and request records) is not in these figures either.

Usage::

    python bench/trace_floor.py                       # society:3:2 (plain methods), 300 items
    python bench/trace_floor.py --method answer       # a debate preset
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from throughput import FakeServer, _harness_run, _openai_model


class _Recorder:
    """An observer keeping a run's start, events and end, to replay them."""

    calls: list[tuple[str, Any]] = []

    def on_start(self, start: Any) -> None:
        self.calls.append(("on_start", start))

    def on_event(self, event: Any) -> None:
        self.calls.append(("on_event", event))

    def on_end(self, end: Any) -> None:
        self.calls.append(("on_end", end))


def _provider(processor: str) -> Any:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Encoding(SpanExporter):
        """The OTLP exporter's work but the post: each batch encoded and serialized."""

        def export(self, spans: Any) -> SpanExportResult:
            encode_spans(spans).SerializeToString()
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    if processor == "OTLP encoder":
        provider.add_span_processor(BatchSpanProcessor(Encoding()))
    return provider


def _replay(provider: Any, calls: list[tuple[str, Any]]) -> None:
    from moot.app.tracing import TraceObserver

    observer = TraceObserver(provider.get_tracer("moot"), capture=False)
    for method, arg in calls:
        getattr(observer, method)(arg)


def _bare(provider: Any, spans: list[Any]) -> None:
    from opentelemetry import trace

    tracer = provider.get_tracer("moot")
    children: dict[int | None, list[Any]] = {}
    for s in spans:
        children.setdefault(s.parent.span_id if s.parent else None, []).append(s)

    def make(s: Any, parent: Any) -> None:
        span = tracer.start_span(
            s.name, context=parent, kind=s.kind, attributes=s.attributes, start_time=s.start_time
        )
        for e in s.events:
            span.add_event(e.name, e.attributes, e.timestamp)
        if s.status.status_code.value:
            span.set_status(s.status.status_code, s.status.description)
        context = trace.set_span_in_context(span, parent)
        for child in children.get(s.context.span_id, ()):
            make(child, context)
        span.end(s.end_time)

    for root in children[None]:
        make(root, None)


def _best_us(work: Any, processor: str, calls: int, reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        provider = _provider(processor)
        gc.collect()
        cpu = time.process_time()
        work(provider)
        provider.force_flush()
        best = min(best, (time.process_time() - cpu) * 1e6 / calls)
        provider.shutdown()
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", default="society:3:2")
    parser.add_argument("--items", type=int, default=300)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from moot import observe

    print(f"load average before: {os.getloadavg()}, cores: {os.cpu_count()}", flush=True)
    observe.register("trace-floor", lambda start, options: _Recorder())
    with FakeServer(0.005, 600) as base_url, tempfile.TemporaryDirectory() as tmp:
        model = _openai_model(base_url, 300, "aiohttp", False)
        run = asyncio.run(_harness_run(model, args.items, 100, Path(tmp), args.method))
    observe.unregister("trace-floor")
    calls = _Recorder.calls
    requests = run["calls"]
    memory = InMemorySpanExporter()
    capture = TracerProvider()
    capture.add_span_processor(SimpleSpanProcessor(memory))
    _replay(capture, calls)
    spans = list(memory.get_finished_spans())
    print(
        f"{args.method}: {args.items} items, {requests} model calls, {len(spans)} spans "
        f"({len(spans) / requests:.2f} a call), per model call, best of {args.reps}:",
        flush=True,
    )
    rows = []
    for processor in ("no processor", "OTLP encoder"):
        ours = _best_us(lambda p: _replay(p, calls), processor, requests, args.reps)
        floor = _best_us(lambda p: _bare(p, spans), processor, requests, args.reps)
        rows.append({"processor": processor, "moot_us": ours, "bare_sdk_us": floor, "load": os.getloadavg()})
        print(
            f"  {processor:17s} moot {ours:6.1f} us   bare SDK {floor:6.1f} us   "
            f"moot's own {ours - floor:+6.1f} us  load={os.getloadavg()[0]:.2f}",
            flush=True,
        )
    if args.json:
        figures = {"method": args.method, "items": args.items, "calls": requests, "spans": len(spans)}
        args.json.write_text(json.dumps({**figures, "per_call": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
