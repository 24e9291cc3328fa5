"""CPU a span: opentelemetry-util-genai's ``TelemetryHandler.inference()`` against ``tracer.start_span``.

Why moot makes its chat spans with the SDK's tracer rather than OpenTelemetry's GenAI helpers
(docs/tracing.md): the same chat span (the attributes moot's chat span has), best of 5 loops of
3,000, no span processor, with and without an SDK meter provider (the helpers record histograms).
util-genai is not a moot dependency; install it aside and name the folder::

    pip install --no-deps --target /tmp/genai-site opentelemetry-util-genai==1.3b0 \
        'opentelemetry-instrumentation>=0.64b0' 'wrapt>=1.17,<3'
    python bench/util_genai_cost.py /tmp/genai-site
"""

import gc
import os
import sys
import time
from typing import Any

sys.path.append(sys.argv[1] if len(sys.argv) > 1 else "/tmp/genai-site")
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind
from opentelemetry.util.genai.handler import TelemetryHandler

N = 3000
ATTRS = {
    "gen_ai.operation.name": "chat",
    "gen_ai.provider.name": "openai",
    "gen_ai.request.model": "m",
    "gen_ai.request.max_tokens": 300,
    "gen_ai.request.temperature": 0.7,
    "gen_ai.response.model": "m",
    "gen_ai.response.finish_reasons": ("stop",),
    "server.address": "127.0.0.1",
    "server.port": 8000,
    "gen_ai.usage.input_tokens": 120,
    "gen_ai.usage.output_tokens": 40,
}


def best(f: Any, reps: int = 5) -> float:
    out = float("inf")
    for _ in range(reps):
        gc.collect()
        t = time.process_time()
        f()
        out = min(out, (time.process_time() - t) * 1e6 / N)
    return out


tp = TracerProvider()
tracer = tp.get_tracer("moot")


def plain() -> None:
    for _ in range(N):
        s = tracer.start_span("chat m", kind=SpanKind.CLIENT, attributes=ATTRS, start_time=1)
        s.end(2)


def genai(handler: TelemetryHandler) -> None:
    for _ in range(N):
        inv = handler.inference("openai", request_model="m", server_address="127.0.0.1", server_port=8000)
        inv.response_model_name = "m"
        inv.finish_reasons = ["stop"]
        inv.input_tokens = 120
        inv.output_tokens = 40
        inv.max_tokens = 300
        inv.temperature = 0.7
        inv.stop()


print(f"load average: {os.getloadavg()}")
for label, mp in (("no meter provider (API no-op)", None), ("SDK MeterProvider", MeterProvider())):
    handler = TelemetryHandler(tracer_provider=tp, meter_provider=mp, instrumentation_scope_name="moot")
    print(f"util-genai inference ({label}): {best(lambda h=handler: genai(h)):.1f} us a span")
print(f"tracer.start_span + end, same attributes: {best(plain):.1f} us a span")
