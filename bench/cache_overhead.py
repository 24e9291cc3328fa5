"""What the response cache adds to a model call, hit and miss (a benchmark script, not a test).

N distinct requests go through ``CachedModel(FunctionModel)`` backed by a new cache file (every
call a miss: a lookup, the model, a stored reply), then the same N requests through a second
``ResponseCache`` object on the same file (every call a hit: a lookup, no model). The same N
requests straight to the ``FunctionModel`` are the baseline: the overhead of a miss or a hit is
its time per call minus the baseline's. Each pass runs the calls one after another (the latency a
caller sees) and ``--concurrency`` at a time (what a loop serving many debates pays), and reports
wall and CPU time per call.

``--lock-ms`` adds the loop-lag probe: another process holds the cache file's write lock for that
long while the misses are stored, and a task on the event loop ticks every millisecond; the
largest gap between ticks is how long the loop was blocked (with the cache's I/O on the loop, the
whole lock; off the loop, ~0).

Run from the repository root, e.g. (``PYTHONPATH=src`` measures this checkout)::

    PYTHONPATH=src .venv/bin/python bench/cache_overhead.py --calls 2000 --concurrency 100
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from moot.models import Message, ModelRequest, call_model
from moot.models.cache import CachedModel, ResponseCache
from moot.models.testing import FunctionModel


def _requests(n: int) -> list[ModelRequest]:
    return [
        ModelRequest(
            messages=[Message(role="user", content=f"question {i}: " + "context " * 50)],
            metadata={"speaker": "a", "round": 1, "phase": "turn"},
        )
        for i in range(n)
    ]


def _model() -> FunctionModel:
    return FunctionModel(lambda req: "an answer of a few words " * 8)


async def _timed(calls: list[Callable[[], Awaitable[Any]]], concurrency: int) -> tuple[float, float]:
    """(wall s, CPU s) for running ``calls``, ``concurrency`` at a time."""
    gate = asyncio.Semaphore(concurrency)

    async def one(call: Callable[[], Awaitable[Any]]) -> None:
        async with gate:
            await call()

    wall, cpu = time.perf_counter(), time.process_time()
    if concurrency == 1:
        for call in calls:
            await call()
    else:
        await asyncio.gather(*(one(c) for c in calls))
    return time.perf_counter() - wall, time.process_time() - cpu


async def _pass(n: int, concurrency: int, folder: Path, tag: str) -> dict[str, float]:
    reqs = _requests(n)
    base = _model()
    baseline = await _timed([lambda r=r: call_model(base, r) for r in reqs], concurrency)
    path = folder / f"cache-{tag}.db"
    cache = ResponseCache(path)
    miss_model = CachedModel(_model(), cache)
    miss = await _timed([lambda r=r: call_model(miss_model, r) for r in reqs], concurrency)
    assert cache.misses == n, cache.misses
    cache.close()
    again = ResponseCache(path)
    hit_model = CachedModel(_model(), again)
    hit = await _timed([lambda r=r: call_model(hit_model, r) for r in reqs], concurrency)
    assert again.hits == n, again.hits
    again.close()
    us = 1e6 / n
    return {
        "baseline_wall_us": baseline[0] * us,
        "baseline_cpu_us": baseline[1] * us,
        "miss_wall_us": miss[0] * us,
        "miss_cpu_us": miss[1] * us,
        "hit_wall_us": hit[0] * us,
        "hit_cpu_us": hit[1] * us,
        "miss_overhead_wall_us": (miss[0] - baseline[0]) * us,
        "hit_overhead_wall_us": (hit[0] - baseline[0]) * us,
        "miss_overhead_cpu_us": (miss[1] - baseline[1]) * us,
        "hit_overhead_cpu_us": (hit[1] - baseline[1]) * us,
    }


_HOLDER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("COMMIT")
"""


async def _lag(folder: Path, lock_ms: float, n: int) -> dict[str, float]:
    """The largest gap between 1 ms ticks on the loop while misses wait for another process's lock."""
    path = folder / "cache-lag.db"
    cache = ResponseCache(path)
    model = CachedModel(_model(), cache)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path), str(lock_ms / 1000)], stdout=subprocess.PIPE
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == b"locked"
    gaps: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    tick = asyncio.create_task(ticker())
    start = time.perf_counter()
    await asyncio.gather(*(call_model(model, r) for r in _requests(n)))
    wall = time.perf_counter() - start
    done.set()
    await tick
    holder.wait()
    cache.close()
    return {"lock_ms": lock_ms, "calls": n, "wall_ms": wall * 1000, "max_loop_gap_ms": max(gaps) * 1000}


def main() -> None:
    """Run the passes and print one JSON object (and a short table on stderr)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3, help="Passes of each kind; the median is kept.")
    parser.add_argument("--lock-ms", type=float, default=300.0, help="0: no loop-lag probe.")
    args = parser.parse_args()
    import moot

    out: dict[str, Any] = {
        "moot": str(Path(moot.__file__).parent),
        "calls": args.calls,
        "sqlite": sqlite3.sqlite_version,
    }
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for label, conc in (("sequential", 1), (f"concurrent_{args.concurrency}", args.concurrency)):
            runs = [asyncio.run(_pass(args.calls, conc, folder, f"{label}-{i}")) for i in range(args.repeat)]
            out[label] = {k: sorted(r[k] for r in runs)[len(runs) // 2] for k in runs[0]}
        if args.lock_ms > 0:
            out["loop_lag"] = asyncio.run(_lag(folder, args.lock_ms, 20))
    out["load"] = os.getloadavg()
    print(json.dumps(out, indent=2))
    for label in ("sequential", f"concurrent_{args.concurrency}"):
        r = out[label]
        print(
            f"{label:>16}: per call, wall/CPU us: "
            f"baseline {r['baseline_wall_us']:.0f}/{r['baseline_cpu_us']:.0f}"
            f" · miss +{r['miss_overhead_wall_us']:.0f}/+{r['miss_overhead_cpu_us']:.0f}"
            f" · hit +{r['hit_overhead_wall_us']:.0f}/+{r['hit_overhead_cpu_us']:.0f}",
            file=sys.stderr,
        )
    if "loop_lag" in out:
        lag = out["loop_lag"]
        print(
            f"loop lag while another process holds the write lock {lag['lock_ms']:.0f} ms: "
            f"largest gap between 1 ms ticks {lag['max_loop_gap_ms']:.1f} ms",
            file=sys.stderr,
        )


if __name__ == "__main__":
    main()
