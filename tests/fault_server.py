"""A real OpenAI-compatible HTTP endpoint on 127.0.0.1 that injects faults on demand.

It runs its own event loop in a background thread, so it serves async tests,
sync tests and CLI subprocesses alike. A *handler* decides each request's fate
from the parsed body and the request's sequence number; the server counts every
request it read (``requests``), which is what usage must reconcile with.

Fates (see :class:`Fate`): a completion, an HTTP error with headers, a body that
is not JSON, a connection dropped before any answer, a hang (never answers), or
a drip (the right answer, one byte at a time).
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Fate", "FaultServer", "completion", "schema_reply", "varied", "without_timings"]

Kind = Literal["ok", "status", "malformed", "drop", "hang", "drip"]


@dataclass
class Fate:
    """What the server does with one request."""

    kind: Kind = "ok"
    content: str = '{"answer": "yes", "confidence": 0.5}'
    status: int = 200
    body: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    finish_reason: str = "stop"
    drip_seconds: float = 1.0
    delay: float = 0.0
    """Seconds to wait before answering (a server's latency)."""
    payload: bytes = b""
    """With kind ``status``: the body's exact bytes (e.g. gzip, with ``Content-Encoding`` in headers)."""


def completion(content: str, finish_reason: str = "stop", model: str = "fake") -> dict[str, Any]:
    """An OpenAI chat.completion body."""
    words = len(content.split())
    return {
        "id": "chatcmpl-fault",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish_reason}
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": words, "total_tokens": 10 + words},
    }


def varied(n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
    """A handler whose replies differ from request to request, as sampling does (seeded by ``n``).

    A request with a schema gets a schema-valid reply with other numbers, leaning and text; one
    without (a benchmark's plain question) gets ``The answer is K.``.
    """
    rng = random.Random(n)
    if "response_format" not in body:
        return Fate(content=f"The answer is {rng.randint(0, 20)}.")
    reply = json.loads(schema_reply(body))
    for key, value in reply.items():
        if isinstance(value, float):
            reply[key] = round(rng.random(), 3)
        elif isinstance(value, str) and key in ("answer", "content", "message"):
            reply[key] = f"{value} {rng.randint(0, 99)}"
    if "leaning" in reply:
        reply["leaning"] = rng.choice(["support", "oppose"])
    return Fate(content=json.dumps(reply))


def schema_reply(body: dict[str, Any]) -> str:
    """A JSON reply that satisfies the schema the request asked for (any structured mode).

    Prompt-mode requests carry no schema; they get the union of the fields moot's
    presets use, which every output schema accepts (extra keys are ignored).
    """
    from moot.models.testing import schema_instance

    fmt = body.get("response_format") or {}
    schema = (fmt.get("json_schema") or {}).get("schema") or fmt.get("schema")
    if schema:
        return json.dumps(schema_instance(schema))
    return json.dumps({"answer": "yes", "message": "yes", "confidence": 0.5})


def without_timings(data: Any, also: tuple[str, ...] = ()) -> Any:
    """JSON ``data`` without what differs between two runs of the same work: timings, usage, ids
    (and the keys in ``also``), to compare a re-run's or a replay's result with the first's."""
    drop = ("timings", "usage", "id", "run_id", "time", *also)
    if isinstance(data, dict):
        return {
            k: without_timings(v, also)
            for k, v in data.items()
            if k not in drop and not k.endswith(("_ms", "_s"))
        }
    if isinstance(data, list):
        return [without_timings(v, also) for v in data]
    return data


Handler = Callable[[int, dict[str, Any], dict[str, str]], Fate]
"""``handler(n, body, headers)``: the fate of the ``n``-th request (0-based)."""


class FaultServer:
    """The endpoint; use as a context manager, then point a model at :attr:`url`."""

    def __init__(self, handler: Handler, tls: ssl.SSLContext | None = None, host: str = "127.0.0.1") -> None:
        self.handler = handler
        self.tls = tls
        self.host = host
        """The host name :attr:`url` names (one that resolves to 127.0.0.1, or through a proxy)."""
        self.requests = 0
        """Requests read in full (each one is a call the client paid for)."""
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []
        self.connections = 0
        """Connections accepted."""
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    @property
    def url(self) -> str:
        """The base URL (``.../v1``)."""
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}/v1"

    def __enter__(self) -> FaultServer:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fault server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def start() -> None:
            self._server = await asyncio.start_server(
                self._handle, "127.0.0.1", 0, backlog=1024, ssl=self.tls
            )
            self.port = self._server.sockets[0].getsockname()[1]

        self._loop.run_until_complete(start())
        self._ready.set()
        self._loop.run_forever()
        for writer in list(self._writers):
            writer.transport.abort()
        assert self._server is not None
        self._server.close()
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:  # keep-alive clients otherwise wait ~40 ms per request (FIELD-NOTES)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._writers.add(writer)
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                headers = {
                    k.strip().lower(): v.strip()
                    for k, _, v in (line.partition(":") for line in lines[1:] if line)
                }
                raw = await reader.readexactly(int(headers.get("content-length", "0")))
                body = json.loads(raw) if raw else {}
                with self._lock:
                    n = self.requests
                    self.requests += 1
                    self.bodies.append(body)
                    self.headers.append(headers)
                    self.paths.append(lines[0].split(" ")[1])
                fate = self.handler(n, body, headers)
                if not await self._answer(writer, fate):
                    return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            # Shutdown. Ending normally: Python 3.11's stream callback calls task.exception()
            # on a finished handler, which raises (and prints) for a cancelled one.
            pass
        finally:
            self._writers.discard(writer)
            writer.transport.abort()

    async def _answer(self, writer: asyncio.StreamWriter, fate: Fate) -> bool:
        """Send the fate's answer; False when the connection must close."""
        if fate.delay:
            await asyncio.sleep(fate.delay)
        if fate.kind == "drop":
            return False
        if fate.kind == "hang":
            await asyncio.sleep(3600)
            return False
        if fate.kind == "status":
            payload = (
                fate.payload
                or (fate.body or json.dumps({"error": {"message": f"status {fate.status}"}})).encode()
            )
            status = fate.status
        elif fate.kind == "malformed":
            payload, status = b'{"id": "chatcmpl-x", "choices": [{"index": 0, "mess', 200
        else:
            payload, status = json.dumps(completion(fate.content, fate.finish_reason)).encode(), 200
        extra = "".join(f"{k}: {v}\r\n" for k, v in fate.headers.items())
        head = (
            f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n{extra}"
            f"Content-Length: {len(payload)}\r\n\r\n"
        ).encode()
        if fate.kind == "drip":
            for i in range(len(head + payload)):
                writer.write((head + payload)[i : i + 1])
                await writer.drain()
                await asyncio.sleep(fate.drip_seconds)
            return True
        writer.write(head + payload)
        await writer.drain()
        return True


def free_port() -> int:
    """A port nothing listens on (for connection-refused tests)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port
