"""Engine overhead: a benchmark, not a test.

1. Engine time per turn: debates against a zero-latency in-process model
   (SchemaModel answers every request instantly with a valid instance of its
   schema), so all measured time is moot's own: prompt building, validation,
   events, bookkeeping.
2. Wall time against an OpenAI-compatible server with a fixed artificial
   latency (bench/fake_openai.py, in a separate process), through the real
   ``openai:`` backend, compared with the debate's critical path: the number
   of sequential stages times one call's latency. Once for a single debate,
   then with many debates running concurrently (after one warm-up debate each).

   ``--http inproc`` is the floor beside them: the same debates against an in-process model
   that sleeps the latency (no HTTP at all), what is left is the engine's own time.

Every stack runs under :func:`moot.tuned_gc` (the collector settings the ``moot`` command
uses) unless ``--gc default``.

Run: ``.venv/bin/python bench/overhead.py [--latency 0.2] [--concurrent 200] [--http aiohttp,sdk,inproc]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time

from fake_openai import running

from moot import Debate, load_protocol, tuned_gc
from moot.models import Model
from moot.models.testing import SchemaModel


def critical_stages(name: str) -> int:
    """Sequential model-call stages of one debate with SchemaModel-shaped replies."""
    p = load_protocol(name)
    per_round = len(p.stages()) + (1 if p.moderator else 0)
    return per_round * p.rounds + (1 if p.judge else 0)


def engine_time(name: str, debates: int) -> tuple[float, int]:
    model = SchemaModel()
    debate = Debate(name, model=model)

    async def go() -> None:
        for i in range(debates):
            await debate.run(f"topic {i}", context={"docs": ["a", "b"]})

    t0 = time.perf_counter()
    asyncio.run(go())
    elapsed = time.perf_counter() - t0
    return elapsed, len(model.requests)


def wall_vs_critical(name: str, latency: float, concurrent: int, port: int, http: str) -> dict[str, float]:
    from moot.models.openai import OpenAIModel

    model: Model
    if http == "inproc":
        model = SchemaModel(delay=latency)  # the server's wait without HTTP
        model.max_concurrency = 10_000
    else:
        model = OpenAIModel(
            "fake",
            base_url=f"http://127.0.0.1:{port}/v1",
            api_key="x",
            structured_mode="json_schema",
            max_concurrency=10_000,
            http=http,  # type: ignore[arg-type]
        )
    debate = Debate(name, model=model, overrides={"timeout": None})

    async def go() -> float:
        await debate.run("warm-up")  # import, client and first connection are not the engine's cost
        t0 = time.perf_counter()
        results = await asyncio.gather(*(debate.run(f"topic {i}") for i in range(concurrent)))
        wall = time.perf_counter() - t0
        await model.aclose()
        bad = [r for r in results if r.failed_turns or r.fallback]
        if bad:
            raise SystemExit(f"{len(bad)} debates failed: {bad[0].fallback}")
        return wall

    wall = asyncio.run(go())
    critical = critical_stages(name) * latency
    return {"wall_s": wall, "critical_s": critical, "ratio": wall / critical}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--latency", type=float, default=0.2)
    ap.add_argument("--concurrent", type=int, default=200)
    ap.add_argument("--debates", type=int, default=200)
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--http",
        default="aiohttp",
        help="the openai: backend's HTTP stack(s), comma-separated; inproc: no HTTP (the floor)",
    )
    ap.add_argument("--gc", choices=("tuned", "default"), default="tuned", help="see the docstring")
    args = ap.parse_args()
    out: dict[str, object] = {
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "load": os.getloadavg(),
        "gc": args.gc,
    }

    rows = []
    for name in ("answer", "panel", "adversarial", "patch"):
        elapsed, calls = engine_time(name, args.debates)
        rows.append({"protocol": name, "calls": calls, "ms_per_turn": 1000 * elapsed / calls})
    out["engine_time"] = rows

    gc_scope = tuned_gc() if args.gc == "tuned" else contextlib.nullcontext()
    with running(args.latency) as port, gc_scope:
        walls = []
        for http in args.http.split(","):
            for name in ("answer", "panel", "adversarial"):
                for n in (1, args.concurrent):
                    row = wall_vs_critical(name, args.latency, n, port, http)
                    walls.append({"http": http, "protocol": name, "debates": n, **row})
        out["wall_vs_critical_path"] = walls

    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"engine time per turn (zero-latency model, {args.debates} debates each):")
    for r in rows:
        print(f"  {r['protocol']:12} {r['calls']:6d} calls  {r['ms_per_turn']:.3f} ms/turn")
    print(f"load average before: {out['load']}, after: {os.getloadavg()}, cores: {os.cpu_count()}")
    print(f"collector: {args.gc}")
    print(f"wall time vs critical path (openai backend, fake server, latency {args.latency}s):")
    for w in walls:
        print(
            f"  {w['http']:12} {w['protocol']:12} x{w['debates']:<4d} wall {w['wall_s']:.2f}s  "
            f"critical {w['critical_s']:.2f}s  ratio {w['ratio']:.3f}"
        )


if __name__ == "__main__":
    main()
