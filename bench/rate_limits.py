"""Rate limits of every shape: ``moot bench`` at its defaults beside the plain openai SDK's retries.

Run: ``python bench/rate_limits.py [--n 500] [--concurrency 100] [--rate 50] [--latency 0.2]
[--shapes bucket1-ra,...] [--json FILE]``.

An OpenAI-compatible server on 127.0.0.1 (aiohttp, in a thread) answers after ``--latency``
seconds behind one of the rate limiters real deployments put in front of a model, each of
``--rate`` requests/s (so ``n / rate`` seconds is the floor of any client):

* ``bucket1-ra`` / ``bucket1``: a token bucket one second deep, 429 with ``Retry-After: 1`` / none;
* ``bucket0.2-ra`` / ``bucket0.2``: a token bucket 0.2 s deep;
* ``noburst-ra``: one request every ``1/rate`` s and no burst (a GCRA, as nginx's ``limit_req``
  without ``burst``), 429 with ``Retry-After: 1``;
* ``noburst-503``: the same answering 503 without ``Retry-After`` (nginx's default);
* ``announced``: the 0.2 s bucket announcing its limit in OpenAI's headers on every answer
  (``x-ratelimit-limit-requests`` per minute, ``-remaining-requests``, ``-reset-requests``);
* ``tokens``: a token-per-minute limit announced the same way (``x-ratelimit-*-tokens``), with
  ``--rate`` requests/s worth of tokens for this bench's requests (~200 tokens each).

For each shape, in the same run: ``moot bench --task arithmetic --methods single --n N
--concurrency C --model openai:...`` as a user types it (a subprocess, at its defaults), then the
peer: ``AsyncOpenAI(max_retries=20)``, C requests at a time, the SDK's own backoff honouring
``Retry-After``, as a user runs it: a script in a process of its own (``--peer``), so both walls
include a start-up (moot's 0.5-0.9 s, ``import openai``'s ~1 s). Each row gives the wall time, the
*active* time (the server's first request to its last answer: the pacing alone, no start-up),
and the requests served and refused (the server's counts).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from aiohttp import web

HERE = Path(__file__).resolve().parent
SHAPES = [
    "bucket1-ra",
    "bucket1",
    "bucket0.2-ra",
    "bucket0.2",
    "noburst-ra",
    "noburst-503",
    "announced",
    "tokens",
]


class Limiter:
    """One shape of rate limit (the module docstring); thread-safe enough for one event loop."""

    def __init__(self, shape: str, rate: float, tokens_per_request: float) -> None:
        self.shape = shape
        self.rate = rate
        self.depth = {"bucket1-ra": 1.0, "bucket1": 1.0, "announced": 0.2, "tokens": 0.2}.get(shape, 0.2)
        self.noburst = shape.startswith("noburst")
        self.per = tokens_per_request if shape == "tokens" else 1.0
        self.cap = max(self.per, rate * self.per * self.depth)
        self.level = self.cap
        self.stamp = time.monotonic()
        self.tat = self.stamp
        self.served = 0
        self.refused = 0
        self.charged = 0.0  # tokens of the requests served (the floor of the tokens shape)
        self.first: float | None = None  # when the first request reached the server
        self.last = 0.0  # when the last answer left it

    def take(self, cost: float) -> tuple[bool, dict[str, str]]:
        now = time.monotonic()
        if self.first is None:
            self.first = now
        if self.noburst:
            ok = now >= self.tat
            if ok:
                self.tat = max(self.tat, now) + 1.0 / self.rate
            left = 1.0 if ok else 0.0
        else:
            self.level = min(self.cap, self.level + (now - self.stamp) * self.rate * self.per)
            self.stamp = now
            ok = self.level >= cost
            if ok:
                self.level -= cost
            left = self.level
        headers: dict[str, str] = {}
        if self.shape == "announced":
            headers = {
                "x-ratelimit-limit-requests": str(int(self.rate * 60)),
                "x-ratelimit-remaining-requests": str(int(left)),
                "x-ratelimit-reset-requests": f"{(self.cap - left) / self.rate:.3f}s",
            }
        elif self.shape == "tokens":
            headers = {
                "x-ratelimit-limit-tokens": str(int(self.rate * self.per * 60)),
                "x-ratelimit-remaining-tokens": str(int(left)),
                "x-ratelimit-reset-tokens": f"{(self.cap - left) / (self.rate * self.per):.3f}s",
            }
        if ok:
            self.served += 1
            self.charged += cost
        else:
            self.refused += 1
            if self.shape.endswith("-ra") or self.shape in ("announced", "tokens"):
                headers["Retry-After"] = "1"
        return ok, headers


def _cost(body: dict[str, Any]) -> float:
    """What an OpenAI-style token limit counts for a request: the prompt (~4 chars a token) + max_tokens."""
    chars = sum(len(str(m.get("content", ""))) for m in body.get("messages", []))
    return chars / 4 + float(body.get("max_tokens") or 0)


class Server:
    """The model server behind a :class:`Limiter`, on 127.0.0.1, in a thread of its own."""

    def __init__(self, shape: str, rate: float, latency: float, tokens_per_request: float) -> None:
        self.limiter = Limiter(shape, rate, tokens_per_request)
        self.latency = latency
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        ok, headers = self.limiter.take(_cost(body) if self.limiter.shape == "tokens" else 1.0)
        if not ok:
            status = 503 if self.limiter.shape == "noburst-503" else 429
            return web.json_response({"error": {"message": "rate limited"}}, status=status, headers=headers)
        await asyncio.sleep(self.latency)
        self.limiter.last = time.monotonic()
        reply = {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "m"),
            "choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "42"}}
            ],
            "usage": {"prompt_tokens": 50, "completion_tokens": 1, "total_tokens": 51},
        }
        return web.json_response(reply, headers=headers)

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.handle)
        self.runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0, backlog=4096)
        await site.start()
        port = self.runner.addresses[0][1]
        return f"http://127.0.0.1:{port}/v1"

    def __enter__(self) -> Server:
        self.thread.start()
        self.url = asyncio.run_coroutine_threadsafe(self.start(), self.loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.runner is not None:
            asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def client_env() -> dict[str, str]:
    """The environment of a client process: untraced (no ``OTEL_*``), a placeholder API key if none."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.setdefault("OPENAI_API_KEY", "sk-bench")
    return env


def run_moot(url: str, n: int, concurrency: int, timeout_s: float) -> dict[str, Any]:
    moot = Path(sys.executable).with_name("moot")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            str(moot), "bench", "--task", "arithmetic", "--methods", "single", "--n", str(n),
            "--concurrency", str(concurrency), "--no-plots", "--model", f"openai:m?base_url={url}",
            "--out", tmp, "--store", f"{tmp}/runs.db",
        ]  # fmt: skip
        env = client_env()
        started = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
            code: int | str = proc.returncode
            tail = proc.stderr.strip().splitlines()[-1:] if proc.returncode else []
        except subprocess.TimeoutExpired:
            code, tail = "timeout", []
        wall = time.perf_counter() - started
        units = 0
        results = Path(tmp, "results.jsonl")
        if results.exists():
            units = sum(1 for line in results.read_text().splitlines() if line.strip())
    return {"wall_s": round(wall, 2), "exit": code, "units": units, "stderr": tail}


async def _sdk(url: str, n: int, concurrency: int) -> int:
    from openai import AsyncOpenAI, RateLimitError  # the peer: what a user writes without moot

    client = AsyncOpenAI(base_url=url, api_key="sk-bench", max_retries=20)
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(n):
        queue.put_nowait(i)
    done = 0

    async def worker() -> None:
        nonlocal done
        while not queue.empty():
            i = queue.get_nowait()
            # About moot's own request (src/moot/prompts/bench_arithmetic.md) and the same max_tokens
            # as moot bench's default: a token limit counts both.
            prompt = f"What is the result of {i} + {i}? Give the final answer as a number in parentheses."
            try:
                await client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": prompt}], max_tokens=256
                )
            except RateLimitError:
                continue  # still refused after its 20 retries: a unit lost, as the SDK leaves it
            done += 1

    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        await client.close()
    return done


def run_sdk(url: str, n: int, concurrency: int, timeout_s: float) -> dict[str, Any]:
    """The peer as a user runs it: ``python script.py`` in a process of its own, start-up included
    (``import openai`` takes about as long as moot's own start-up: both are counted)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--peer", url, str(n), str(concurrency)]
    env = client_env()  # the peer's own key is in the script; the variable is not read
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
        status: int | str = proc.returncode
        done = int(proc.stdout.strip() or -1) if proc.returncode == 0 else -1
    except subprocess.TimeoutExpired:
        done, status = -1, "timeout"
    return {"wall_s": round(time.perf_counter() - started, 2), "exit": status, "units": done}


def peer_main(url: str, n: int, concurrency: int) -> int:
    """``--peer URL N C``: the openai SDK's client alone in this process; prints the units done."""
    print(asyncio.run(_sdk(url, n, concurrency)))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--rate", type=float, default=50.0, help="requests/s the limiter allows")
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--tokens-per-request", type=float, default=200.0)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--clients", default="moot,sdk")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per client and shape")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--peer", nargs=3, metavar=("URL", "N", "C"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.peer:
        return peer_main(args.peer[0], int(args.peer[1]), int(args.peer[2]))
    # moot byte-compiled, as pip installs it (and as the openai package the peer imports is): a
    # source tree run with PYTHONDONTWRITEBYTECODE=1 would compile moot's modules at each start.
    import compileall

    import moot

    compileall.compile_dir(str(Path(moot.__file__).parent), quiet=1)
    floor = args.n / args.rate
    rows = []
    print(f"{args.n} units, {args.concurrency} at a time, {args.latency * 1000:.0f} ms server, "
          f"{args.rate:g} requests/s: floor {floor:.1f} s; load {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(f"{'shape':14s} {'client':5s} {'wall s':>7s} {'x floor':>7s} {'active s':>8s} "
          f"{'served':>6s} {'refused':>7s} exit")  # fmt: skip
    for shape in args.shapes.split(","):
        for client in args.clients.split(","):
            with Server(shape, args.rate, args.latency, args.tokens_per_request) as server:
                if client == "moot":
                    row = run_moot(server.url, args.n, args.concurrency, args.timeout)
                else:
                    row = run_sdk(server.url, args.n, args.concurrency, args.timeout)
                lim = server.limiter
                # The tokens shape's floor: the tokens this client's requests cost over the token rate.
                own = lim.charged / (args.rate * lim.per) if shape == "tokens" else floor
                # Active: the first request's arrival to the last answer, as the server saw them.
                active = lim.last - lim.first if lim.first is not None else 0.0
                row |= {"shape": shape, "client": client, "served": lim.served, "refused": lim.refused,
                        "floor_s": round(own, 2), "active_s": round(active, 2)}  # fmt: skip
            rows.append(row)
            tail = " ".join(row.get("stderr", []))[:80]
            print(f"{shape:14s} {client:5s} {row['wall_s']:7.1f} {row['wall_s'] / row['floor_s']:7.2f} "
                  f"{row['active_s']:8.1f} {row['served']:6d} {row['refused']:7d} {row['exit']} {tail}",
                  flush=True)  # fmt: skip
    if args.json:
        args.json.write_text(
            json.dumps({"args": vars(args) | {"json": str(args.json)}, "rows": rows}, indent=1)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
