"""Parse a finished ``moot bench`` run's stored replies again with the current parsers.

Usage::

    python bench/rescore.py OUT_DIR        # rewrites OUT_DIR/results.jsonl in place, then
    moot bench --out OUT_DIR --report-only # writes the report from it

Every reply is stored verbatim with its finish reason, and a preset's final answer text
too, so a parser change can be applied to a past run without calling the model again:
answers, finals and their lenient readings are recomputed exactly as a live run would
(``moot.bench.methods.rescore``). Calls, tokens and wall times are kept. Preset records
written before the final text was stored cannot be rescored (the script says so).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from moot.bench.methods import rescore
from moot.bench.runner import RESULTS_FILE, RUN_FILE, BenchConfig, load_records
from moot.bench.tasks import make_task


def main(out: Path) -> None:
    """Rescore ``out/results.jsonl`` in place and print how many finals changed."""
    data = json.loads((out / RUN_FILE).read_text(encoding="utf-8"))
    config = BenchConfig.model_validate({k: v for k, v in data.items() if k in BenchConfig.model_fields})
    task = make_task(config.task, exclude_conflict=config.exclude_conflict)
    items = {i.id: i for i in task.items(None, config.seed)}
    records = load_records(out / RESULTS_FILE)
    fresh = [rescore(r, items[r.item_id], task) for r in records]
    changed = sum(a.final != b.final for a, b in zip(records, fresh, strict=True))
    text = "".join(r.sealed().model_dump_json() + "\n" for r in fresh)  # rescored: sealed anew
    (out / RESULTS_FILE).write_text(text, encoding="utf-8")
    print(f"{out}: {len(fresh)} records rescored, {changed} finals changed")


if __name__ == "__main__":
    for arg in sys.argv[1:] or ["."]:
        main(Path(arg))
