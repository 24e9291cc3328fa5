"""Reports agree: live, ``--report-only`` and an independent recount from results.jsonl; baselines shown."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from moot.bench.report import NO_MAJORITY, baseline_note, baselines, majority_class
from moot.bench.tasks import Item
from moot.cli import main
from moot.models import FunctionModel, ModelRequest

DATA = Path(__file__).parent.parent / "data"


def _absa_model() -> FunctionModel:
    """Right on lamb and menu, wrong on waiter, a non-answer on prices, 'positive' for the rest."""

    def fn(request: ModelRequest) -> str:
        prompt = request.messages[0].content
        if '"lamb"' in prompt or '"menu"' in prompt:
            return (
                "positive toward 'wine' but about this aspect: (neutral)"
                if "menu" in prompt
                else "(positive)"
            )
        if '"waiter"' in prompt:
            return "The sentiment toward the waiter is positive."
        if '"prices"' in prompt:
            return "I cannot tell."
        return "A positive sentiment toward it."

    return FunctionModel(fn)


def _table_rows(report: str) -> dict[str, list[str]]:
    rows = {}
    for line in report.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| `") and len(cells) > 8:
            rows.setdefault(cells[0].strip("`"), cells)  # the results table comes first
        elif line.startswith("| baseline:"):
            rows[cells[0]] = cells
    return rows


def test_live_report_only_and_a_recount_agree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_provider: Callable[..., None]
) -> None:
    model = _absa_model()
    fake_provider("recount", lambda rest: model)
    out = tmp_path / "out"
    task = f"absa:{DATA / 'semeval2014_restaurants.xml'}"
    argv = ["bench", "--task", task, "--methods", "single,vote:3", "--model", "recount:a", "--n", "0"]
    assert main([*argv, "--out", str(out), "--no-plots"]) == 0
    live = (out / "report.md").read_text(encoding="utf-8")
    assert main(["bench", "--out", str(out), "--report-only", "--no-plots"]) == 0
    again = (out / "report.md").read_text(encoding="utf-8")
    strip = re.compile(r"^- written: .*$", re.MULTILINE)
    assert strip.sub("", live) == strip.sub("", again)

    records = [json.loads(line) for line in (out / "results.jsonl").read_text(encoding="utf-8").splitlines()]
    rows = _table_rows(live)
    for method in ("single", "vote:3"):
        mine = [r for r in records if r["method"] == method]
        n, right = len(mine), sum(r["final"] == r["gold"] for r in mine)
        fails = sum(r["final"] is None for r in mine)
        cells = rows[method]
        assert cells[1] == str(n) == "5"
        assert cells[2] == f"{100 * right / n:.1f}%"
        assert cells[5] == f"{fails} ({100 * fails / n:.1f}%)"
    # lamb (positive) and menu (neutral) right; waiter wrong; prices a parse failure; portions wrong.
    assert rows["single"][2] == "40.0%" and rows["single"][5] == "1 (20.0%)"
    golds = Counter(r["gold"] for r in records if r["method"] == "single")
    top = golds.most_common(1)[0]
    assert rows[f"baseline: always `{top[0]}` (majority class)"][2] == f"{100 * top[1] / 5:.1f}%"
    assert "conflict" in {r["gold"] for r in records}


def test_baselines_majority_and_chance() -> None:
    items = [Item(id=str(i), prompt="", gold=g) for i, g in enumerate("ppnpu")]
    assert baselines(items) == [("always `p` (majority class)", 0.6)]
    mcq = [
        Item(id="a", prompt="", gold="B", letters="ABCD"),
        Item(id="b", prompt="", gold="A", letters="AB"),
        Item(id="c", prompt="", gold="B", letters="ABCD"),
    ]
    assert baselines(mcq) == [("always `B` (majority class)", 2 / 3), ("chance (a random option)", 1 / 3)]
    assert baselines([]) == []


def test_no_majority_baseline_when_every_gold_answer_is_unique_and_ties_do_not_depend_on_order() -> None:
    """Issue 33: "always 60" in the report, "always -364" in the viewer, on items whose golds are unique."""
    unique = [Item(id=str(i), prompt="", gold=g) for i, g in enumerate(["60", "-364", "7"])]
    assert baselines(unique) == [] and baseline_note(unique) == NO_MAJORITY
    assert baseline_note(unique[:1]) == NO_MAJORITY and baseline_note([]) is None
    mcq = [Item(id="a", prompt="", gold="B", letters="ABCD"), Item(id="b", prompt="", gold="A", letters="AB")]
    assert baselines(mcq) == [("chance (a random option)", 0.375)]  # one of each: no majority
    tied = [Item(id=str(i), prompt="", gold=g) for i, g in enumerate(["9", "3", "9", "3", "5"])]
    assert majority_class(tied) == majority_class(tied[::-1]) == ("3", 2)
    assert baselines(tied) == baselines(tied[::-1]) == [("always `3` (majority class)", 0.4)]


def test_plots_draw_the_baselines_as_lines(tmp_path: Path) -> None:
    plt = pytest.importorskip("matplotlib.pyplot")
    from test_bench_report import _run

    from moot.bench.report import _baseline_lines, build_report

    report = build_report(_run(tmp_path))  # four arithmetic items, four different answers
    assert report.baselines == [] and report.baseline_note == NO_MAJORITY
    report.baselines = [("always `246` (majority class)", 0.5)]
    fig, ax = plt.subplots()
    _baseline_lines(ax, report)
    assert [line.get_label() for line in ax.get_lines()] == ["baseline: always 246 (majority class)"]
    assert ax.get_lines()[0].get_ydata()[0] == pytest.approx(50.0)
    plt.close(fig)
