"""Ray scale-out on one machine: the embedded model's arithmetic bench without Ray and on 1 and 2 workers.

The embedded model (SmolLM2-135M through llama.cpp) runs one thread per process on a
2-core machine, so one process is the limit; each Ray worker is a process with its own
copy of the model. The same units (``--n`` items x ``single``, same seed and token cap)
run each way; items/s counts only the units' time (``BenchRun.wall_s``: the workers are
started and their models loaded before it starts), and the total wall time with the
cluster start and model loads is printed beside it. The target is >= 1.7x with 2 workers.

Run: ``python bench/ray_scaling.py [--n 24] [--workers 1,2] [--max-tokens 48] [--json FILE]``.
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


def _row(label: str, run: BenchRun, total_s: float) -> dict[str, Any]:
    units = len(run.records) - run.resumed
    return {
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
    model.count_tokens("warm-up")  # weights loaded before the units' clock starts, as on a Ray worker
    run = asyncio.run(run_bench(config, model=model, out=out))
    return _row("no Ray (1 process)", run, time.perf_counter() - t0)


def _ray(config: BenchConfig, out: Path, workers: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    options = RayOptions(address="local", workers=workers, concurrency=config.concurrency)
    run = asyncio.run(run_bench_ray(config, out=out, ray=options))
    return _row(f"Ray, {workers} worker{'s' if workers > 1 else ''}", run, time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=24, help="arithmetic items")
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
    print(f"embedded model, arithmetic, {args.n} items x single, max_tokens {args.max_tokens}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        setups = [("local", 0)] + [("ray", int(w)) for w in args.workers.split(",")]
        for kind, workers in setups:
            out = Path(tmp) / f"{kind}{workers}"
            row = _local(config, out) if kind == "local" else _ray(config, out, workers)
            row["speedup"] = round(row["items_per_s"] / rows[0]["items_per_s"], 2) if rows else 1.0
            rows.append(row)
            print(
                f"{row['setup']:<20} {row['items_per_s']:6.3f} items/s  speed-up {row['speedup']:.2f}x  "
                f"units {row['units_wall_s']:.1f} s, total {row['total_wall_s']:.1f} s  "
                f"accuracy {row['accuracy']:.3f}  per worker {[w['units'] for w in row['workers']]}",
                flush=True,
            )
    after = os.getloadavg()
    print(f"load average after: {after}", flush=True)
    if args.json is not None:
        data = {"load_before": before, "load_after": after, "cores": os.cpu_count(), "rows": rows}
        args.json.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
