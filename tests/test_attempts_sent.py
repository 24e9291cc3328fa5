"""``usage.attempts`` counts the requests sent, so it matches the server's own log.

A request that waits for a slot (``--model-concurrency 1``: one request in flight per endpoint)
and is cancelled while it waits (the debate's deadline ran out) sent nothing: it is no attempt.
Six debates at one request at a time against a slow server, with a 3 s deadline each, once
counted 12 attempts while the server had received 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fault_server import Fate, FaultServer, schema_reply
from moot import models
from moot.cli import main
from moot.models import base


def _slow(n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
    return Fate("ok", content=schema_reply(body), delay=1.2)


def test_attempts_equal_the_requests_the_server_received(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The default (lean) HTTP stack. On the SDK's (MOOT_OPENAI_HTTP=sdk) a request cancelled after
    # it took its slot but before the SDK wrote it can still count: moot cannot see that moment.
    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.delenv("MOOT_OPENAI_HTTP", raising=False)
    monkeypatch.chdir(tmp_path)
    topics = tmp_path / "topics.jsonl"
    topics.write_text("".join(json.dumps({"topic": f"Is {i} even?"}) + "\n" for i in range(6)))
    try:
        with FaultServer(_slow) as server:
            args = ["run", "--input", str(topics), "--output", "out.jsonl", "--concurrency", "6"]
            args += ["--model", f"openai:M@{server.url}", "--model-concurrency", "1", "--timeout", "3"]
            code = main(args)
            capsys.readouterr()
            received = server.requests
    finally:
        for spec in [s for s in models._CACHE if s.startswith("openai:")]:
            models._CACHE.pop(spec, None)
    assert code == 1  # the deadline cut turns short: degraded, not failed
    results = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(results) == 6
    attempts = sum(r["usage"]["attempts"] for r in results)
    assert 0 < received == attempts, (received, attempts)


def test_a_request_cancelled_while_it_waits_for_a_slot_is_no_attempt(monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from moot.models import ModelRequest, call_model
    from moot.models.base import CallStats, Message
    from moot.models.openai import OpenAIModel

    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)
    request = ModelRequest(messages=[Message(role="user", content="hi")])

    async def go(url: str) -> tuple[CallStats, CallStats]:
        model = OpenAIModel("M", base_url=url, api_key="sk-test", max_concurrency=1)
        first, second = CallStats(), CallStats()
        running = asyncio.create_task(call_model(model, request, stats=first))
        await asyncio.sleep(0.2)  # the first holds the one slot
        waiting = asyncio.create_task(call_model(model, request, stats=second))
        await asyncio.sleep(0.2)
        waiting.cancel()  # still waiting for the slot: sent nothing
        await asyncio.gather(waiting, return_exceptions=True)
        await running
        await model.aclose()
        return first, second

    with FaultServer(_slow) as server:
        first, second = asyncio.run(go(server.url))
        assert server.requests == 1
    assert (first.usage.attempts, second.usage.attempts) == (1, 0)
