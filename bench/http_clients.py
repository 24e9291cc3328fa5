"""Client CPU per call of HTTP clients for the ``openai:`` backend (a benchmark, not a test).

Each client (moot's transport: aiohttp with trust_env, redirects and a body bound; a bare
aiohttp session; httpx) POSTs the same orjson-encoded chat
request to ``bench/fake_openai.py`` (its own process, fixed latency) and decodes the reply
with orjson; no SDK, nothing else of moot.
For each library and each number of calls in flight it reports calls/s and the
client process's CPU time per call (``time.process_time``). The results chose
aiohttp over httpx; ``moot`` minus ``aiohttp`` is what moot's transport adds to a bare session.

Run: ``python bench/http_clients.py [--latency 0.2] [--in-flight 30,100,300] [--calls 1500]
[--libs moot,aiohttp,httpx]``.
Every run is bounded: the server exits by itself after ``--server-timeout`` seconds and
each client run has a time limit.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from typing import Any

import orjson
from fake_openai import running

BODY = {
    "model": "fake",
    "messages": [{"role": "user", "content": "What is the result of 3+4*5? Think step by step."}],
    "max_tokens": 64,
    "seed": 3,
}
HEADERS = {"Authorization": "Bearer x", "Content-Type": "application/json"}


async def _measure(lib: str, url: str, in_flight: int, calls: int) -> dict[str, Any]:
    if lib == "aiohttp":
        import aiohttp

        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            cookie_jar=aiohttp.DummyCookieJar(),
            timeout=aiohttp.ClientTimeout(total=60),
        )

        async def one() -> int:
            async with session.post(url, data=orjson.dumps(BODY), headers=HEADERS) as response:
                orjson.loads(await response.read())
                return response.status

        close = session.close
    elif lib == "moot":
        from moot.models.transport import Transport

        transport = Transport(HEADERS, timeout=60)

        async def one() -> int:
            raw = await transport.post(url, orjson.dumps(BODY))
            orjson.loads(raw.body)
            return raw.status

        close = transport.aclose
    else:
        import httpx

        client = httpx.AsyncClient(
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=None), timeout=60
        )

        async def one() -> int:
            response = await client.post(url, content=orjson.dumps(BODY), headers=HEADERS)
            orjson.loads(response.content)
            return response.status_code

        close = client.aclose
    gate = asyncio.Semaphore(in_flight)

    async def gated() -> int:
        async with gate:
            return await one()

    try:
        await asyncio.gather(*(gated() for _ in range(in_flight)))  # open the connections first
        cpu0, t0 = time.process_time(), time.perf_counter()
        statuses = await asyncio.gather(*(gated() for _ in range(calls)))
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    finally:
        await close()
    if any(s != 200 for s in statuses):
        raise SystemExit(f"{lib}: non-200 answers")
    return {
        "lib": lib,
        "in_flight": in_flight,
        "calls": calls,
        "calls_per_s": calls / wall,
        "cpu_ms_per_call": 1000 * cpu / calls,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--in-flight", default="30,100,300")
    parser.add_argument("--calls", type=int, default=1500)
    parser.add_argument("--libs", default="moot,aiohttp,httpx")
    parser.add_argument("--run-timeout", type=float, default=120, help="seconds per client run")
    parser.add_argument("--server-timeout", type=float, default=900)
    args = parser.parse_args()
    print(
        f"load average before: {os.getloadavg()}, cores: {os.cpu_count()}, latency {args.latency}s",
        flush=True,
    )
    with running(args.latency, args.server_timeout) as port:
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        for in_flight in (int(x) for x in args.in_flight.split(",")):
            for lib in args.libs.split(","):
                try:
                    row = asyncio.run(
                        asyncio.wait_for(_measure(lib, url, in_flight, args.calls), args.run_timeout)
                    )
                except TimeoutError:
                    print(
                        f"{lib:8s} in flight {in_flight:4d}: over {args.run_timeout:g} s, stopped", flush=True
                    )
                    continue
                print(
                    f"{lib:8s} in flight {in_flight:4d}: {row['calls_per_s']:7.0f} calls/s  "
                    f"client CPU/call {row['cpu_ms_per_call']:.3f} ms",
                    flush=True,
                )
    print(f"load average after: {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
