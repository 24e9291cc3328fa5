"""``moot serve``'s app: OpenAI's chat completions over debates, and the MCP server at ``/mcp``.

Routes (FastAPI, the viewer's stack):

- ``POST /v1/chat/completions``: the request's ``model`` is a served name (``moot:answer``,
  ``moot:adversarial@openai:gpt-4o-mini``; :func:`moot.serve.service.parse_served_name`). The
  last user message is the topic; every other message (a system message, the conversation
  before) is the shared context, a list of ``{"role", "content"}``. ``temperature`` sets the
  protocol's ``temperature``; ``max_tokens`` (or ``max_completion_tokens``) its
  ``max_tokens_per_turn``; ``seed`` is recorded with the run (the engine sends no seed). Unknown
  fields are ignored, as OpenAI's servers do; a field of the wrong type is a 400.

  Without ``stream``: a ``chat.completion`` whose message is the final answer, ``usage`` the
  total of every agent's calls, and a ``moot`` object (``run_id``, ``status``, ``fallback``,
  ``decision``, ``view_url``). With ``stream: true``: server-sent ``chat.completion.chunk`` s, each
  finished turn as ``delta.reasoning_content``, the final answer as ``delta.content``, the
  ``moot`` object on the last choice chunk, the usage chunk when ``stream_options.include_usage``,
  then ``[DONE]``. A client that disconnects cancels its debate (recorded ``interrupted``).
- ``GET /v1/models``: the served names.
- ``GET /health``: ``status`` (``ok``, ``draining``), requests ``admitted`` and debates ``in_flight``.
- ``/mcp``: the MCP server (:mod:`moot.serve.mcp_tools`), streamable HTTP.

Errors are OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``: 400 (bad body,
unknown preset, no user message, a body over the size limit), 401 (token), 429 with
``Retry-After`` (debates and queue full), 503 (shutting down), 504 (the debate's deadline passed:
the fallback is in ``moot``), 502 (the debate produced no answer at all).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any, Literal

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from .._ids import new_id
from ..errors import MootError, UsageError, error_text
from ..transcript import DebateResult, Turn
from .service import Busy, DebateOutcome, DebateService, Draining, Reservation, parse_served_name, turn_text

__all__ = ["ChatRequest", "create_app", "split_messages"]

LOOPBACK = ("127.0.0.1", "localhost", "::1")
MAX_BODY_BYTES = 1 << 20
"""The largest request body accepted (1 MiB): a debate's topic and context, not a corpus."""


class ApiError(Exception):
    """An error answered in OpenAI's shape."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        kind: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.code, self.param = status, message, kind, code, param
        self.headers = headers or {}
        self.extra = extra or {}

    def response(self) -> JSONResponse:
        """The JSON response."""
        body = {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}
        return JSONResponse(body | self.extra, status_code=self.status, headers=self.headers)


# -- the request ---------------------------------------------------------------------------------
class ContentPart(BaseModel):
    """One part of a message's content (only ``text`` parts are read)."""

    model_config = ConfigDict(extra="ignore")
    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    """One message of the conversation."""

    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None

    def text(self) -> str:
        """The message's text (text parts joined)."""
        if isinstance(self.content, list):
            return "\n".join(p.text for p in self.content if p.type == "text" and p.text)
        return self.content or ""


class StreamOptions(BaseModel):
    """``stream_options``."""

    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class ChatRequest(BaseModel):
    """The fields of a chat completion request moot reads (others are ignored, as OpenAI does)."""

    model_config = ConfigDict(extra="ignore", strict=True)
    model: str
    messages: list[ChatMessage]
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    temperature: float | None = Field(None, ge=0, le=2)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    seed: int | None = None
    user: str | None = Field(None, max_length=256)
    n: int | None = Field(None, ge=1, le=1)
    """A debate gives one answer: ``n`` above 1 is a 400, not a silent single choice."""


def split_messages(messages: list[ChatMessage]) -> tuple[str, list[dict[str, str]] | None]:
    """``(topic, context)``: the last user message, and every other message as ``{"role", "content"}``.

    Raises:
        ApiError: no messages, or no user message with text.
    """
    if not messages:
        raise ApiError(400, "messages is empty: send at least one user message (the topic)", param="messages")
    last = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "user"), None)
    if last is None or not messages[last].text().strip():
        raise ApiError(400, "no user message with text: the last user message is the topic", param="messages")
    context = [
        {"role": m.role, "content": m.text()} for i, m in enumerate(messages) if i != last and m.text()
    ]
    return messages[last].text().strip(), context or None


def _parse(body: bytes) -> ChatRequest:
    try:
        return ChatRequest.model_validate_json(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        kind = "invalid JSON" if first["type"] == "json_invalid" else f"{where}: {first['msg']}"
        raise ApiError(400, f"bad request body: {kind}", param=where or None, code="invalid_body") from None


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(400, f"request body over {limit} bytes", code="body_too_large")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(400, f"request body over {limit} bytes", code="body_too_large")
        chunks.append(chunk)
    return b"".join(chunks)


# -- the answer ----------------------------------------------------------------------------------
def _usage(result: DebateResult | None) -> dict[str, int]:
    usage = result.usage if result is not None else None
    prompt = usage.prompt_tokens if usage is not None else 0
    completion = usage.completion_tokens if usage is not None else 0
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _status(result: DebateResult | None) -> str:
    if result is None:
        return "interrupted"
    if result.fallback:
        return "fell_back"
    return "complete"


def _moot(service: DebateService, outcome: DebateOutcome) -> dict[str, Any]:
    result = outcome.result
    return {
        "run_id": outcome.run_id,
        "status": _status(result),
        "fallback": result.fallback if result is not None else None,
        "decision": result.decision.model_dump(mode="json") if result and result.decision else None,
        "failed_turns": result.failed_turns if result is not None else 0,
        "view_url": service.view_link(outcome.run_id),
    }


def _check_answer(service: DebateService, outcome: DebateOutcome) -> None:
    """Raise the error a result that is no answer gets: 504 past the deadline, 502 without an answer."""
    result = outcome.result
    if result is None:
        return
    extra = {"moot": _moot(service, outcome) | {"answer": result.final_answer}}
    if result.fallback and result.fallback.startswith("timeout"):
        raise ApiError(
            504,
            f"the debate's deadline passed: {result.fallback}",
            kind="timeout",
            code="deadline",
            extra=extra,
        )
    if result.final_answer is None or not result.final_answer.strip():
        reason = result.fallback or "every turn failed"
        raise ApiError(502, f"the debate produced no answer: {reason}", kind="server_error", extra=extra)


def _completion(model: str, ident: str, outcome: DebateOutcome, service: DebateService) -> dict[str, Any]:
    result = outcome.result
    return {
        "id": ident,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": result.final_answer if result else None},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": _usage(result),
        "moot": _moot(service, outcome),
    }


def _sse(data: dict[str, Any] | str) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return f"data: {text}\n\n".encode()


class _Chunks:
    """Builds one stream's ``chat.completion.chunk`` s."""

    def __init__(self, ident: str, model: str, include_usage: bool) -> None:
        self.ident, self.model, self.include_usage = ident, model, include_usage
        self.created = int(time.time())

    def chunk(self, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        body: dict[str, Any] = {
            "id": self.ident,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }
        if self.include_usage:
            body["usage"] = None
        return _sse(body | extra)

    def usage(self, usage: dict[str, int]) -> bytes:
        return _sse(
            {
                "id": self.ident,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": usage,
            }
        )


# -- the app -------------------------------------------------------------------------------------
class _TokenGuard:
    """Every HTTP request must carry the token as ``Authorization: Bearer`` (401 otherwise).

    Plain ASGI, not Starlette's ``BaseHTTPMiddleware``: that runs the route in a task group of
    its own, where a shutdown's cancellation could not be answered with a 503.
    """

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        auth = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
        given = auth[7:].strip() if auth[:7].lower() == b"bearer " else b""
        if given and hmac.compare_digest(given, self.token):
            await self.app(scope, receive, send)
            return
        what = "a wrong token" if given else "no token"
        response = ApiError(
            401,
            f"{what}: send the server's --token as the API key (Authorization: Bearer TOKEN)",
            kind="authentication_error",
            code="invalid_api_key",
        ).response()
        await response(scope, receive, send)


def create_app(
    service: DebateService,
    *,
    token: str | None = None,
    host: str = "127.0.0.1",
    mcp: bool = True,
    max_body_bytes: int = MAX_BODY_BYTES,
    shutdown_grace_s: float = 0.0,
    on_started: Callable[[], Coroutine[Any, Any, None]] | None = None,
) -> FastAPI:
    """The ``moot serve`` app over ``service`` (see the module docstring).

    Args:
        service: what runs the debates.
        token: if set, every request must carry it as ``Authorization: Bearer``.
        host: the address the server binds; on loopback, requests must name a loopback host.
        mcp: serve the MCP server at ``/mcp`` too.
        max_body_bytes: the largest request body.
        shutdown_grace_s: at shutdown, seconds the debates still running get before they are cancelled.
        on_started: awaited in a task once the app started (the CLI prints the address from it).
    """
    server = None
    if mcp:
        from .mcp_tools import build_mcp

        server = build_mcp(service)
        mcp_app = server.streamable_http_app(
            streamable_http_path="/mcp", host=host, max_request_body_size=max_body_bytes
        )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        started = asyncio.create_task(on_started()) if on_started is not None else None
        try:
            if server is not None:
                async with server.session_manager.run():
                    yield
                    service.draining = True  # MCP sessions end next: start nothing new meanwhile
            else:
                yield
        finally:
            await service.aclose(grace_s=shutdown_grace_s)
            if started is not None:  # awaited: an error of the start-up task is not lost
                started.cancel()
                for outcome in await asyncio.gather(started, return_exceptions=True):
                    if isinstance(outcome, Exception):
                        raise outcome

    app = FastAPI(
        title="moot serve",
        description="Debates behind OpenAI's chat completions API, and an MCP server at /mcp.",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    app.state.service = service
    if host in LOOPBACK:  # DNS-rebinding guard, as moot view's
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=["127.0.0.1", "localhost", "[::1]"])
    if token:
        app.add_middleware(_TokenGuard, token=token)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> Response:
        return exc.response()

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {
            "status": "draining" if service.draining else "ok",
            "admitted": service.admitted,
            "in_flight": service.in_flight,
            "max_debates": service.settings.max_debates,
        }

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        data = [
            {"id": f"moot:{name}", "object": "model", "created": 0, "owned_by": "moot", "description": text}
            for name, text in service.names().items()
        ]
        return {"object": "list", "data": data}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        return await _chat(service, request, max_body_bytes)

    if server is not None:
        app.mount("/", mcp_app)  # last: its one route is /mcp; everything above matched first
    return app


async def _chat(service: DebateService, request: Request, max_body_bytes: int) -> Response:
    """``POST /v1/chat/completions`` (see the module docstring)."""
    req = _parse(await _read_body(request, max_body_bytes))
    try:
        name, spec = parse_served_name(req.model)
        topic, context = split_messages(req.messages)
        overrides: dict[str, Any] = {}
        if req.temperature is not None:
            overrides["temperature"] = req.temperature
        cap = req.max_completion_tokens or req.max_tokens
        if cap is not None:
            overrides["max_tokens_per_turn"] = cap
        debate = service.debate_for(name, spec, overrides)
        reservation = service.reserve()
    except Busy as exc:
        raise ApiError(
            429,
            str(exc),
            kind="rate_limit_error",
            code="busy",
            headers={"Retry-After": str(exc.retry_after_s)},
        ) from None
    except Draining as exc:
        raise ApiError(
            503, str(exc), kind="server_error", code="shutting_down", headers={"Retry-After": "5"}
        ) from None
    except MootError as exc:  # an unknown preset or provider, a missing key, a bad override
        raise ApiError(400, error_text(exc), param="model", code="invalid_model") from None
    record = {
        "served_model": req.model,
        "user": req.user,
        "request": {
            "temperature": req.temperature,
            "max_tokens": req.max_completion_tokens or req.max_tokens,
            "seed": req.seed,
            "stream": bool(req.stream),
        },
    }
    ident = f"chatcmpl-{new_id()}"
    if req.stream:
        include = bool(req.stream_options and req.stream_options.include_usage)
        body = _stream(
            service, debate, topic, context, record, reservation, _Chunks(ident, req.model, include)
        )
        return StreamingResponse(
            body,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    try:
        outcome = await _unless_gone(
            request,
            service.run_debate(debate, topic, context=context, record=record, reservation=reservation),
        )
        if outcome is None:  # the client went away: its debate is cancelled and recorded interrupted
            return Response(status_code=499)
    except asyncio.CancelledError:
        if not service.draining:
            raise  # the client went away: nobody to answer
        # The shutdown's grace ended: the debate is recorded interrupted; the caller hears why.
        return ApiError(
            503,
            "the server shut down before the debate ended (its run is recorded interrupted); retry",
            kind="server_error",
            code="shutting_down",
            headers={"Retry-After": "5"},
        ).response()
    except Draining as exc:
        raise ApiError(
            503, str(exc), kind="server_error", code="shutting_down", headers={"Retry-After": "5"}
        ) from None
    except UsageError as exc:
        raise ApiError(400, error_text(exc)) from None
    _check_answer(service, outcome)
    return JSONResponse(_completion(req.model, ident, outcome, service))


async def _unless_gone(request: Request, work: Coroutine[Any, Any, DebateOutcome]) -> DebateOutcome | None:
    """``work``'s outcome, or None when the client disconnected first (then ``work`` is cancelled, awaited).

    The body is read, so the next ASGI message is the disconnect: a request that waits for a
    debate notices at once that nobody waits for it any more.
    """
    task = asyncio.ensure_future(work)

    async def gone() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watch = asyncio.ensure_future(gone())
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:  # a cancellation (the shutdown) lands here too: the debate ends before the answer
        watch.cancel()
        if not task.done():
            task.cancel()
        await asyncio.gather(watch, task, return_exceptions=True)
    if task.cancelled():
        if watch.done() and not watch.cancelled():
            return None
        raise asyncio.CancelledError
    return task.result()


async def _stream(
    service: DebateService,
    debate: Any,
    topic: str,
    context: Any,
    record: dict[str, Any],
    reservation: Reservation,
    chunks: _Chunks,
) -> AsyncIterator[bytes]:
    """The SSE body: turns as reasoning, the answer, the usage chunk, ``[DONE]``.

    Cancelled (the client left, the server stops): the debate is cancelled and awaited, so its run
    is recorded ``interrupted`` before this ends.
    """
    queue: asyncio.Queue[bytes | None] = asyncio.Queue()
    names = {k: p.name for k, p in debate.protocol.personas.items()}

    async def on_turn(turn: Turn) -> None:
        queue.put_nowait(chunks.chunk({"reasoning_content": turn_text(turn, names)}))

    runner = asyncio.create_task(
        service.run_debate(
            debate, topic, context=context, record=record, on_turn=on_turn, reservation=reservation
        )
    )
    runner.add_done_callback(lambda _: queue.put_nowait(None))
    try:
        yield chunks.chunk({"role": "assistant", "content": ""})
        while (item := await queue.get()) is not None:
            yield item
        try:
            outcome = runner.result()
        except MootError as exc:  # headers are sent: the error is the stream's last event
            yield _sse(
                {"error": {"message": error_text(exc), "type": "server_error", "param": None, "code": None}}
            )
            yield _sse("[DONE]")
            return
        result = outcome.result
        answer = result.final_answer if result is not None else None
        moot = _moot(service, outcome)
        if answer:
            yield chunks.chunk({"content": answer})
        yield chunks.chunk({}, "stop", moot=moot)
        if chunks.include_usage:
            yield chunks.usage(_usage(result))
        yield _sse("[DONE]")
    finally:
        if not runner.done():
            runner.cancel()
            import anyio

            with anyio.CancelScope(shield=True):
                await asyncio.gather(runner, return_exceptions=True)
        elif not runner.cancelled():
            runner.exception()  # retrieved: an error already sent is not reported again at exit
