"""Fault soak: hundreds of debates against a real HTTP server that fails 30% of requests.

The server answers each request with a valid reply, or (30%) with a 500, a 429 with
``Retry-After``, a garbled 200 body, or a dropped connection. Every debate must return,
at least 95% with no failed turn, no task exception may go unretrieved (asyncio debug
mode), and the usage the debates report must match the server's own counts exactly.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import json
import random
import time
from typing import Any

import pytest

from fault_server import Fate, FaultServer, schema_reply
from moot import Debate, DebateResult
from moot.models import base
from moot.models.openai import OpenAIModel
from moot.protocol import preset_names

TOPIC = "The battery life is great but the screen is dim (review {})."
FAULTS = (
    Fate("status", status=500, body='{"error": {"message": "Internal Server Error"}}'),
    Fate("status", status=429, headers={"Retry-After": "0.02"}),
    Fate("malformed"),
    Fate("drop"),
)
FAULT_RATE = 0.3
DEBATES_PER_PRESET = 36  # x 6 presets = 216 debates


class Soak:
    """The server's handler: a 30% fault rate, and a count of valid answers sent.

    Each request's fate is drawn from a generator seeded with the request's content and
    how many times that same request was seen before, so a retry gets a fresh, independent
    draw, and the run does not depend on the order in which concurrent requests arrive
    (which keeps the clean-debate count stable from run to run).
    """

    def __init__(self) -> None:
        self.answered = 0
        self.faults: dict[str, int] = {}
        self.seen: dict[str, int] = {}

    def __call__(self, n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
        key = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        attempt = self.seen[key] = self.seen.get(key, -1) + 1
        rng = random.Random(f"{key}:{attempt}")
        if rng.random() < FAULT_RATE:
            fault = rng.choice(FAULTS)
            key = f"{fault.kind}{fault.status if fault.kind == 'status' else ''}"
            self.faults[key] = self.faults.get(key, 0) + 1
            return fault
        self.answered += 1
        return Fate(content=_reply(body))


def _reply(body: dict[str, Any]) -> str:
    """A valid reply; evidence spans must quote the topic, so they get a phrase of it."""
    data = json.loads(schema_reply(body))
    for key in data:
        if key.endswith("evidence_spans"):
            data[key] = ["battery life"]
    return json.dumps(data)


@pytest.fixture
def loop_errors(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)
    return []


def test_fault_soak(loop_errors: list[dict[str, Any]]) -> None:
    soak = Soak()
    # Fast backoff keeps the test short; the policy's logic is the production one.
    overrides = {"retry": {"max_retries": 3, "base_delay": 0.02, "max_delay": 0.2}, "timeout": 120}

    async def main(url: str) -> list[DebateResult | BaseException]:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, ctx: loop_errors.append(ctx))
        model = OpenAIModel("soak", base_url=url, max_concurrency=64)
        try:
            runs = [
                Debate(name, model=model, overrides=overrides).run(TOPIC.format(i))
                for name in preset_names()
                for i in range(DEBATES_PER_PRESET)
            ]
            return await asyncio.gather(*runs, return_exceptions=True)
        finally:
            await model.aclose()

    started = time.perf_counter()
    with FaultServer(soak) as server:
        results = asyncio.run(main(server.url), debug=True)
        gc.collect()
        requests = server.requests
    elapsed = time.perf_counter() - started

    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors[:3]
    done = [r for r in results if isinstance(r, DebateResult)]
    assert len(done) == DEBATES_PER_PRESET * len(preset_names()) >= 200
    clean = [r for r in done if r.failed_turns == 0 and r.cancelled_turns == 0 and r.fallback is None]
    # Issue 34: at least 95% clean (207-208 of 216 here; 91% before the pacer).
    assert len(clean) >= 0.95 * len(done), (
        f"{len(clean)}/{len(done)} clean; {requests} requests, faults {soak.faults}"
    )
    # Usage reconciles exactly with the server: every request it read, every valid answer it sent.
    assert sum(r.usage.attempts for r in done) == requests
    assert sum(r.usage.calls for r in done) == soak.answered
    assert requests > soak.answered  # faults did happen and were retried
    assert loop_errors == []
    # 429s (7.5% of requests here, at random) are waited out, and the soak ends. Its wall time was
    # bimodal until the pacer learned that refusals of requests paced well below the rate the
    # server was shown to allow are not for their rate: 19.5 s in some runs, 43-105 s in others,
    # paced at a few requests/s by cut after cut (issue 34); 20.0-24.5 s in six runs since.
    assert elapsed < 90
