"""``moot view`` with 10,000 runs: how fast the list page and ``/api/runs`` answer. A benchmark, not a test.

The store is filled by recording real debates as ``moot run`` records them
(``Debate(..., store=store)``, every event committed), on an
in-process model with no latency: ``--runs`` debates (default 10,000, each 2
agents x 2 rounds + a judge, 19 events), each on its own topic. A real
``moot view`` server (uvicorn, as ``moot view`` starts it) then answers HTTP
requests for the first list page, a deep page, a sort by cost, a search for
words said only inside turns, and the same through ``/api/runs``; each URL is
asked ``--reps`` times and the median and the slowest are kept (goal: under
300 ms). Run: ``.venv/bin/python bench/view_list.py [--runs 10000] [--reps 20]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import sqlite3
import statistics
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import uvicorn

from moot import Debate, __version__
from moot.models import ModelRequest
from moot.models.testing import FunctionModel
from moot.runs import RunStore
from moot.view import create_app

GOAL_MS = 300.0
WORDS = ("amber", "basalt", "cobalt", "dune", "ember", "fjord", "garnet", "harbor", "indigo", "jasper")


def reply(req: ModelRequest, number: int) -> dict[str, Any]:
    """Debate ``number``'s replies: one of ten rare words said only inside its turns (what search finds)."""
    meta = req.metadata
    if meta["phase"] == "judge":
        return {"final_answer": "A merged answer of a realistic length " * 4, "citations": ["d1"]}
    rare = WORDS[number % len(WORDS)]
    text = f"{meta['speaker']} in round {meta['round']} gives a reasoned answer with some detail. " * 6
    return {"answer": text + f" Consider the {rare} case.", "citations": ["d1", "d2"], "confidence": 0.7}


async def fill(store: RunStore, runs: int, batch: int = 500) -> int:
    """Record ``runs`` debates into ``store`` (``Debate(..., store=)``), ``batch`` at a time; the events."""

    async def one(i: int) -> None:
        model = FunctionModel(lambda req: reply(req, i), name="test:bench")
        debate = Debate("answer", model=model, store=store)
        await debate.run(f"Question number {i}: which option holds up best?", context={"docs": ["d1", "d2"]})

    for start in range(0, runs, batch):
        await asyncio.gather(*(one(i) for i in range(start, min(start + batch, runs))))
        store.flush()
    with sqlite3.connect(store.path) as db:
        return int(db.execute("SELECT COUNT(*) FROM events").fetchone()[0])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def timed(urls: list[str], reps: int) -> dict[str, float]:
    """Ask the ``urls`` in turn, ``reps`` times after one warm-up; milliseconds: median, slowest; body size.

    A search URL comes in ten spellings (one rare word each), so no answer is served from the
    viewer's memory of the previous search.
    """
    times: list[float] = []
    size = 0
    for k in range(reps + 1):
        t0 = time.perf_counter()
        with urllib.request.urlopen(urls[k % len(urls)], timeout=60) as response:
            body = response.read()
        if k:
            times.append(1000 * (time.perf_counter() - t0))
        size = len(body)
    return {"median_ms": statistics.median(times), "max_ms": max(times), "bytes": size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "view_list")
    parser.add_argument(
        "--store", type=Path, help="a store this benchmark filled before (kept; filled here if missing)"
    )
    args = parser.parse_args()

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.store or Path(tmp) / "runs.db"
        t0 = time.perf_counter()
        if path.exists():
            with sqlite3.connect(path) as db:
                events = int(db.execute("SELECT COUNT(*) FROM events").fetchone()[0])
                args.runs = int(db.execute("SELECT COUNT(*) FROM runs").fetchone()[0])
        else:
            store = RunStore(path, background=True)  # as the CLI opens it
            events = asyncio.run(fill(store, args.runs))
            store.close()
        fill_s = time.perf_counter() - t0
        size = sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))

        port = _free_port()
        server = uvicorn.Server(
            uvicorn.Config(create_app(path), host="127.0.0.1", port=port, log_level="warning")
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        base = f"http://127.0.0.1:{port}"
        half = args.runs // 2
        searches = [f"q={word}+case" for word in WORDS]  # a word said only inside turns, and a common one
        urls = {
            "list page": ["/"],
            f"list page, deep (offset {half})": [f"/?offset={half}"],
            "list page, by cost": ["/?sort=cost"],
            "list page, search inside turns": [f"/?{q}" for q in searches],
            "/api/runs": ["/api/runs"],
            f"/api/runs, deep (offset {half})": [f"/api/runs?offset={half}"],
            "/api/runs, search inside turns": [f"/api/runs?{q}" for q in searches],
        }
        found = json.loads(urllib.request.urlopen(base + "/api/runs?q=cobalt+case", timeout=60).read())
        results = {
            name: timed([base + u for u in found_urls], args.reps) for name, found_urls in urls.items()
        }
        server.should_exit = True
        thread.join(timeout=10)
    load_after = os.getloadavg()

    slowest = max(r["max_ms"] for r in results.values())
    summary = {
        "runs": args.runs,
        "events": events,
        "store_bytes": size,
        "fill_s": fill_s,
        "reps": args.reps,
        "search_total": found["total"],
        "results": results,
        "goal_ms": GOAL_MS,
        "met": all(r["median_ms"] < GOAL_MS for r in results.values()),
        "slowest_ms": slowest,
        "load_avg_1_5_15_before": load_before,
        "load_avg_1_5_15_after": load_after,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "moot": __version__,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    lines = [
        f"moot view with {args.runs:,} recorded debates ({events:,} events, {size / 1e6:.0f} MB store,"
        f" filled in {fill_s:.0f} s); real HTTP to a local server, {args.reps} requests per URL",
        f"{'':34} {'median':>9} {'slowest':>9} {'body':>9}",
    ]
    for name, r in results.items():
        lines.append(f"{name:34} {r['median_ms']:7.1f}ms {r['max_ms']:7.1f}ms {r['bytes'] / 1000:7.1f}kB")
    lines.append(
        f"a search ('cobalt case': one word only inside turns, one common) finds {found['total']:,} runs"
    )
    lines.append(f"goal: every median under {GOAL_MS:.0f} ms: {'met' if summary['met'] else 'NOT met'}")
    lines.append(f"load average (1 min): {load_before[0]:.2f} before, {load_after[0]:.2f} after")
    text = "\n".join(lines)
    args.out.with_suffix(".txt").write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
