"""Real local aiohttp servers that push on moot's concurrency limits (tests only).

Each :class:`LimitServer` runs an OpenAI-compatible ``/v1/chat/completions`` on
127.0.0.1, port 0, in a thread with its own event loop, and behaves as one kind of
server the limiter must cope with:

* ``ok``: answers after ``latency`` seconds;
* ``rate``: a token bucket of ``rate`` requests/s (bucket size ``rate``); beyond it,
  429 with ``Retry-After: 1``;
* ``capacity``: ``slots`` requests are served at once, each taking ``latency``; the
  others queue inside the server (latency grows with the queue, as on a GPU);
* ``burst503``: answers 503 (no Retry-After) to requests ``burst_every``..``+burst_len``
  of each cycle, else ``ok``;
* ``hang``: accepts and never answers;
* ``drip``: sends the status line, then one byte a second forever.

``kill()`` makes a running ``ok`` server refuse from then on (the listening socket closes).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

from aiohttp import web

REPLY = {"answer": "yes", "confidence": 0.9}


def _completion(text: str) -> dict[str, Any]:
    return {
        "id": "x",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5},
    }


class LimitServer:
    """One server of the module docstring's kinds; a context manager. ``url`` ends in ``/v1``."""

    def __init__(
        self,
        kind: str,
        *,
        latency: float = 0.02,
        rate: float = 50.0,
        slots: int = 8,
        burst_every: int = 20,
        burst_len: int = 5,
    ) -> None:
        self.kind = kind
        self.latency = latency
        self.rate = rate
        self.slots = slots
        self.burst_every = burst_every
        self.burst_len = burst_len
        self.served = 0
        self.throttled = 0
        self.requests = 0
        self.in_flight = 0
        self.peak = 0
        self._tokens = rate
        self._stamp = time.monotonic()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self._sem: asyncio.Semaphore | None = None
        self.url = ""

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        n = self.requests
        await request.read()
        if self.kind == "hang":
            await asyncio.sleep(3600)
        if self.kind == "drip":
            response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
            await response.prepare(request)
            while True:
                await response.write(b" ")
                await asyncio.sleep(1.0)
        if self.kind == "rate":
            now = time.monotonic()
            self._tokens = min(self.rate, self._tokens + (now - self._stamp) * self.rate)
            self._stamp = now
            if self._tokens < 1:
                self.throttled += 1
                return web.json_response({"error": "rate limited"}, status=429, headers={"Retry-After": "1"})
            self._tokens -= 1
        if self.kind == "burst503" and (n % self.burst_every) < self.burst_len:
            self.throttled += 1
            return web.json_response({"error": "overloaded"}, status=503)
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            if self.kind == "capacity":
                assert self._sem is not None
                async with self._sem:
                    await asyncio.sleep(self.latency)
            else:
                await asyncio.sleep(self.latency)
        finally:
            self.in_flight -= 1
        self.served += 1
        return web.json_response(_completion(json.dumps(REPLY)))

    async def _start(self) -> str:
        self._sem = asyncio.Semaphore(self.slots)
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, backlog=4096)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return f"http://127.0.0.1:{port}/v1"

    def __enter__(self) -> LimitServer:
        self._thread.start()
        self.url = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def kill(self) -> None:
        """Stop listening and drop every connection: the server is gone."""
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
            self._runner = None

    async def _cancel_all(self) -> None:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def __exit__(self, *exc: object) -> None:
        self.kill()
        asyncio.run_coroutine_threadsafe(self._cancel_all(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
