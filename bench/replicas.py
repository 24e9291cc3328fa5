"""Replica scaling: one model served by 1 and by 4 copies of a capacity-limited server (a benchmark).

Each replica is ``bench/fake_openai.py --max-concurrent CAP`` (its own process): at
most CAP requests are in their latency at once, like a GPU decoding a batch of CAP
sequences, so one replica's throughput is bounded by ``CAP / latency`` requests/s
and the *server*, not the client, is the limit. moot's ``openai:`` backend gets
every replica's URL (comma-separated) and a per-replica cap equal to the server's
(``max_per_endpoint``), and sends ``--requests`` plain requests with ``--in-flight``
at once. Ideal scaling is the number of replicas.

Run: ``python bench/replicas.py [--replicas 1,4] [--cap 8] [--latency 0.2] [--requests 2000]``.
Bounded: every server exits by itself after ``--server-timeout`` seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import time
from typing import Any

from fake_openai import running

from moot.models import Message, ModelRequest, RetryPolicy, call_model
from moot.models.openai import OpenAIModel


async def _drive(urls: list[str], cap: int, requests: int, in_flight: int) -> dict[str, Any]:
    model = OpenAIModel(
        "fake", base_url=",".join(urls), api_key="x", max_concurrency=in_flight, max_per_endpoint=cap
    )
    request = ModelRequest(messages=[Message(role="user", content="What is 2+2?")], max_tokens=16)
    policy = RetryPolicy(max_retries=0)
    try:
        await asyncio.gather(*(call_model(model, request, policy) for _ in range(in_flight)))  # warm-up
        cpu0, t0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(call_model(model, request, policy) for _ in range(requests)))
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        sent = [r["sent"] for r in model.pool.stats()]
    finally:
        await model.aclose()
    return {"requests_per_s": requests / wall, "wall_s": wall, "cpu_ms_per_call": 1000 * cpu / requests,
            "sent_per_replica": sent}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", default="1,4")
    parser.add_argument("--cap", type=int, default=8, help="concurrent requests each replica serves")
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--server-timeout", type=float, default=600)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}, cores: {os.cpu_count()}", flush=True)
    print(f"latency {args.latency}s, server capacity {args.cap}, {args.requests} requests, "
          f"{args.in_flight} in flight", flush=True)  # fmt: skip
    base = None
    for count in (int(x) for x in args.replicas.split(",")):
        with contextlib.ExitStack() as stack:
            ports = [
                stack.enter_context(running(args.latency, args.server_timeout, max_concurrent=args.cap))
                for _ in range(count)
            ]
            urls = [f"http://127.0.0.1:{p}/v1" for p in ports]
            row = asyncio.run(_drive(urls, args.cap, args.requests, args.in_flight))
        base = base or row["requests_per_s"]
        ideal = count * args.cap / args.latency
        print(
            f"replicas={count}  {row['requests_per_s']:7.1f} requests/s (server ideal {ideal:.0f})  "
            f"scaling {row['requests_per_s'] / base:.2f}x  client CPU/call {row['cpu_ms_per_call']:.2f} ms  "
            f"sent per replica {row['sent_per_replica']}",
            flush=True,
        )
    print(f"load average after: {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
