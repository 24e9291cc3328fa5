"""n-sampling: a vote's K samples in one request where the server samples n, honest fallback elsewhere."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from fault_server import Fate, FaultServer
from moot.bench.methods import MethodContext, parse_method, run_method
from moot.bench.tasks import ArithmeticTask
from moot.errors import ModelHTTPError
from moot.models import base
from moot.models.base import CallStats, Message, ModelRequest, ModelResponse
from moot.models.openai import OpenAIModel
from moot.models.retry import RetryPolicy, call_model

ONE_CHOICE = "Only one completion choice is allowed"  # llama.cpp's server on n > 1


def choices_body(n: int, model: str = "m") -> str:
    """A completion with ``n`` choices, as vLLM and OpenAI answer ``n``."""
    choices = [
        {
            "index": i,
            "message": {"role": "assistant", "content": f"the result is ({i})"},
            "finish_reason": "stop",
        }
        for i in range(n)
    ]
    usage = {"prompt_tokens": 20, "completion_tokens": 5 * n, "total_tokens": 20 + 5 * n}
    return json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": model,
                       "choices": choices, "usage": usage})  # fmt: skip


def samples_n(n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
    """vLLM: honours n."""
    return Fate("status", status=200, body=choices_body(int(body.get("n", 1))))


def ignores_n(n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
    """A server that silently answers one choice whatever n says."""
    return Fate("status", status=200, body=choices_body(1))


def refuses_n(n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
    """llama.cpp: a 400 for n > 1."""
    if body.get("n", 1) > 1:
        return Fate("status", status=400, body=json.dumps({"error": {"message": ONE_CHOICE}}))
    return Fate("status", status=200, body=choices_body(1))


def ask(model: OpenAIModel, n: int, times: int = 1) -> tuple[list[ModelResponse], list[CallStats]]:
    stats = [CallStats() for _ in range(times)]

    async def go() -> list[ModelResponse]:
        try:
            request = ModelRequest(messages=[Message(role="user", content="2+2?")], seed=7, n=n)
            return [await call_model(model, request, RetryPolicy(max_retries=0), stats=s) for s in stats]
        finally:
            await model.aclose()

    return asyncio.run(go()), stats


@pytest.fixture(autouse=True)
def _allow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)
    monkeypatch.delenv("MOOT_OPENAI_HTTP", raising=False)


@pytest.mark.parametrize("http", ["aiohttp", "sdk"])
def test_a_server_that_samples_n_gets_one_request(http: str) -> None:
    with FaultServer(samples_n) as server:
        model = OpenAIModel("m", base_url=server.url, http=http)  # type: ignore[arg-type]
        replies, stats = ask(model, 3, times=2)
    assert [b["n"] for b in server.bodies] == [3, 3]  # one request per call, detected once
    assert [s.text for s in replies[0].samples] == [
        "the result is (0)",
        "the result is (1)",
        "the result is (2)",
    ]
    usage = replies[0].usage
    assert (usage.calls, usage.prompt_tokens, usage.completion_tokens) == (1, 20, 15)
    assert [s.usage.attempts for s in stats] == [1, 1] and model.sampler.supported is True


@pytest.mark.parametrize(("handler", "first_call"), [(ignores_n, 3), (refuses_n, 4)])
def test_servers_without_n_get_single_requests_and_honest_usage(handler: Any, first_call: int) -> None:
    with FaultServer(handler) as server:
        model = OpenAIModel("m", base_url=server.url)
        replies, stats = ask(model, 3, times=2)
        bodies = server.bodies
    assert model.sampler.supported is False
    # First call: the n=3 probe, then what it did not return; second call: 3 single requests.
    assert len(bodies) == first_call + 3
    singles = bodies[1:]
    assert all("n" not in b for b in singles)
    assert len({b["seed"] for b in bodies[-3:]}) == 3  # distinct seeds: not three copies of one sample
    assert all(len(r.samples) == 3 for r in replies)
    assert [s.usage.attempts for s in stats] == [first_call, 3]  # reconciles with the server's log
    answered = first_call - (1 if handler is refuses_n else 0)
    assert [r.usage.calls for r in replies] == [answered, 3]


def test_a_refusal_about_something_else_is_not_hidden() -> None:
    def always_400(n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
        return Fate("status", status=400, body='{"error": {"message": "context length exceeded"}}')

    with FaultServer(always_400) as server:
        model = OpenAIModel("m", base_url=server.url)
        with pytest.raises(ModelHTTPError, match="context length"):
            ask(model, 3)


@pytest.mark.parametrize(("method", "requests", "calls"), [("vote:3", 1, 1), ("society:3:2", 4, 4)])
def test_bench_vote_and_society_round_0_use_one_request(method: str, requests: int, calls: int) -> None:
    task = ArithmeticTask()
    item = task.items(1, 0)[0]
    with FaultServer(samples_n) as server:
        model = OpenAIModel("m", base_url=server.url)

        async def go() -> Any:
            try:
                return await run_method(parse_method(method), item, MethodContext(model=model, task=task))
            finally:
                await model.aclose()

        record = asyncio.run(go())
        ns = [b.get("n", 1) for b in server.bodies]
    assert ns[0] == 3 and len(ns) == requests
    assert record.calls == calls and len(record.rounds[0]) == 3
    assert [a.answer for a in record.rounds[0]] == ["0", "1", "2"]
    assert record.prompt_tokens == 20 * requests
