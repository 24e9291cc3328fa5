"""``moot serve`` figures (issue 36): the streaming path's added latency, the non-streaming throughput.

Run: ``python bench/serve_load.py [--latency-runs 20] [--requests 500] [--max-debates 100]``.

1. **Added latency to the first reasoning chunk.** An upstream in this process (aiohttp, a fixed
   0.2 s per call) notes when it finishes writing each reply; ``moot serve`` (a subprocess, as a
   user starts it) runs ``moot:answer`` on it; the official ``openai`` client streams the answer and
   notes when the first ``reasoning_content`` chunk arrives. Added latency = that arrival minus the
   end of the upstream's first reply of the debate (the first turn to finish). Sequential requests.
2. **Requests per second, non-streaming.** ``bench/fake_openai.py`` (no latency: a fast server) as
   the upstream, ``moot serve --max-debates 100 --queue N``, N requests of ``moot:answer`` (5 model
   calls each) 100 at a time from an aiohttp client: N / wall seconds, and every answer checked.

Both use the defaults a user gets (``moot serve`` with ``--model openai:fake`` and
``OPENAI_BASE_URL``), the store on a temporary folder. Prints one Markdown block.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import select
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_openai import running  # noqa: E402

from moot.models.testing import schema_instance  # noqa: E402

TOKEN = "bench-token-0123456789abcdef"


def start_serve(base_url: str, store: Path, *args: str) -> tuple[subprocess.Popen[str], str]:
    env = dict(os.environ, OPENAI_API_KEY="sk-bench", OPENAI_BASE_URL=base_url, NO_PROXY="127.0.0.1")
    cmd = [sys.executable, "-m", "moot", "serve", "--port", "0", "--store", str(store), "--token", TOKEN]
    proc = subprocess.Popen(
        [*cmd, "--model", "openai:fake", *args], env=env, stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if select.select([proc.stderr], [], [], 0.2)[0]:
            line = proc.stderr.readline()
            if line.startswith("moot serve: http"):
                threading.Thread(target=proc.stderr.read, daemon=True).start()
                return proc, line.split()[2]
        if proc.poll() is not None:
            break
    proc.kill()
    raise SystemExit("moot serve did not start")


def stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()


# -- 1. added latency ----------------------------------------------------------------------------
class TimedUpstream:
    """An OpenAI-compatible upstream that notes when it finished writing each reply."""

    def __init__(self, latency_s: float) -> None:
        self.latency_s = latency_s
        self.done: list[tuple[float, str]] = []  # (time.time() after the write, topic marker)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        await asyncio.sleep(self.latency_s)
        fmt = body.get("response_format") or {}
        schema = (fmt.get("json_schema") or {}).get("schema") or fmt.get("schema")
        content = json.dumps(schema_instance(schema)) if schema else "The answer."
        reply = {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": "fake",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }
        response = web.Response(body=json.dumps(reply).encode(), content_type="application/json")
        await response.prepare(request)
        await response.write_eof()
        text = json.dumps(body)
        found = re.search(r"RUN-\d+", text)
        marker = found.group(0) if found else ""
        self.done.append((time.time(), marker))
        return response


async def added_latency(runs: int, upstream_latency_s: float) -> list[float]:
    import openai

    up = TimedUpstream(upstream_latency_s)
    app = web.Application()
    app.router.add_post("/v1/chat/completions", up.chat)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]  # noqa: SLF001
    out: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = await asyncio.to_thread(start_serve, f"http://127.0.0.1:{port}/v1", Path(tmp) / "runs.db")
        try:
            client = openai.AsyncOpenAI(base_url=url, api_key=TOKEN, max_retries=0)
            for i in range(runs + 1):  # the first warms the connections up: not counted
                marker = f"RUN-{i}"
                stream = await client.chat.completions.create(
                    model="moot:answer",
                    messages=[{"role": "user", "content": f"Is tea healthy? {marker}"}],
                    stream=True,
                )
                first: float | None = None
                async for chunk in stream:
                    if (
                        first is None
                        and chunk.choices
                        and (chunk.choices[0].delta.model_extra or {}).get("reasoning_content")
                    ):
                        first = time.time()
                ends = [t for t, m in up.done if m == marker]
                if i > 0 and first is not None and ends:
                    out.append(first - min(ends))
            await client.close()
        finally:
            await asyncio.to_thread(stop, proc)
            await runner.cleanup()
    return out


# -- 2. requests per second ----------------------------------------------------------------------
async def throughput(requests: int, max_debates: int) -> tuple[float, int, dict[int, int]]:
    with running(0.0) as port, tempfile.TemporaryDirectory() as tmp:
        proc, url = await asyncio.to_thread(
            start_serve,
            f"http://127.0.0.1:{port}/v1",
            Path(tmp) / "runs.db",
            "--max-debates",
            str(max_debates),
            "--queue",
            str(requests),
        )
        try:
            codes: dict[int, int] = {}
            conn = aiohttp.TCPConnector(limit=max_debates)
            headers = {"Authorization": f"Bearer {TOKEN}"}
            async with aiohttp.ClientSession(connector=conn, headers=headers) as http:

                async def one(i: int) -> None:
                    body = {
                        "model": "moot:answer",
                        "messages": [{"role": "user", "content": f"Question {i}?"}],
                    }
                    async with http.post(f"{url}/chat/completions", json=body) as r:
                        data: Any = await r.json()
                        codes[r.status] = codes.get(r.status, 0) + 1
                        if r.status == 200:
                            assert data["choices"][0]["message"]["content"], data

                await asyncio.gather(*(one(-i) for i in range(1, 11)))  # warm-up, not counted
                codes.clear()
                t0 = time.perf_counter()
                await asyncio.gather(*(one(i) for i in range(requests)))
                wall = time.perf_counter() - t0
        finally:
            await asyncio.to_thread(stop, proc)
    return requests / wall, requests, codes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-runs", type=int, default=20)
    parser.add_argument("--upstream-latency", type=float, default=0.2)
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--max-debates", type=int, default=100)
    parser.add_argument("--only", choices=["latency", "throughput"], help="measure one figure only")
    args = parser.parse_args()
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    lat = (
        []
        if args.only == "throughput"
        else asyncio.run(added_latency(args.latency_runs, args.upstream_latency))
    )
    rps, n, codes = (
        (0.0, 0, {}) if args.only == "latency" else asyncio.run(throughput(args.requests, args.max_debates))
    )
    load_after = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    ms = sorted(x * 1000 for x in lat)
    p90 = ms[min(len(ms) - 1, int(0.9 * len(ms)))] if ms else float("nan")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
    print(f"uptime before: {load}")
    print(f"uptime after:  {load_after}")
    print()
    print("| figure | value |")
    print("|---|---|")
    if ms:
        print(
            f"| added latency, upstream's first reply -> first reasoning_content chunk "
            f"({len(ms)} streamed debates, {args.upstream_latency:g} s upstream) | "
            f"median {statistics.median(ms):.1f} ms, "
            f"p90 {p90:.1f} ms, max {max(ms):.1f} ms |"
        )
    if n:
        print(
            f"| non-streaming moot:answer (5 calls each), {n} requests, --max-debates {args.max_debates}, "
            f"upstream without latency | {rps:.1f} requests/s ({5 * rps:.0f} model calls/s); "
            f"statuses {codes} |"
        )


if __name__ == "__main__":
    main()
