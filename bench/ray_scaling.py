"""Ray scale-out on one machine: the embedded model's arithmetic bench without Ray and on 1 and 2 workers.

The embedded model (SmolLM2-135M through llama.cpp) decodes with one thread per process on a
2-core machine but reads prompts with every CPU (llama-cpp-python's default), so one plain
process keeps about 1.25 of the 2 cores busy; each Ray worker is a process with its own copy of
the model, given its share of the CPUs (1 worker: 2, the plain process's threads; 2 workers: 1
each, one thread each). The plain process's CPU time is
measured, and the speed-up it leaves room for on this machine (cores / cores it keeps busy) is
printed beside the measured one. The same units (``--n`` items x ``single``, same seed and token cap)
run each way; items/s counts only the units' time (``BenchRun.wall_s``: the workers are
started and their models loaded before it starts), and the total wall time with the
cluster start and model loads is printed beside it. The target is >= 1.7x with 2 workers.

The setups run in ``--rounds`` rounds, in a rotated order, and each setup's rounds are added
up: on a shared machine the load drifts, and a setup measured only while it is high would look
slower than it is.

Run: ``python bench/ray_scaling.py [--n 8] [--rounds 3] [--workers 1,2] [--max-tokens 48] [--json FILE]``.
The machine's load average is printed before and after: a busy machine shrinks the speed-up.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from moot.bench.runner import BenchConfig, BenchRun, run_bench
from moot.models import resolve_model
from moot.scale import RayOptions, run_bench_ray


def _row(label: str, run: BenchRun, total_s: float, cpu_s: float | None = None) -> dict[str, Any]:
    units = len(run.records) - run.resumed
    return {
        "cpu_s": None if cpu_s is None else round(cpu_s, 2),
        "setup": label,
        "units": units,
        "units_wall_s": round(run.wall_s, 2),
        "items_per_s": round(units / run.wall_s, 3),
        "total_wall_s": round(total_s, 2),
        "accuracy": round(sum(r.correct for r in run.records) / max(1, len(run.records)), 3),
        "workers": [{k: w[k] for k in ("worker", "units", "died")} for w in run.workers],
    }


def _local(config: BenchConfig, out: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    model = resolve_model(config.model)

    async def go() -> tuple[BenchRun, float]:
        await model.expected_speed()  # loaded and warmed before the units' clock starts, as on a worker
        cpu = time.process_time()
        run = await run_bench(config, model=model, out=out)
        return run, time.process_time() - cpu

    run, cpu_s = asyncio.run(go())
    return _row("no Ray (1 process)", run, time.perf_counter() - t0, cpu_s)


def _ray(config: BenchConfig, out: Path, workers: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    options = RayOptions(address="local", workers=workers, concurrency=config.concurrency)
    run = asyncio.run(run_bench_ray(config, out=out, ray=options))
    return _row(f"Ray, {workers} worker{'s' if workers > 1 else ''}", run, time.perf_counter() - t0)


def _merge(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One setup's rounds added up: units over the summed units' time."""
    units, wall = sum(r["units"] for r in rows), sum(r["units_wall_s"] for r in rows)
    cpu = [r["cpu_s"] for r in rows if r["cpu_s"] is not None]
    return {
        "cores_busy": round(sum(cpu) / wall, 2) if cpu else None,
        "setup": rows[0]["setup"],
        "units": units,
        "units_wall_s": round(wall, 2),
        "items_per_s": round(units / wall, 3),
        "total_wall_s": round(sum(r["total_wall_s"] for r in rows), 2),
        "accuracy": round(sum(r["accuracy"] * r["units"] for r in rows) / units, 3),
        "per_round_items_per_s": [r["items_per_s"] for r in rows],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=8, help="arithmetic items per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; each runs every setup, order rotated")
    parser.add_argument("--workers", default="1,2", help="Ray worker counts to run")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args()
    config = BenchConfig(
        task="arithmetic",
        methods=["single"],
        model="local",
        n=args.n,
        seed=args.seed,
        max_tokens=args.max_tokens,
        concurrency=1,  # the embedded model decodes one sequence at a time per process
    )
    before = os.getloadavg()
    print(f"load average before: {before}, cores: {os.cpu_count()}", flush=True)
    print(
        f"embedded model, arithmetic, {args.n} items x single x {args.rounds} rounds, "
        f"max_tokens {args.max_tokens}",
        flush=True,
    )
    setups = [0] + [int(w) for w in args.workers.split(",")]  # 0: no Ray
    runs: dict[int, list[dict[str, Any]]] = {w: [] for w in setups}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            # Rotate the order: the load of a shared machine drifts, and no setup should always go first.
            order = setups[round_ % len(setups) :] + setups[: round_ % len(setups)]
            for workers in order:
                out = Path(tmp) / f"r{round_}-w{workers}"
                row = _local(config, out) if workers == 0 else _ray(config, out, workers)
                runs[workers].append(row)
                print(f"  round {round_}: {row['setup']:<20} {row['items_per_s']:6.3f} items/s", flush=True)
    rows = [_merge(runs[w]) for w in setups]
    cores = os.cpu_count() or 1
    busy = rows[0]["cores_busy"]
    print(
        f"no Ray keeps {busy:.2f} of {cores} cores busy: a speed-up ceiling of {cores / busy:.2f}x here",
        flush=True,
    )
    for row in rows:
        row["speedup"] = round(row["items_per_s"] / rows[0]["items_per_s"], 2)
        print(
            f"{row['setup']:<20} {row['items_per_s']:6.3f} items/s  speed-up {row['speedup']:.2f}x  "
            f"units {row['units_wall_s']:.1f} s, total {row['total_wall_s']:.1f} s  "
            f"accuracy {row['accuracy']:.3f}",
            flush=True,
        )
    after = os.getloadavg()
    print(f"load average after: {after}", flush=True)
    if args.json is not None:
        data = {
            "load_before": before,
            "load_after": after,
            "cores": cores,
            "ceiling": round(cores / busy, 2),
            "rows": rows,
        }
        args.json.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
