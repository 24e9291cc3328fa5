"""Wire-format tests for the Anthropic backend, against an in-process mock transport."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

anthropic = pytest.importorskip("anthropic")

import anthropic._base_client as _sdk_client  # noqa: E402

from moot.errors import (  # noqa: E402
    MissingCredentialsError,
    ModelConnectionError,
    ModelHTTPError,
    ModelRequestsBlocked,
)
from moot.models import base  # noqa: E402
from moot.models.anthropic import AnthropicModel  # noqa: E402
from moot.models.base import Message, ModelRequest  # noqa: E402

# anthropic 2.x only accepts an httpx2 client; older releases took an httpx one.
httpx: Any = getattr(_sdk_client, "httpx2", None) or _sdk_client.httpx

SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "confidence": {"type": "number"}},
    "required": ["answer", "confidence"],
}


def message(content: list[dict[str, Any]], stop: str = "end_turn") -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-haiku-4-5",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 21, "output_tokens": 9},
    }


TOOL_REPLY = message(
    [{"type": "tool_use", "id": "toolu_1", "name": "verdict", "input": {"answer": "yes", "confidence": 0.8}}],
    stop="tool_use",
)


class Server:
    """A mock endpoint: replays replies and records the requests it saw."""

    def __init__(self, replies: list[Any]) -> None:
        self.replies = list(replies)
        self.requests: list[Any] = []

    def __call__(self, request: Any) -> Any:
        self.requests.append(request)
        reply = self.replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        return reply

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.requests]


def ok(body: dict[str, Any]) -> Any:
    return httpx.Response(200, json=body)


def error(status: int, headers: dict[str, str] | None = None) -> Any:
    body = {"type": "error", "error": {"type": "overloaded_error", "message": f"status {status}"}}
    return httpx.Response(status, json=body, headers=headers)


def structured(**kwargs: Any) -> ModelRequest:
    return ModelRequest(
        messages=[Message(role="system", content="Be brief."), Message(role="user", content="Sky blue?")],
        json_schema=SCHEMA,
        schema_name="verdict",
        **kwargs,
    )


def run(model: AnthropicModel, server: Server, request: ModelRequest) -> Any:
    async def go() -> Any:
        async with httpx.AsyncClient(transport=httpx.MockTransport(server)) as client:
            model._http_client = client
            try:
                return await model.request(request)
            finally:
                await model.aclose()

    return asyncio.run(go())


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)


@pytest.fixture
def allow_requests(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # The transport is a mock, so a "real" request touches no network.
    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)
    yield


@pytest.fixture
def model() -> AnthropicModel:
    return AnthropicModel("claude-haiku-4-5", api_key="sk-ant-test")


@pytest.mark.usefixtures("allow_requests")
class TestWireFormat:
    def test_structured_request_forces_a_tool(self, model: AnthropicModel) -> None:
        server = Server([ok(TOOL_REPLY)])
        resp = run(model, server, structured(temperature=0.4))
        (body,) = server.bodies()
        assert body["model"] == "claude-haiku-4-5"
        assert body["system"] == "Be brief."
        assert body["messages"] == [{"role": "user", "content": "Sky blue?"}]
        assert body["max_tokens"] == 1024  # Anthropic requires it; the request left it unset
        assert body["temperature"] == 0.4
        (tool,) = body["tools"]
        assert (tool["name"], tool["input_schema"]) == ("verdict", SCHEMA)
        assert body["tool_choice"] == {"type": "tool", "name": "verdict"}
        headers = server.requests[0].headers
        # Older SDKs send x-api-key, newer ones a bearer token.
        assert "sk-ant-test" in headers.get("x-api-key", headers.get("authorization", ""))
        assert json.loads(resp.text) == {"answer": "yes", "confidence": 0.8}
        assert (resp.usage.calls, resp.usage.prompt_tokens, resp.usage.completion_tokens) == (1, 21, 9)
        assert resp.finish_reason == "stop"
        assert resp.model == "anthropic:claude-haiku-4-5"

    def test_plain_request_returns_text(self, model: AnthropicModel) -> None:
        reply = message(
            [{"type": "text", "text": "Yes, "}, {"type": "text", "text": "mostly."}], stop="max_tokens"
        )
        server = Server([ok(reply)])
        request = ModelRequest(messages=[Message(role="user", content="hi")], max_tokens=5)
        resp = run(model, server, request)
        (body,) = server.bodies()
        assert {"tools", "tool_choice", "system", "temperature"}.isdisjoint(body)
        assert body["max_tokens"] == 5
        assert (resp.text, resp.finish_reason) == ("Yes, mostly.", "length")

    def test_turns_are_merged_and_open_with_user(self, model: AnthropicModel) -> None:
        server = Server([ok(TOOL_REPLY)])
        request = ModelRequest(
            messages=[
                Message(role="system", content="S1"),
                Message(role="assistant", content="A1"),
                Message(role="assistant", content="A2"),
                Message(role="system", content="S2"),
                Message(role="user", content="U1"),
            ],
            json_schema=SCHEMA,
            schema_name="my verdict!",
        )
        run(model, server, request)
        (body,) = server.bodies()
        assert body["system"] == "S1\n\nS2"
        assert body["messages"] == [
            {"role": "user", "content": "Begin."},
            {"role": "assistant", "content": "A1\n\nA2"},
            {"role": "user", "content": "U1"},
        ]
        assert body["tools"][0]["name"] == "my_verdict_"  # sanitised to the API's name pattern


@pytest.mark.usefixtures("allow_requests")
class TestErrors:
    def test_429_with_retry_after(self, model: AnthropicModel) -> None:
        server = Server([error(429, {"retry-after": "2"})])
        with pytest.raises(ModelHTTPError) as info:
            run(model, server, structured())
        err = info.value
        assert (err.status_code, err.retry_after, err.retryable) == (429, 2.0, True)
        assert err.model == "anthropic:claude-haiku-4-5"

    def test_overloaded_529_is_retryable(self, model: AnthropicModel) -> None:
        server = Server([error(529)])
        with pytest.raises(ModelHTTPError) as info:
            run(model, server, structured())
        assert (info.value.status_code, info.value.retryable) == (529, True)

    def test_echoed_key_is_redacted(self, model: AnthropicModel) -> None:
        def echo(request: Any) -> Any:
            echoed = {"request_headers": dict(request.headers), "note": "key sk-ant-test refused"}
            return httpx.Response(401, json={"type": "error", "error": echoed})

        with pytest.raises(ModelHTTPError) as info:
            run(model, echo, structured())  # type: ignore[arg-type]
        assert "sk-ant-test" not in info.value.body and "sk-ant-test" not in str(info.value)
        assert "***" in info.value.body

    def test_400_is_not_retryable(self, model: AnthropicModel) -> None:
        server = Server([error(400)])
        with pytest.raises(ModelHTTPError) as info:
            run(model, server, structured())
        assert not info.value.retryable

    def test_connection_error(self, model: AnthropicModel) -> None:
        server = Server([httpx.ConnectError("connection refused")])
        with pytest.raises(ModelConnectionError) as info:
            run(model, server, structured())
        assert info.value.retryable


def test_requests_blocked_without_touching_the_transport(model: AnthropicModel) -> None:
    server = Server([ok(TOOL_REPLY)])
    with pytest.raises(ModelRequestsBlocked):
        run(model, server, structured())
    assert server.requests == []


def test_missing_key() -> None:
    with pytest.raises(MissingCredentialsError) as info:
        AnthropicModel.from_spec("claude-haiku-4-5")
    assert info.value.env_var == "ANTHROPIC_API_KEY"


def test_key_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env")
    assert AnthropicModel.from_spec("claude-opus-4-6").name == "anthropic:claude-opus-4-6"
    assert AnthropicModel.from_spec("").name == "anthropic:claude-haiku-4-5"


@pytest.mark.usefixtures("allow_requests")
def test_models_on_one_endpoint_share_one_gate() -> None:
    """Two Claude models on one endpoint: one adaptive limit, and a 429 answered to one with a
    Retry-After longer than its one-second resolution pauses the other too (a gate per model
    object would send it at once; a Retry-After of 1 s or less delays only the refused request)."""
    from moot.models.retry import call_model

    sent: list[tuple[str, float]] = []

    def serve(request: Any) -> Any:
        name = json.loads(request.content)["model"]
        sent.append((name, time.monotonic()))
        if len(sent) == 1:
            return error(429, {"retry-after": "1.5"})
        return ok(message([{"type": "text", "text": "fine"}]))

    haiku = AnthropicModel("claude-haiku-4-5", api_key="k", base_url="https://claude.test/")
    sonnet = AnthropicModel("claude-opus-4-6", api_key="k", base_url="https://claude.test")
    other = AnthropicModel("claude-haiku-4-5", api_key="k", base_url="https://other.test")
    plain = ModelRequest(messages=[Message(role="user", content="hi")])

    async def go() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(serve)) as client:
            for m in (haiku, sonnet, other):
                m._http_client = client
            assert haiku.gate() is sonnet.gate() is not other.gate()
            first = asyncio.ensure_future(call_model(haiku, plain))
            while not sent or haiku.pause_left() == 0:
                await asyncio.sleep(0.01)
            await call_model(sonnet, plain)  # waits out the pause the 429 to haiku set
            await first

    asyncio.run(go())
    assert [name for name, _ in sent][:1] == ["claude-haiku-4-5"]
    sonnet_at = next(t for name, t in sent if name == "claude-opus-4-6")
    assert sonnet_at - sent[0][1] >= 1.45
    (stats,) = sonnet.endpoint_stats()
    assert stats["endpoint"] == "https://claude.test" and stats["throttled"] == 1 and stats["sent"] == 3


@pytest.mark.usefixtures("allow_requests")
@pytest.mark.parametrize("on", ["answer", "refusal"])
def test_announced_limits_pace_the_endpoint(on: str) -> None:
    """Anthropic's ``anthropic-ratelimit-*`` headers, on an answer or on a 429, reach the pacer of
    the endpoint's gate: requests leave at (at most) 0.95 of the announced rate before anything
    else is refused."""
    from moot.models.retry import RetryPolicy, call_model

    limits = {"anthropic-ratelimit-requests-limit": "3000", "anthropic-ratelimit-requests-remaining": "0"}
    answer = ok(message([{"type": "text", "text": "fine"}]))
    if on == "answer":
        answer.headers.update(limits)
        replies = [answer]
    else:
        replies = [error(429, {**limits, "retry-after": "0"}), answer]

    claude = AnthropicModel("claude-haiku-4-5", api_key="k", base_url=f"https://{on}.test")
    plain = ModelRequest(messages=[Message(role="user", content="hi")])

    async def go() -> None:
        async with httpx.AsyncClient(
            transport=httpx.MockTransport(lambda _request: replies.pop(0))
        ) as client:
            claude._http_client = client
            await call_model(claude, plain, RetryPolicy(base_delay=0))
            gate = claude.gate()
            assert gate is not None
            (endpoint,) = gate.endpoints
            pacer = endpoint.pacer
            assert pacer.announced is not None and pacer.announced.requests_per_s == pytest.approx(50.0)
            rate = pacer.rate(endpoint.clock())
            assert rate is not None and rate <= 0.95 * 50.0 + 1e-9
            if on == "answer":
                assert rate == pytest.approx(0.95 * 50.0)

    asyncio.run(go())
