"""``moot bench``: an honest benchmark harness for debate against a vote at the same cost.

Pieces, each usable on its own:

* :mod:`~moot.bench.tasks`: items and prompts (``arithmetic``, ``gsm8k:FILE``, ``mcq:FILE``, ``absa[:FILE]``);
* :mod:`~moot.bench.parsers`: documented answer parsers (a parse failure is a wrong answer);
* :mod:`~moot.bench.methods`: ``single``, ``vote:K``, ``society:N:T`` and presets;
* :mod:`~moot.bench.runner`: bounded concurrency, JSONL results, ``--resume``;
* :mod:`~moot.bench.stats` and :mod:`~moot.bench.summary`: Wilson intervals, McNemar, flips;
* :mod:`~moot.bench.report`: ``report.md``, PNG plots (extra ``moot[bench]``), the terminal table.

Example::

    import asyncio
    from moot.bench import BenchConfig, run_bench, write_report
    from moot.models import resolve_model

    config = BenchConfig(task="arithmetic", methods=["single", "vote:3", "society:3:2"], n=100, matched=True)
    run = asyncio.run(run_bench(config, model=resolve_model("local"), out="bench-out"))
    write_report(run, "bench-out")
"""

from __future__ import annotations

from .methods import MethodSpec, parse_method
from .parsers import Parsed, parse_choice, parse_label, parse_number
from .records import AgentAnswer, ItemRecord
from .report import build_report, rich_table, write_report
from .runner import BenchConfig, BenchRun, RunObserver, expand_methods, load_records, run_bench
from .tasks import AbsaTask, Item, Task, make_task

__all__ = [
    "AbsaTask",
    "AgentAnswer",
    "BenchConfig",
    "BenchRun",
    "Item",
    "ItemRecord",
    "MethodSpec",
    "Parsed",
    "RunObserver",
    "Task",
    "build_report",
    "expand_methods",
    "load_records",
    "make_task",
    "parse_choice",
    "parse_label",
    "parse_method",
    "parse_number",
    "rich_table",
    "run_bench",
    "write_report",
]
