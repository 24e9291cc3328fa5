from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from bench_helpers import oracle

from moot.bench.report import (
    REPORT_FILE,
    ROUNDS_PLOT,
    TOKENS_PLOT,
    build_report,
    command_line,
    ensure_plotting,
    render_markdown,
    rich_table,
    write_report,
)
from moot.bench.runner import BenchConfig, BenchRun, run_bench
from moot.errors import MissingDependencyError

PLAN = {
    0: [["right", "right", "right"], ["right", "right", "right"]],
    1: [["wrong", "right", "right"], ["right", "right", "right"]],
    2: [["right", "wrong", "wrong"], ["wrong", "wrong", "wrong"]],
    3: [["junk", "junk", "wrong"], ["right", "right", "wrong"]],
}


def _run(tmp_path: Path) -> BenchRun:
    config = BenchConfig(task="arithmetic", methods=["single", "society:3:2"], n=4, matched=True)
    model = oracle(lambda i, a, r: PLAN[i][r][a] if a < 3 else "wrong")  # vote:6 agents 3-5 wrong
    return asyncio.run(run_bench(config, model=model, out=tmp_path))


def test_markdown_report_shows_accuracy_intervals_tests_and_flips(tmp_path: Path) -> None:
    run = _run(tmp_path)
    report = write_report(run, tmp_path, plots=False)
    text = (tmp_path / REPORT_FILE).read_text(encoding="utf-8")
    # single: 2/4 right, Wilson [15.0%, 85.0%], 1 parse failure; society: 3/4, round-0 vote 2/4.
    assert "| `single` | 4 | 50.0% | [15.0%, 85.0%] | 50.0% | 1 (25.0%) | 50.0% | 1.00 |" in text
    assert "| `society:3:2` | 4 | 75.0% | [30.1%, 95.4%] | 50.0% | 0 (0.0%) | 75.0% | 6.00 |" in text
    assert "| `vote:6` | 4 |" in text
    assert "| `society:3:2` | `single` | 4 | 1 | 2 | 1 | +25.0 pp | 1 | exact |" in text
    assert "| `society:3:2` | `vote:6` |" in text
    assert "| 1 | 4 | 75.0% | 66.7% | 0 | 1 | 3 |" in text  # round 1: flips right->wrong 1, wrong->right 3
    assert "a lenient parser would read 0 of the 1 unparsed finals" in text  # "I am not sure..."
    # Four arithmetic items, four different answers: always giving one would only measure n.
    assert (
        "| baseline: always `" not in text
        and "| no majority baseline: every gold answer is unique | 4 |" in text
    )
    assert "status: complete" in text
    assert "reproduce: `moot bench --task arithmetic --methods single,society:3:2" in text
    assert "--matched" in text
    assert [m.method for m in report.methods] == ["single", "society:3:2", "vote:6"]
    assert "accuracy_vs_tokens.png" not in text


def test_plots_are_written(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    run = _run(tmp_path)
    write_report(run, tmp_path)
    for name in (TOKENS_PLOT, ROUNDS_PLOT):
        data = (tmp_path / name).read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 5000
    assert f"![{ROUNDS_PLOT}]({ROUNDS_PLOT})" in (tmp_path / REPORT_FILE).read_text(encoding="utf-8")


def test_missing_matplotlib_names_the_bench_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(MissingDependencyError) as info:
        ensure_plotting()
    assert info.value.extra == "bench" and "moot[bench]" in str(info.value)


def test_incomplete_runs_say_so_and_terminal_table_renders(tmp_path: Path) -> None:
    run = _run(tmp_path)
    run.records = run.records[:-1]
    run.failures = [("arithmetic-3", "vote:6", "ModelError: boom")]
    report = build_report(run)
    text = render_markdown(report)
    assert "INCOMPLETE" in text and "1 units failed" in text
    from rich.console import Console

    console = Console(record=True, width=160)
    console.print(rich_table(report))
    assert "society:3:2" in console.export_text()


def test_command_line_round_trips_options() -> None:
    config = BenchConfig(task="gsm8k:x.jsonl", methods=["single"], model="openai:m", n=50, temperature=0.7)
    assert command_line(config) == (
        "moot bench --task gsm8k:x.jsonl --methods single --model openai:m --n 50 --seed 0 "
        "--temperature 0.7 --max-tokens 256"
    )


def test_a_file_shorter_than_n_is_titled_and_reproduced_with_its_real_n(tmp_path: Path) -> None:
    """``--n 100`` on a file of 2 items is a run of 2: the stored title, the report and its reproduce line."""
    from moot.cli import main
    from moot.runs import RunStore

    data = Path(__file__).resolve().parents[2] / "examples" / "inputs" / "gsm8k.jsonl"
    out, store = tmp_path / "out", tmp_path / "runs.db"
    argv = ["bench", "--task", f"gsm8k:{data}", "--methods", "single", "--model", "test", "--n", "100"]
    assert main([*argv, "--out", str(out), "--no-plots", "--store", str(store)]) == 0
    with RunStore(store, must_exist=True) as runs:
        (run,) = runs.list()
    assert run.title == f"gsm8k:{data} · single · n=2"
    text = (out / REPORT_FILE).read_text(encoding="utf-8")
    assert "items: 2 (seed 0)" in text and "--n 2 --seed 0" in text and "--n 100" not in text
    config = BenchConfig(task=f"gsm8k:{data}", methods=["single"], model="test", n=100)
    assert "--n 2 " in command_line(config, n_items=2) and "--n 100 " in command_line(config)
