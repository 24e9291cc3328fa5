"""Run-store overhead: a benchmark, not a test.

N debates run concurrently in one process against an in-process model with a
fixed latency per call (``FunctionModel(delay=...)``: no network, so the only
costs are moot's own). Each debate is recorded through the door a user types,
``Debate(..., store=store)``: the run store's recorder is attached as an observer
of the run's events (moot.observe), so each debate gets its own run row, every
event committed to the SQLite store as it arrives (WAL mode), the result at the
end. The same batch runs without a store. Reported:

* added wall time of the batch, in percent (goal: under 5%);
* added CPU time per stored event (goal: under 0.2 ms), from ``time.process_time``.

Repetitions alternate the two modes and the medians are kept (the machine is
shared). Run: ``.venv/bin/python bench/store_overhead.py [--debates 200] [--latency 0.5] [--reps 9]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from moot import Debate, __version__
from moot.models import ModelRequest
from moot.models.testing import FunctionModel
from moot.runs import RunStore


def reply(req: ModelRequest) -> dict[str, Any]:
    meta = req.metadata
    if meta["phase"] == "judge":
        return {"final_answer": "A merged answer of a realistic length " * 4, "citations": ["d1"]}
    text = f"{meta['speaker']} in round {meta['round']} gives a reasoned answer with some detail. " * 6
    return {"answer": text, "citations": ["d1", "d2"], "confidence": 0.7}


async def batch(debates: int, latency: float, store: RunStore | None) -> int:
    """Run the batch; returns the number of debates."""
    model = FunctionModel(reply, delay=latency, name="test:latency")
    model.max_concurrency = 10_000
    # The runs share one store; the last run in flight commits what is pending when it ends.
    debate = Debate("answer", model=model, store=store)

    async def one(i: int) -> None:
        await debate.run(f"Question number {i}: should this be recorded?", context={"docs": ["d1", "d2"]})

    await asyncio.gather(*(one(i) for i in range(debates)))
    if store is not None:
        store.flush()  # the batch is over when everything is committed
    return debates


def _events(store: RunStore | None) -> int:
    """Events in the store so far (counted outside the timed part)."""
    if store is None:
        return 0
    with sqlite3.connect(store.path) as db:
        return int(db.execute("SELECT COUNT(*) FROM events").fetchone()[0])


def measure(debates: int, latency: float, store: RunStore | None) -> dict[str, float]:
    before = _events(store)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    asyncio.run(batch(debates, latency, store))
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    return {"wall_s": wall, "cpu_s": cpu, "events": _events(store) - before}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--debates", type=int, default=200)
    parser.add_argument("--latency", type=float, default=0.5, help="seconds per model call")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument(
        "--out", type=Path, default=None, help="default results/store_overhead_<latency in ms>ms"
    )
    args = parser.parse_args()
    if args.out is None:
        args.out = Path(__file__).parent / "results" / f"store_overhead_{round(1000 * args.latency)}ms"

    load_before = os.getloadavg()  # the machine is shared: the figures depend on what else runs
    with tempfile.TemporaryDirectory() as tmp:
        store = RunStore(Path(tmp) / "runs.db", background=True)  # as the CLI opens it
        measure(20, 0.0, store)  # warm up: imports, prompt templates, the store's first pages
        measure(20, 0.0, None)
        runs: dict[str, list[dict[str, float]]] = {"without": [], "with": []}
        for _ in range(args.reps):
            runs["without"].append(measure(args.debates, args.latency, None))
            runs["with"].append(measure(args.debates, args.latency, store))
        size = (Path(tmp) / "runs.db").stat().st_size + sum(
            p.stat().st_size for p in Path(tmp).glob("runs.db-*")
        )
        store.close()
    load_after = os.getloadavg()

    med = {
        mode: {k: statistics.median(r[k] for r in rs) for k in ("wall_s", "cpu_s", "events")}
        for mode, rs in runs.items()
    }
    events = med["with"]["events"]
    added_wall = (med["with"]["wall_s"] - med["without"]["wall_s"]) / med["without"]["wall_s"]
    cpu_per_event_ms = 1000 * (med["with"]["cpu_s"] - med["without"]["cpu_s"]) / events
    summary = {
        "debates": args.debates,
        "latency_s": args.latency,
        "reps": args.reps,
        "events_per_batch": events,
        "events_per_debate": events / args.debates,
        "wall_without_s": med["without"]["wall_s"],
        "wall_with_s": med["with"]["wall_s"],
        "added_wall_pct": 100 * added_wall,
        "cpu_without_s": med["without"]["cpu_s"],
        "cpu_with_s": med["with"]["cpu_s"],
        "added_cpu_per_event_ms": cpu_per_event_ms,
        "store_bytes_after": size,
        "goals": {"added_wall_pct": "< 5", "added_cpu_per_event_ms": "< 0.2"},
        "met": {"wall": 100 * added_wall < 5, "cpu": cpu_per_event_ms < 0.2},
        "load_avg_1_5_15_before": load_before,
        "load_avg_1_5_15_after": load_after,
        "all_runs": runs,
        "machine": f"{platform.machine()}, {platform.python_version()}, moot {__version__}",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    lines = [
        f"run store overhead: {args.debates} concurrent debates"
        " (preset answer: 2 agents x 2 rounds + judge),",
        f"model latency {args.latency:g} s per call, in-process;"
        f" median of {args.reps} alternating repetitions",
        f"events stored per debate: {events / args.debates:.1f} ({events:.0f} per batch,"
        " gathered for 10 ms and committed together)",
        f"wall  without store {med['without']['wall_s']:.3f} s   with store {med['with']['wall_s']:.3f} s"
        f"   added {100 * added_wall:+.2f}%   (goal < 5%)",
        f"cpu   without store {med['without']['cpu_s']:.3f} s   with store {med['with']['cpu_s']:.3f} s"
        f"   added {cpu_per_event_ms:.3f} ms per event   (goal < 0.2 ms)",
        f"store size after all repetitions: {size / 1e6:.1f} MB",
        f"load average (1 min) on {os.cpu_count()} cores:"
        f" {load_before[0]:.2f} before, {load_after[0]:.2f} after",
    ]
    args.out.with_suffix(".txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
