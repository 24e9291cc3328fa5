"""Wire-format tests for the OpenAI-compatible backend, over a real socket, for every HTTP stack.

Each test runs against :class:`fault_server.FaultServer` (127.0.0.1) once with the
aiohttp transport (the default) and once with the ``openai`` SDK (``http="sdk"``): both
stacks must send the same requests and turn the same answers into the same results.
"""

from __future__ import annotations

import asyncio
import gc
import json
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fault_server import Fate, FaultServer, free_port, schema_reply
from moot.errors import (
    MissingCredentialsError,
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelRequestsBlocked,
    ModelResponseError,
    UsageError,
)
from moot.models import base
from moot.models.base import Message, ModelRequest, ModelResponse
from moot.models.openai import DEFAULT_BASE_URL, OpenAIModel, parse_retry_after
from moot.models.retry import RetryPolicy, call_model

SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "confidence": {"type": "number"}},
    "required": ["answer", "confidence"],
}
STACKS = ["aiohttp", "sdk"]
Make = Callable[..., OpenAIModel]
PLAIN = ModelRequest(messages=[Message(role="user", content="hi")])
LLAMA_CPP_500 = 'response_format type must be one of "text" or "json_object", but got: json_schema'
NAMES_FORMAT = "Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model."


def ok(content: str = '{"answer": "yes", "confidence": 0.5}', finish: str = "stop") -> Fate:
    return Fate(content=content, finish_reason=finish)


def error(status: int, headers: dict[str, str] | None = None, message: str | None = None) -> Fate:
    body = json.dumps({"error": {"message": message or f"status {status}", "type": "x"}})
    return Fate("status", status=status, body=body, headers=headers or {})


def raw(status: int, body: str) -> Fate:
    return Fate("status", status=status, body=body)


def script(server: FaultServer, *fates: Fate) -> None:
    """Answer the next requests with ``fates``, in order; any request beyond them gets a loud 599."""
    queue = list(fates)
    start = server.requests

    def handler(n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
        i = n - start
        return queue[i] if i < len(queue) else error(599, message="no scripted reply left")

    server.handler = handler


def structured(**kwargs: Any) -> ModelRequest:
    return ModelRequest(
        messages=[Message(role="system", content="Be brief."), Message(role="user", content="Sky blue?")],
        json_schema=SCHEMA,
        schema_name="verdict",
        **kwargs,
    )


def run(model: OpenAIModel, request: ModelRequest, times: int = 1) -> list[ModelResponse]:
    """Send ``request`` ``times`` times in a fresh loop, closing the model's connections after."""

    async def go() -> list[ModelResponse]:
        try:
            return [await model.request(request) for _ in range(times)]
        finally:
            await model.aclose()

    return asyncio.run(go())


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MOOT_OPENAI_STRUCTURED_MODE", "MOOT_OPENAI_HTTP"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def allow_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    # The server is a local test server: a "real" request reaches nothing else.
    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)


@pytest.fixture
def server() -> Iterator[FaultServer]:
    with FaultServer(lambda n, body, headers: ok()) as srv:
        yield srv


@pytest.fixture(params=STACKS)
def stack(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_model(server: FaultServer, stack: str) -> Make:
    def make(**kwargs: Any) -> OpenAIModel:
        kwargs.setdefault("api_key", "sk-test")
        kwargs.setdefault("base_url", server.url)
        kwargs.setdefault("http", stack)
        return OpenAIModel("gpt-4o-mini", **kwargs)

    return make


@pytest.mark.usefixtures("allow_requests")
class TestWireFormat:
    def test_json_schema_request_body(self, make_model: Make, server: FaultServer) -> None:
        (resp,) = run(make_model(), structured(max_tokens=40, temperature=0.3, seed=7))
        (body,) = server.bodies
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
        assert server.paths == ["/v1/chat/completions"]
        assert server.headers[0]["authorization"] == "Bearer sk-test"
        assert server.headers[0]["content-type"] == "application/json"
        assert json.loads(resp.text) == {"answer": "yes", "confidence": 0.5}
        assert (resp.usage.calls, resp.usage.prompt_tokens, resp.usage.completion_tokens) == (1, 10, 4)
        assert resp.finish_reason == "stop"
        assert resp.model == "openai:fake"  # the model the server says answered

    def test_plain_request_has_no_response_format(self, make_model: Make, server: FaultServer) -> None:
        script(server, ok("It is.", finish="length"))
        (resp,) = run(make_model(), PLAIN)
        (body,) = server.bodies
        assert "response_format" not in body
        assert {"max_tokens", "temperature", "seed"}.isdisjoint(body)
        assert (resp.text, resp.finish_reason) == ("It is.", "length")

    def test_missing_usage_and_null_content(self, make_model: Make, server: FaultServer) -> None:
        choice = {"index": 0, "message": {"role": "assistant", "content": None}, "finish_reason": "stop"}
        script(server, raw(200, json.dumps({"id": "x", "object": "chat.completion", "created": 0,
                                            "model": "m", "choices": [choice]})))  # fmt: skip
        (resp,) = run(make_model(), PLAIN)
        assert (resp.text, resp.usage.calls, resp.usage.total_tokens) == ("", 1, 0)

    def test_json_object_mode_is_llama_cpp_dialect(self, make_model: Make, server: FaultServer) -> None:
        run(make_model(structured_mode="json_object"), structured())
        assert server.bodies[0]["response_format"] == {"type": "json_object", "schema": SCHEMA}

    def test_prompt_mode_sends_no_response_format(
        self, make_model: Make, server: FaultServer, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("MOOT_OPENAI_STRUCTURED_MODE", "prompt")
        model = make_model()
        run(model, structured())
        assert "response_format" not in server.bodies[0]
        assert model.mode_fixed

    def test_unknown_mode_is_a_usage_error(self, make_model: Make) -> None:
        with pytest.raises(UsageError, match="structured mode"):
            make_model(structured_mode="xml")


@pytest.mark.usefixtures("allow_requests")
class TestFallback:
    """The structured mode moves down only on a response that proves the server lacks it."""

    def test_llama_cpp_500_falls_back_to_json_object_and_is_remembered(
        self, make_model: Make, server: FaultServer
    ) -> None:
        script(server, error(500, message=LLAMA_CPP_500), ok(), ok())
        model = make_model()
        run(model, structured(), times=2)
        kinds = [b["response_format"]["type"] for b in server.bodies]
        # First request: json_schema is refused, json_object works. Second request: straight to json_object.
        assert kinds == ["json_schema", "json_object", "json_object"]
        assert server.bodies[1]["response_format"]["schema"] == SCHEMA
        assert model.structured_mode == "json_object"

    @pytest.mark.parametrize("status", [400, 422, 501])
    def test_client_errors_naming_response_format(
        self, make_model: Make, server: FaultServer, status: int
    ) -> None:
        script(server, error(status, message=NAMES_FORMAT), ok())
        model = make_model()
        run(model, structured())
        assert model.structured_mode == "json_object"

    def test_falls_through_to_prompt_mode(self, make_model: Make, server: FaultServer) -> None:
        script(server, error(400, message=NAMES_FORMAT), error(422, message="bad response_format"), ok())
        model = make_model()
        run(model, structured())
        assert [b.get("response_format", {}).get("type") for b in server.bodies] == [
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
        self, make_model: Make, server: FaultServer, status: int, message: str
    ) -> None:
        script(server, error(status, message=message))
        model = make_model()
        with pytest.raises(ModelHTTPError) as info:
            run(model, structured())
        assert info.value.status_code == status
        assert server.requests == 1  # raised at once for call_model to retry, in the same mode
        assert model.structured_mode == "json_schema"

    def test_explicit_mode_never_falls_back(self, make_model: Make, server: FaultServer) -> None:
        script(server, error(500, message=LLAMA_CPP_500))
        model = make_model(structured_mode="json_schema")
        with pytest.raises(ModelHTTPError):
            run(model, structured())
        assert server.requests == 1

    def test_no_fallback_for_plain_requests(self, make_model: Make, server: FaultServer) -> None:
        script(server, error(400, message=NAMES_FORMAT))
        model = make_model()
        with pytest.raises(ModelHTTPError):
            run(model, PLAIN)
        assert server.requests == 1
        assert model.structured_mode == "json_schema"


@pytest.mark.usefixtures("allow_requests")
class TestErrors:
    def test_429_with_retry_after(self, make_model: Make, server: FaultServer) -> None:
        script(server, error(429, {"Retry-After": "2"}))
        with pytest.raises(ModelHTTPError) as info:
            run(make_model(), structured())
        err = info.value
        assert (err.status_code, err.retry_after, err.retryable) == (429, 2.0, True)
        assert err.model == "openai:gpt-4o-mini"
        assert "status 429" in err.body

    def test_retry_after_ms_wins(self, make_model: Make, server: FaultServer) -> None:
        script(server, error(503, {"retry-after-ms": "250", "Retry-After": "9"}))
        with pytest.raises(ModelHTTPError) as info:
            run(make_model(), PLAIN)
        assert (info.value.status_code, info.value.retry_after, info.value.retryable) == (503, 0.25, True)

    def test_401_is_not_retryable(self, make_model: Make, server: FaultServer) -> None:
        script(server, error(401))
        with pytest.raises(ModelHTTPError) as info:
            run(make_model(), structured())
        assert (info.value.status_code, info.value.retryable, info.value.retry_after) == (401, False, None)

    def test_error_body_is_kept_as_text(self, make_model: Make, server: FaultServer) -> None:
        script(server, raw(502, "<html>bad gateway</html>"))
        with pytest.raises(ModelHTTPError) as info:
            run(make_model(), PLAIN)
        assert (info.value.status_code, info.value.body) == (502, "<html>bad gateway</html>")

    def test_connection_refused(self, make_model: Make) -> None:
        with pytest.raises(ModelConnectionError) as info:
            run(make_model(base_url=f"http://127.0.0.1:{free_port()}/v1"), structured())
        assert info.value.retryable
        assert info.value.model == "openai:gpt-4o-mini"

    def test_dropped_connection(self, make_model: Make, server: FaultServer) -> None:
        script(server, Fate("drop"))
        with pytest.raises(ModelConnectionError) as info:
            run(make_model(), PLAIN)
        assert info.value.retryable

    def test_timeout_is_a_connection_error(self, make_model: Make, server: FaultServer) -> None:
        script(server, Fate("hang"))
        with pytest.raises(ModelConnectionError) as info:
            run(make_model(timeout=0.3), structured())
        assert info.value.retryable

    @pytest.mark.parametrize(
        "fate", [Fate("malformed"), raw(200, "<html>oops</html>"), raw(200, '{"choices": "none"}')]
    )
    def test_unreadable_body_is_retryable(self, make_model: Make, server: FaultServer, fate: Fate) -> None:
        script(server, fate)
        with pytest.raises(ModelResponseError) as info:
            run(make_model(), PLAIN)
        assert info.value.retryable

    def test_no_choices(self, make_model: Make, server: FaultServer) -> None:
        script(server, raw(200, json.dumps({"id": "x", "object": "chat.completion", "created": 0,
                                            "model": "m", "choices": []})))  # fmt: skip
        with pytest.raises(ModelError, match="no choices"):
            run(make_model(), PLAIN)

    def test_call_model_honours_retry_after(self, make_model: Make, server: FaultServer) -> None:
        script(server, error(429, {"retry-after": "2"}), ok())
        model = make_model()
        waits: list[float] = []

        async def sleep(seconds: float) -> None:
            waits.append(seconds)

        async def go() -> ModelResponse:
            try:
                return await call_model(model, structured(), RetryPolicy(max_retries=2), sleep=sleep)
            finally:
                await model.aclose()

        resp = asyncio.run(go())
        assert waits == [2.0]
        assert json.loads(resp.text)["answer"] == "yes"


def test_requests_blocked_without_touching_the_server(make_model: Make, server: FaultServer) -> None:
    with pytest.raises(ModelRequestsBlocked):
        run(make_model(), structured())
    assert server.requests == 0


class TestConfiguration:
    def test_missing_key_for_openai_endpoint(self) -> None:
        with pytest.raises(MissingCredentialsError) as info:
            OpenAIModel.from_spec("gpt-4o-mini")
        assert info.value.env_var == "OPENAI_API_KEY"

    def test_key_from_env(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
        model = OpenAIModel.from_spec("gpt-4o")
        assert (model.name, model.model, model.base_url) == ("openai:gpt-4o", "gpt-4o", DEFAULT_BASE_URL)
        assert model.http == "aiohttp"

    def test_empty_spec_uses_default_model(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
        assert OpenAIModel.from_spec("").name == "openai:gpt-4o-mini"

    @pytest.mark.usefixtures("allow_requests")
    @pytest.mark.parametrize("http", STACKS)
    def test_base_url_from_env_needs_no_key(
        self, monkeypatch: pytest.MonkeyPatch, server: FaultServer, http: str
    ) -> None:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/")
        monkeypatch.setenv("MOOT_OPENAI_HTTP", http)
        model = OpenAIModel.from_spec("qwen")
        assert (model.base_url, model.http) == (server.url, http)
        run(model, structured())
        assert server.paths == ["/v1/chat/completions"]
        assert server.headers[0]["authorization"] == "Bearer not-needed"

    def test_constructor_overrides_env(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("OPENAI_BASE_URL", "http://env.invalid/v1")
        monkeypatch.setenv("MOOT_OPENAI_STRUCTURED_MODE", "prompt")
        monkeypatch.setenv("MOOT_OPENAI_HTTP", "sdk")
        model = OpenAIModel(
            "m",
            base_url="http://arg.invalid/v1",
            structured_mode="json_object",
            max_concurrency=3,
            timeout=5,
            http="aiohttp",
        )
        assert (model.base_url, model.structured_mode, model.max_concurrency, model.http) == (
            "http://arg.invalid/v1",
            "json_object",
            3,
            "aiohttp",
        )

    def test_http_stack_choice_and_errors(self, monkeypatch: pytest.MonkeyPatch) -> None:
        url = "http://127.0.0.1:9/v1"
        assert OpenAIModel("m", base_url=url).http == "aiohttp"
        monkeypatch.setenv("MOOT_OPENAI_HTTP", "lean")  # the default stack's name before
        assert OpenAIModel("m", base_url=url).http == "aiohttp"
        monkeypatch.setenv("MOOT_OPENAI_HTTP", "sdk-aiohttp")
        assert OpenAIModel("m", base_url=url).http == "sdk-aiohttp"
        # A caller's HTTP client is the SDK's, so it selects the SDK path.
        assert OpenAIModel("m", base_url=url, http_client=object()).http == "sdk"
        monkeypatch.setenv("MOOT_OPENAI_HTTP", "curl")
        with pytest.raises(UsageError, match="unknown HTTP stack 'curl'"):
            OpenAIModel("m", base_url=url)
        with pytest.raises(UsageError, match="http_client= is the SDK's"):
            OpenAIModel("m", base_url=url, http="aiohttp", http_client=object())


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


@pytest.mark.usefixtures("allow_requests")
@pytest.mark.parametrize("http", ["aiohttp", "sdk", "sdk-aiohttp"])
def test_every_stack_sends_the_same_concurrent_requests_and_closes(server: FaultServer, http: str) -> None:
    server.handler = lambda n, body, headers: ok("plain reply")

    async def main() -> list[str]:
        model = OpenAIModel("m", base_url=server.url, http=http)  # type: ignore[arg-type]
        try:
            request = ModelRequest(messages=[Message(role="user", content="hi")], max_tokens=5, seed=3)
            replies = await asyncio.gather(*(model.request(request) for _ in range(3)))
        finally:
            await model.aclose()
        return [r.text for r in replies]

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert asyncio.run(main()) == ["plain reply"] * 3
        gc.collect()
    assert not [w for w in caught if "nclosed" in str(w.message)]  # the session was closed
    expected = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "seed": 3}
    assert server.bodies == [expected] * 3


@pytest.mark.usefixtures("allow_requests")
def test_the_session_closes_with_its_loop_without_aclose(server: FaultServer) -> None:
    """A caller who never calls aclose() gets no "Unclosed client session" warning from asyncio.run."""
    model = OpenAIModel("m", base_url=server.url)

    async def main() -> None:
        await model.request(PLAIN)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(main())
        asyncio.run(main())  # a second loop gets a session of its own
        asyncio.run(main())
        gc.collect()
    assert not [w for w in caught if "nclosed" in str(w.message)]
    assert server.requests == 3
    assert len(model._transport._sessions) == 1  # closed loops are not kept alive


@pytest.mark.parametrize("http", STACKS)
class TestTransientErrorsOverARealSocket:
    """Transient faults are retried in the same structured mode."""

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
    def test_two_faults_then_an_answer(self, fault: Fate, http: str, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)

        def handler(n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
            return fault if n < 2 else Fate(content=schema_reply(body))

        with FaultServer(handler) as server:
            model = OpenAIModel("m", base_url=server.url, http=http)  # type: ignore[arg-type]

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

    def test_llama_cpp_refusal_is_proof(self, http: str, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)
        refusal = json.dumps({"error": {"code": 500, "message": LLAMA_CPP_500, "type": "server_error"}})

        def handler(n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
            if body["response_format"]["type"] == "json_schema":
                return Fate("status", status=500, body=refusal)
            return Fate(content=schema_reply(body))

        with FaultServer(handler) as server:
            model = OpenAIModel("m", base_url=server.url, http=http)  # type: ignore[arg-type]

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
