"""An OpenAI-compatible endpoint on 127.0.0.1 that reports usage and enforces a context window.

Like vLLM: ``GET /v1/models`` lists the model with its ``max_model_len``, and a chat request
whose prompt plus ``max_tokens`` passes the window gets a 400 whose message starts "This
model's maximum context length is N tokens". Token counts are characters / 4 rounded up (of
every message's content, plus 4 a message), so they are exact to test against. Every request
is logged (:attr:`UsageServer.log`): its path, prompt tokens, ``max_tokens``, phase and status.
Replies satisfy the requested schema with each string ``words`` words long.
"""

from __future__ import annotations

import asyncio
import json
import math
import socket
import threading
from dataclasses import dataclass
from typing import Any

from moot.models.testing import schema_instance

__all__ = ["Logged", "UsageServer", "prompt_tokens"]


def prompt_tokens(body: dict[str, Any]) -> int:
    """The server's count of a request's prompt tokens."""
    return sum(math.ceil(len(str(m.get("content") or "")) / 4) + 4 for m in body.get("messages") or [])


def _fill(value: Any, words: int) -> Any:
    if isinstance(value, str) and set(value) == {"x"}:  # a free string (an enum's value stays)
        return " ".join(["word"] * words)
    if isinstance(value, dict):
        return {k: _fill(v, words) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, words) for v in value]
    return value


@dataclass
class Logged:
    """One request the server read."""

    path: str
    prompt_tokens: int = 0
    max_tokens: int | None = None
    phase: str = ""
    status: int = 200


class UsageServer:
    """Use as a context manager; point ``openai:MODEL?base_url=`` at :attr:`url`."""

    def __init__(self, *, model: str = "m", window: int | None = None, words: int = 40) -> None:
        self.model = model
        self.window = window
        self.words = words
        self.window_listed = True
        """Whether ``/v1/models`` lists the window (False: only a refused request tells it)."""
        self.log: list[Logged] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._server: asyncio.Server | None = None
        self.port = 0

    @property
    def url(self) -> str:
        """The base URL (``.../v1``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    def chat(self) -> list[Logged]:
        """The chat requests (not ``/v1/models``)."""
        return [r for r in self.log if r.path.endswith("/chat/completions")]

    def __enter__(self) -> UsageServer:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("usage server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def start() -> None:
            self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, backlog=1024)
            self.port = self._server.sockets[0].getsockname()[1]

        self._loop.run_until_complete(start())
        self._ready.set()
        self._loop.run_forever()
        assert self._server is not None
        self._server.close()
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.close()

    def _answer(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if path.endswith("/models"):
            entry: dict[str, Any] = {"id": self.model, "object": "model"}
            if self.window is not None and self.window_listed:
                entry["max_model_len"] = self.window
            with self._lock:
                self.log.append(Logged(path))
            return 200, {"object": "list", "data": [entry]}
        tokens = prompt_tokens(body)
        asked = body.get("max_tokens")
        phase = str((body.get("metadata") or {}).get("phase", ""))
        if self.window is not None and tokens + int(asked or 0) > self.window:
            message = (
                f"This model's maximum context length is {self.window} tokens. However, you requested "
                f"{tokens + int(asked or 0)} tokens ({tokens} in the messages, {asked} in the completion). "
                "Please reduce the length of the messages or completion."
            )
            with self._lock:
                self.log.append(Logged(path, tokens, asked, phase, 400))
            return 400, {"object": "error", "message": message, "type": "BadRequestError", "code": 400}
        fmt = body.get("response_format") or {}
        schema = (fmt.get("json_schema") or {}).get("schema") or fmt.get("schema")
        text = json.dumps(_fill(schema_instance(schema), self.words)) if schema else "The answer is 4."
        completion = math.ceil(len(text) / 4)
        with self._lock:
            self.log.append(Logged(path, tokens, asked, phase))
        return 200, {
            "id": "chatcmpl-usage",
            "object": "chat.completion",
            "created": 0,
            "model": self.model,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            ],
            "usage": {
                "prompt_tokens": tokens,
                "completion_tokens": completion,
                "total_tokens": tokens + completion,
            },
        }

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                headers = {
                    k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:] if x)
                }
                raw = await reader.readexactly(int(headers.get("content-length", "0")))
                status, payload = self._answer(lines[0].split(" ")[1], json.loads(raw) if raw else {})
                data = json.dumps(payload).encode()
                reason = "OK" if status == 200 else "Bad Request"
                writer.write(
                    f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(data)}\r\n\r\n".encode()
                    + data
                )
                await writer.drain()
        except (
            asyncio.IncompleteReadError,
            ConnectionError,
            asyncio.LimitOverrunError,
            asyncio.CancelledError,
        ):
            pass
        finally:
            writer.transport.abort()
