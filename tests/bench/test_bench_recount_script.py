"""``bench/recount.py``: a recount of a run agrees with its report and catches one that does not."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
from bench_helpers import bench_script

from moot.cli import main
from moot.models import FunctionModel

ROOT = Path(__file__).parent.parent.parent


def _script() -> ModuleType:
    return bench_script("recount")


def test_recount_agrees_with_the_report_and_flags_a_changed_figure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_provider: Callable[..., None]
) -> None:
    # Answers "B" in the requested format, "Answer: C" otherwise once, and a non-answer on the rest.
    replies = iter(["The answer is (B).", "Answer: C", "I am not sure."] * 50)
    fake_provider("rc", lambda rest: FunctionModel(lambda request: next(replies)))
    out = tmp_path / "out"
    task = f"mcq:{ROOT / 'tests' / 'data' / 'mmlu_style.csv'}"
    argv = ["bench", "--task", task, "--methods", "single,vote:3", "--model", "rc:a", "--n", "0"]
    assert main([*argv, "--out", str(out), "--no-plots", "--no-store"]) == 0
    recount = _script()
    capsys.readouterr()
    assert recount.main([str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines and all(line.startswith("ok ") for line in lines)
    assert any("majority-class baseline" in line for line in lines)
    assert sum("single:" in line for line in lines) == 6  # n, accuracy, interval, failures, lenient, calls

    report = out / "report.md"
    text = report.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| `single` |"))
    cells = row.split("|")
    cells[3] = " 99.9% "
    report.write_text(text.replace(row, "|".join(cells)), encoding="utf-8")
    assert recount.main([str(out)]) == 1
    assert "DIFF" in capsys.readouterr().out


def test_recount_agrees_that_unique_gold_answers_have_no_majority_baseline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    argv = ["bench", "--task", "arithmetic", "--methods", "single", "--model", "test", "--n", "3"]
    assert main([*argv, "--out", str(out), "--no-plots", "--no-store"]) == 0
    assert "no majority baseline: every gold answer is unique" in (out / "report.md").read_text("utf-8")
    capsys.readouterr()
    assert _script().main([str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("ok ") and "majority-class baseline" in line for line in lines)
