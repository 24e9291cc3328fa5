"""Do ``usage.attempts`` and a server's own request count agree, with deadlines cutting requests short?

Run: ``python bench/attempts_soak.py [--debates 200] [--concurrency 50] [--model-concurrency 2]
[--timeout 4] [--latency 0.3]``.

It serves an OpenAI-compatible endpoint on 127.0.0.1 that counts every request it reads in
full (each answer after ``--latency`` seconds, +-50% at random), runs the command a user would
type, ``moot run --input TOPICS --output OUT --concurrency C --model-concurrency M --timeout T
--model openai:soak?base_url=URL``, in a subprocess, and prints the sum of ``usage.attempts`` over the
results next to the server's count. With a deadline shorter than a debate, many requests are
cancelled while they wait for a slot: they sent nothing and must not count.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from moot.models.testing import schema_instance


class CountingServer:
    """The endpoint, in a thread of its own; ``requests`` counts requests read in full."""

    def __init__(self, latency: float) -> None:
        self.latency = latency
        self.requests = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()
        self._ready.wait(10)

    def _serve(self) -> None:
        async def start() -> None:
            server = await asyncio.start_server(self._handle, "127.0.0.1", 0, backlog=4096)
            self.port = server.sockets[0].getsockname()[1]

        self._loop.run_until_complete(start())
        self._ready.set()
        self._loop.run_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
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
                body = json.loads(await reader.readexactly(length))
                self.requests += 1
                await asyncio.sleep(self.latency * random.uniform(0.5, 1.5))
                fmt = body.get("response_format") or {}
                schema = (fmt.get("json_schema") or {}).get("schema") or fmt.get("schema")
                content = json.dumps(schema_instance(schema)) if schema else "The answer is (42)."
                payload = json.dumps(
                    {
                        "id": "c",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body.get("model", "soak"),
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": content},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
                    }
                ).encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                    % (len(payload), payload)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.transport.abort()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--debates", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--model-concurrency", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=4.0)
    parser.add_argument("--latency", type=float, default=0.3)
    args = parser.parse_args()
    server = CountingServer(args.latency)
    url = f"http://127.0.0.1:{server.port}/v1"
    with tempfile.TemporaryDirectory() as tmp:
        topics, out = Path(tmp) / "topics.jsonl", Path(tmp) / "out.jsonl"
        topics.write_text(
            "".join(json.dumps({"topic": f"Is {i} prime?"}) + "\n" for i in range(args.debates))
        )
        command = [sys.executable, "-m", "moot", "run", "--input", str(topics), "--output", str(out)]
        command += [
            "--concurrency",
            str(args.concurrency),
            "--model-concurrency",
            str(args.model_concurrency),
        ]
        command += ["--timeout", str(args.timeout), "--model", f"openai:soak?base_url={url}", "--no-store"]
        env = {**os.environ, "OPENAI_API_KEY": "sk-soak"}
        started = time.perf_counter()
        done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=tmp)
        wall = time.perf_counter() - started
        time.sleep(0.5)  # the last requests' bytes reach the server's reader
        results = [json.loads(line) for line in out.read_text().splitlines()]
    attempts = sum(r["usage"]["attempts"] for r in results)
    calls = sum(r["usage"]["calls"] for r in results)
    print(
        f"{len(results)} debates, exit {done.returncode}, {wall:.1f} s: attempts {attempts}, "
        f"server received {server.requests}, answered calls {calls}"
    )


if __name__ == "__main__":
    main()
