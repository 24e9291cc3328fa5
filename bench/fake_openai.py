"""A minimal OpenAI-compatible chat server with a fixed artificial latency, for benchmarks.

Run: ``python bench/fake_openai.py --port 8765 --latency 0.2 [--max-concurrent 8] [--max-seconds 600]``.

``--max-concurrent C`` makes it a server with a capacity, like a GPU that decodes
C sequences at once: at most C requests are in their latency at a time, the
others queue (the replica benchmark needs the server, not the client, to be the limit).

It answers ``POST /v1/chat/completions`` after sleeping ``latency`` seconds, with the
smallest JSON instance of the requested schema (``response_format.json_schema.schema``
or ``.schema``) or, for plain requests, ``"The answer is (42)."``. asyncio streams with
HTTP/1.1 keep-alive and TCP_NODELAY, orjson bodies: thousands of concurrent requests cost little CPU.
It listens on 127.0.0.1 only and exits by itself after ``--max-seconds``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import orjson

from moot.models.testing import schema_instance

PLAIN = "The answer is (42)."


def _reply_for(body: dict) -> str:
    fmt = body.get("response_format") or {}
    schema = None
    if fmt.get("type") == "json_schema":
        schema = (fmt.get("json_schema") or {}).get("schema")
    elif fmt.get("type") == "json_object":
        schema = fmt.get("schema")
    if schema is None:
        return PLAIN
    return orjson.dumps(schema_instance(schema)).decode()


async def _handle(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    latency: float,
    slots: asyncio.Semaphore | None,
) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            raw = await reader.readexactly(length) if length else b"{}"
            first = head.split(b"\r\n", 1)[0]
            if b"/models" in first:
                payload = {"object": "list", "data": [{"id": "fake", "object": "model"}]}
            else:
                if slots is None:
                    await asyncio.sleep(latency)
                else:
                    async with slots:
                        await asyncio.sleep(latency)
                body = orjson.loads(raw or b"{}")
                text = _reply_for(body)
                payload = {
                    "id": "fake",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model", "fake"),
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": "stop",
                            "message": {"role": "assistant", "content": text},
                        }
                    ],
                    "usage": {"prompt_tokens": len(raw) // 4, "completion_tokens": len(text) // 4},
                }
            data = orjson.dumps(payload)
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                + str(len(data)).encode()
                + b"\r\n\r\n"
                + data
            )
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError, asyncio.CancelledError):
        pass  # the client went away, or the server is shutting down
    finally:
        writer.close()


async def serve(port: int, latency: float, max_seconds: float, max_concurrent: int = 0) -> None:
    """Serve until ``max_seconds`` have passed."""
    slots = asyncio.Semaphore(max_concurrent) if max_concurrent > 0 else None
    server = await asyncio.start_server(
        lambda r, w: _handle(r, w, latency, slots), "127.0.0.1", port, backlog=4096, limit=2**22
    )
    async with server:
        await asyncio.sleep(max_seconds)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def running(
    latency: float, max_seconds: float = 900, port: int | None = None, max_concurrent: int = 0
) -> Iterator[int]:
    """Run this server in a child process for the ``with`` block; yields its port once it accepts."""
    port = port or free_port()
    cmd = [sys.executable, str(Path(__file__).resolve()), "--port", str(port), "--latency", str(latency)]
    cmd += ["--max-concurrent", str(max_concurrent)]
    proc = subprocess.Popen([*cmd, "--max-seconds", str(max_seconds)])
    try:
        deadline = time.time() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.time() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"fake server on port {port} did not start") from None
                time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--max-concurrent", type=int, default=0, help="capacity (0: unlimited)")
    parser.add_argument("--max-seconds", type=float, default=900)
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.latency, args.max_seconds, args.max_concurrent))


if __name__ == "__main__":
    main()
