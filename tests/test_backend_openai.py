"""Wire-format tests for the OpenAI-compatible backend, against an in-process mock transport."""

from __future__ import annotations

import asyncio
import importlib.util as importlib_util
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fault_server import Fate, FaultServer, schema_reply
from moot.errors import (
    MissingCredentialsError,
    ModelConnectionError,
    ModelHTTPError,
    ModelRequestsBlocked,
    UsageError,
)
from moot.models import base
from moot.models.base import Message, ModelRequest
from moot.models.openai import DEFAULT_BASE_URL, OpenAIModel, parse_retry_after
from moot.models.retry import RetryPolicy, call_model

openai = pytest.importorskip("openai")
import openai._base_client as _sdk_client  # noqa: E402

# The SDK accepts a client from the HTTP library it is built on: httpx2 since openai 3, httpx before.
httpx: Any = getattr(_sdk_client, "httpx2", None) or _sdk_client.httpx

SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "confidence": {"type": "number"}},
    "required": ["answer", "confidence"],
}


def completion(content: str = '{"answer": "yes", "confidence": 0.5}', finish: str = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-4o-mini",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish}
        ],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }


Reply = Any  # a Response, or an exception to raise


class Server:
    """A mock endpoint: replays replies and records the requests it saw."""

    def __init__(self, replies: list[Reply]) -> None:
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


def ok(body: dict[str, Any] | None = None) -> Any:
    return httpx.Response(200, json=body or completion())


def error(status: int, headers: dict[str, str] | None = None, message: str | None = None) -> Any:
    return httpx.Response(
        status, json={"error": {"message": message or f"status {status}", "type": "x"}}, headers=headers
    )


def structured(**kwargs: Any) -> ModelRequest:
    return ModelRequest(
        messages=[Message(role="system", content="Be brief."), Message(role="user", content="Sky blue?")],
        json_schema=SCHEMA,
        schema_name="verdict",
        **kwargs,
    )


def run(model: OpenAIModel, server: Server, request: ModelRequest, times: int = 1) -> list[Any]:
    """Issue ``request`` ``times`` times through a client bound to ``server``."""

    async def go() -> list[Any]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(server)) as client:
            model._http_client = client
            try:
                return [await model.request(request) for _ in range(times)]
            finally:
                await model.aclose()

    return asyncio.run(go())


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MOOT_OPENAI_STRUCTURED_MODE"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def allow_requests(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # The transport is a mock, so a "real" request touches no network.
    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)
    yield


@pytest.fixture
def make_model() -> Callable[..., OpenAIModel]:
    def make(**kwargs: Any) -> OpenAIModel:
        kwargs.setdefault("api_key", "sk-test")
        return OpenAIModel("gpt-4o-mini", **kwargs)

    return make


@pytest.mark.usefixtures("allow_requests")
class TestWireFormat:
    def test_json_schema_request_body(self, make_model: Callable[..., OpenAIModel]) -> None:
        server = Server([ok()])
        model = make_model()
        (resp,) = run(model, server, structured(max_tokens=40, temperature=0.3, seed=7))
        (body,) = server.bodies()
        assert body["model"] == "gpt-4o-mini"
        assert body["messages"] == [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Sky blue?"},
        ]
        assert body["response_format"] == {
            "type": "json_schema",
            "json_schema": {"name": "verdict", "schema": SCHEMA},
        }
        assert (body["max_tokens"], body["temperature"], body["seed"]) == (40, 0.3, 7)
        assert str(server.requests[0].url) == DEFAULT_BASE_URL + "/chat/completions"
        assert server.requests[0].headers["authorization"] == "Bearer sk-test"
        assert json.loads(resp.text) == {"answer": "yes", "confidence": 0.5}
        assert (resp.usage.calls, resp.usage.prompt_tokens, resp.usage.completion_tokens) == (1, 11, 7)
        assert resp.finish_reason == "stop"
        assert resp.model == "openai:gpt-4o-mini"

    def test_plain_request_has_no_response_format(self, make_model: Callable[..., OpenAIModel]) -> None:
        server = Server([ok(completion("It is.", finish="length"))])
        request = ModelRequest(messages=[Message(role="user", content="hi")])
        (resp,) = run(make_model(), server, request)
        (body,) = server.bodies()
        assert "response_format" not in body
        assert {"max_tokens", "temperature", "seed"}.isdisjoint(body)
        assert (resp.text, resp.finish_reason) == ("It is.", "length")

    def test_json_object_mode_is_llama_cpp_dialect(self, make_model: Callable[..., OpenAIModel]) -> None:
        server = Server([ok()])
        run(make_model(structured_mode="json_object"), server, structured())
        assert server.bodies()[0]["response_format"] == {"type": "json_object", "schema": SCHEMA}

    def test_prompt_mode_sends_no_response_format(
        self, make_model: Callable[..., OpenAIModel], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("MOOT_OPENAI_STRUCTURED_MODE", "prompt")
        server = Server([ok()])
        model = make_model()
        run(model, server, structured())
        assert "response_format" not in server.bodies()[0]
        assert model.mode_fixed

    def test_unknown_mode_is_a_usage_error(self, make_model: Callable[..., OpenAIModel]) -> None:
        with pytest.raises(UsageError, match="structured mode"):
            make_model(structured_mode="xml")


LLAMA_CPP_500 = 'response_format type must be one of "text" or "json_object", but got: json_schema'
NAMES_FORMAT = "Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model."


@pytest.mark.usefixtures("allow_requests")
class TestFallback:
    """The structured mode moves down only on a response that proves the server lacks it."""

    def test_llama_cpp_500_falls_back_to_json_object_and_is_remembered(
        self, make_model: Callable[..., OpenAIModel]
    ) -> None:
        server = Server([error(500, message=LLAMA_CPP_500), ok(), ok()])
        model = make_model()
        run(model, server, structured(), times=2)
        kinds = [b["response_format"]["type"] for b in server.bodies()]
        # First request: json_schema is refused, json_object works. Second request: straight to json_object.
        assert kinds == ["json_schema", "json_object", "json_object"]
        assert server.bodies()[1]["response_format"]["schema"] == SCHEMA
        assert model.structured_mode == "json_object"

    @pytest.mark.parametrize("status", [400, 422, 501])
    def test_client_errors_naming_response_format(
        self, make_model: Callable[..., OpenAIModel], status: int
    ) -> None:
        server = Server([error(status, message=NAMES_FORMAT), ok()])
        model = make_model()
        run(model, server, structured())
        assert model.structured_mode == "json_object"

    def test_falls_through_to_prompt_mode(self, make_model: Callable[..., OpenAIModel]) -> None:
        server = Server([error(400, message=NAMES_FORMAT), error(422, message="bad response_format"), ok()])
        model = make_model()
        run(model, server, structured())
        assert [b.get("response_format", {}).get("type") for b in server.bodies()] == [
            "json_schema",
            "json_object",
            None,
        ]
        assert model.structured_mode == "prompt"

    @pytest.mark.parametrize(
        ("status", "message"),
        [
            (500, "internal error"),  # a bare 500 proves nothing
            (502, LLAMA_CPP_500),  # a gateway error is transient whatever it echoes
            (503, "overloaded"),
            (400, "maximum context length exceeded"),  # a 400 about something else
            (429, "rate limited"),
        ],
    )
    def test_transient_or_unrelated_errors_keep_the_mode(
        self, make_model: Callable[..., OpenAIModel], status: int, message: str
    ) -> None:
        server = Server([error(status, message=message)])
        model = make_model()
        with pytest.raises(ModelHTTPError) as info:
            run(model, server, structured())
        assert info.value.status_code == status
        assert len(server.requests) == 1  # raised at once for call_model to retry, in the same mode
        assert model.structured_mode == "json_schema"

    def test_explicit_mode_never_falls_back(self, make_model: Callable[..., OpenAIModel]) -> None:
        server = Server([error(500, message=LLAMA_CPP_500)])
        model = make_model(structured_mode="json_schema")
        with pytest.raises(ModelHTTPError):
            run(model, server, structured())
        assert len(server.requests) == 1

    def test_no_fallback_for_plain_requests(self, make_model: Callable[..., OpenAIModel]) -> None:
        server = Server([error(400, message=NAMES_FORMAT)])
        model = make_model()
        with pytest.raises(ModelHTTPError):
            run(model, server, ModelRequest(messages=[Message(role="user", content="hi")]))
        assert len(server.requests) == 1
        assert model.structured_mode == "json_schema"


@pytest.mark.usefixtures("allow_requests")
class TestErrors:
    def test_429_with_retry_after(self, make_model: Callable[..., OpenAIModel]) -> None:
        server = Server([error(429, {"Retry-After": "2"})])
        with pytest.raises(ModelHTTPError) as info:
            run(make_model(), server, structured())
        err = info.value
        assert (err.status_code, err.retry_after, err.retryable) == (429, 2.0, True)
        assert err.model == "openai:gpt-4o-mini"
        assert "status 429" in err.body

    def test_401_is_not_retryable(self, make_model: Callable[..., OpenAIModel]) -> None:
        server = Server([error(401)])
        with pytest.raises(ModelHTTPError) as info:
            run(make_model(), server, structured())
        assert (info.value.status_code, info.value.retryable, info.value.retry_after) == (401, False, None)

    def test_connection_error(self, make_model: Callable[..., OpenAIModel]) -> None:
        server = Server([httpx.ConnectError("connection refused")])
        with pytest.raises(ModelConnectionError) as info:
            run(make_model(), server, structured())
        assert info.value.retryable
        assert info.value.model == "openai:gpt-4o-mini"

    def test_timeout_is_a_connection_error(self, make_model: Callable[..., OpenAIModel]) -> None:
        server = Server([httpx.ReadTimeout("too slow")])
        with pytest.raises(ModelConnectionError):
            run(make_model(), server, structured())

    def test_call_model_honours_retry_after(self, make_model: Callable[..., OpenAIModel]) -> None:
        server = Server([error(429, {"retry-after": "2"}), ok()])
        model = make_model()
        waits: list[float] = []

        async def sleep(seconds: float) -> None:
            waits.append(seconds)

        async def go() -> Any:
            async with httpx.AsyncClient(transport=httpx.MockTransport(server)) as client:
                model._http_client = client
                return await call_model(model, structured(), RetryPolicy(max_retries=2), sleep=sleep)

        resp = asyncio.run(go())
        assert waits == [2.0]
        assert json.loads(resp.text)["answer"] == "yes"


def test_requests_blocked_without_touching_the_transport(make_model: Callable[..., OpenAIModel]) -> None:
    server = Server([ok()])
    with pytest.raises(ModelRequestsBlocked):
        run(make_model(), server, structured())
    assert server.requests == []


class TestConfiguration:
    def test_missing_key_for_openai_endpoint(self) -> None:
        with pytest.raises(MissingCredentialsError) as info:
            OpenAIModel.from_spec("gpt-4o-mini")
        assert info.value.env_var == "OPENAI_API_KEY"

    def test_key_from_env(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
        model = OpenAIModel.from_spec("gpt-4o")
        assert (model.name, model.model, model.base_url) == ("openai:gpt-4o", "gpt-4o", DEFAULT_BASE_URL)

    def test_empty_spec_uses_default_model(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
        assert OpenAIModel.from_spec("").name == "openai:gpt-4o-mini"

    @pytest.mark.usefixtures("allow_requests")
    def test_base_url_from_env_needs_no_key(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9999/v1/")
        model = OpenAIModel.from_spec("qwen")
        assert model.base_url == "http://127.0.0.1:9999/v1"
        server = Server([ok()])
        run(model, server, structured())
        request = server.requests[0]
        assert str(request.url) == "http://127.0.0.1:9999/v1/chat/completions"
        assert request.headers["authorization"] == "Bearer not-needed"

    def test_constructor_overrides_env(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("OPENAI_BASE_URL", "http://env.invalid/v1")
        monkeypatch.setenv("MOOT_OPENAI_STRUCTURED_MODE", "prompt")
        model = OpenAIModel(
            "m", base_url="http://arg.invalid/v1", structured_mode="json_object", max_concurrency=3, timeout=5
        )
        assert (model.base_url, model.structured_mode, model.max_concurrency) == (
            "http://arg.invalid/v1",
            "json_object",
            3,
        )


class TestRetryAfter:
    def test_seconds(self) -> None:
        assert parse_retry_after({"retry-after": "2"}) == 2.0
        assert parse_retry_after({"retry-after": "0.5"}) == 0.5

    def test_milliseconds_win(self) -> None:
        assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "2"}) == 1.5

    def test_http_date(self) -> None:
        now = 1_700_000_000.0  # 2023-11-14 22:13:20 GMT
        assert parse_retry_after({"retry-after": "Tue, 14 Nov 2023 22:13:50 GMT"}, now=now) == 30.0
        assert parse_retry_after({"retry-after": "Tue, 14 Nov 2023 22:00:00 GMT"}, now=now) == 0.0

    def test_missing_or_garbage(self) -> None:
        assert parse_retry_after(None) is None
        assert parse_retry_after({}) is None
        assert parse_retry_after({"retry-after": "soon"}) is None


async def _tiny_server(bodies: list[dict[str, Any]]) -> tuple[asyncio.Server, str]:
    """A real keep-alive HTTP/1.1 endpoint on 127.0.0.1 that records request bodies."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                bodies.append(json.loads(await reader.readexactly(length)))
                payload = json.dumps(completion("plain reply")).encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(payload)}\r\n\r\n".encode()
                    + payload
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}/v1"


@pytest.mark.parametrize("http", ["httpx", "aiohttp"])
def test_both_http_stacks_send_the_same_request_over_a_real_socket(
    http: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if http == "aiohttp":
        pytest.importorskip("aiohttp")
    import gc
    import warnings

    bodies: list[dict[str, Any]] = []

    async def main() -> list[str]:
        server, url = await _tiny_server(bodies)
        model = OpenAIModel("m", base_url=url, http=http)  # type: ignore[arg-type]
        assert model.http == http
        try:
            request = ModelRequest(messages=[Message(role="user", content="hi")], max_tokens=5, seed=3)
            replies = await asyncio.gather(*(model.request(request) for _ in range(3)))
        finally:
            await model.aclose()
            server.close()
            await server.wait_closed()
        return [r.text for r in replies]

    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert asyncio.run(main()) == ["plain reply"] * 3
        gc.collect()
    assert not [w for w in caught if "nclosed" in str(w.message)]  # the session was closed
    assert (
        bodies
        == [{"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "seed": 3}] * 3
    )


def test_http_stack_choice_and_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    url = "http://127.0.0.1:9/v1"
    assert OpenAIModel("m", base_url=url).http == "httpx"
    monkeypatch.setenv("MOOT_OPENAI_HTTP", "aiohttp")
    if importlib_util.find_spec("aiohttp") is not None:
        assert OpenAIModel("m", base_url=url).http == "aiohttp"
    monkeypatch.setenv("MOOT_OPENAI_HTTP", "curl")
    with pytest.raises(UsageError, match="unknown HTTP stack 'curl'"):
        OpenAIModel("m", base_url=url)
    with pytest.raises(UsageError, match="either http= or http_client="):
        OpenAIModel("m", base_url=url, http="httpx", http_client=object())


class TestTransientErrorsOverARealSocket:
    """Against a real HTTP server: transient faults are retried in the same structured mode."""

    @pytest.mark.parametrize(
        "fault",
        [
            Fate("status", status=500, body='{"error": {"message": "Internal Server Error"}}'),
            Fate("status", status=503, body="upstream unavailable"),
            Fate("status", status=429, headers={"Retry-After": "0"}),
            Fate("malformed"),
            Fate("drop"),
        ],
        ids=["500", "503", "429", "malformed", "dropped"],
    )
    def test_two_faults_then_an_answer(self, fault: Fate, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)

        def handler(n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
            return fault if n < 2 else Fate(content=schema_reply(body))

        with FaultServer(handler) as server:
            model = OpenAIModel("m", base_url=server.url)

            async def go() -> Any:
                try:
                    policy = RetryPolicy(max_retries=3, base_delay=0.01)
                    first = await call_model(model, structured(), policy)
                    second = await call_model(model, structured(), policy)
                    return first, second
                finally:
                    await model.aclose()

            first, second = asyncio.run(go())
            kinds = [b["response_format"]["type"] for b in server.bodies]
        assert json.loads(first.text)["answer"] == "x"
        assert json.loads(second.text)["answer"] == "x"
        # Every attempt, and the next request, stayed in json_schema: nothing was learnt from the faults.
        assert kinds == ["json_schema"] * 4
        assert model.structured_mode == "json_schema"

    def test_llama_cpp_refusal_is_proof(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)
        refusal = json.dumps({"error": {"code": 500, "message": LLAMA_CPP_500, "type": "server_error"}})

        def handler(n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
            if body["response_format"]["type"] == "json_schema":
                return Fate("status", status=500, body=refusal)
            return Fate(content=schema_reply(body))

        with FaultServer(handler) as server:
            model = OpenAIModel("m", base_url=server.url)

            async def go() -> None:
                try:
                    for _ in range(3):
                        await call_model(model, structured(), RetryPolicy(max_retries=0))
                finally:
                    await model.aclose()

            asyncio.run(go())
            kinds = [b["response_format"]["type"] for b in server.bodies]
        assert kinds == ["json_schema", "json_object", "json_object", "json_object"]
        assert model.structured_mode == "json_object"
