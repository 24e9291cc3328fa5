"""``moot runs`` on a store filled by real runs of every kind."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import get_args

import pytest

from moot.cli import main
from moot.runs import RunStatus, RunStore

from .filled import XSS


def test_list_filters_and_json(filled: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "list", "--json"]) == 0
    page = json.loads(capsys.readouterr().out)  # the shape /api/runs answers
    assert {k: page[k] for k in ("total", "offset", "limit")} == {"total": 7, "offset": 0, "limit": 50}
    rows = page["runs"]
    assert [r["id"] for r in rows] == list(reversed(filled.values()))  # newest first
    assert {r["status"] for r in rows} == {"complete", "fell_back"}
    titles = {r["id"]: r["title"] for r in rows}
    assert titles[filled["bench_a"]] == "arithmetic · single, society:3:2 · n=6"  # task, methods, n
    assert main(["runs", "list", "--kind", "bench", "--json"]) == 0
    benches = json.loads(capsys.readouterr().out)["runs"]
    assert [r["id"] for r in benches] == [filled["bench_b"], filled["bench_a"]]
    assert main(["runs", "list", "--status", "fell_back", "--model", "fillbad", "--json"]) == 0
    assert [r["id"] for r in json.loads(capsys.readouterr().out)["runs"]] == [filled["fallback"]]
    assert main(["runs", "list", "--limit", "2", "--offset", "2", "--json"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert (
        second["total"] == 7
        and second["offset"] == 2
        and [r["id"] for r in second["runs"]] == [r["id"] for r in rows[2:4]]
    )
    assert main(["runs", "list", "--limit", "2"]) == 0
    table = capsys.readouterr().out
    assert filled["bench_b"][:8] in table and filled["debate"][:8] not in table and "wall" in table
    assert "showing 2 of 7 (1-2; next: --offset 2; --limit 2 per page)" in table
    assert main(["runs", "list", "--limit", "2", "--offset", "6"]) == 0
    last = capsys.readouterr().out
    assert filled["debate"][:8] in last and "showing 1 of 7 (7-7; --limit 2 per page)" in last
    assert main(["runs", "list"]) == 0 and "showing 7 of 7\n" in capsys.readouterr().out
    # --search finds words said only inside a turn (the critic's reply), not in any title or prompt
    # (an ABSA batch unit keeps its stage prompts, which hold "key_disagreements")
    assert main(["runs", "list", "--search", "zugzwang", "--json"]) == 0
    assert [r["id"] for r in json.loads(capsys.readouterr().out)["runs"]] == [filled["debate"]]


@pytest.mark.parametrize(
    ("option", "value", "known"),
    [
        ("--kind", "nonsense", "run, absa, absa-eval, arbitrate, bench"),
        ("--status", "done", ", ".join(get_args(RunStatus))),
    ],
)
def test_list_refuses_an_unknown_kind_or_status(
    option: str, value: str, known: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An empty table would read as "no such runs"; a typo must say what the option takes.
    RunStore(tmp_path / "runs.db").close()
    assert main(["runs", "list", option, value, "--store", str(tmp_path / "runs.db")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"moot: error: unknown {option} {value!r}; known: {known}"]


def test_show_replays_a_debate_like_moot_run(
    filled: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["runs", "show", filled["debate"][:8]]) == 0
    out = capsys.readouterr().out
    for needle in ("affirmative", "critical", "round 2", "Tests first, then the fix.", XSS, "5 calls"):
        assert needle in out
    assert "is thinking" not in out  # a finished run: every turn it started has its panel
    assert main(["runs", "show", filled["fallback"]]) == 0
    out = capsys.readouterr().out
    assert "fell_back" in out and "failed" in out and "fallback" in out
    assert main(["runs", "show", filled["debate"], "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["result"]["final_answer"] == "Tests first, then the fix." and data["kind"] == "run"


@pytest.mark.parametrize(
    ("name", "needles"),
    [
        ("bench_a", ["society:3:2", "accuracy", "single"]),
        ("absa", ["negative", "battery life"]),
        ("absa_batch", ["Nice place.", "battery life"]),
        ("arbitrate", ["contradictions", "resolved"]),
    ],
)
def test_show_every_kind(
    filled: dict[str, str], capsys: pytest.CaptureFixture[str], name: str, needles: list[str]
) -> None:
    assert main(["runs", "show", filled[name]]) == 0
    out = capsys.readouterr().out
    for needle in needles:
        assert needle in out


def test_export_json_and_jsonl(filled: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "export", filled["bench_a"]]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["run"]["id"] == filled["bench_a"] and len(data["items"]) == 12
    assert main(["runs", "export", filled["debate"], "--format", "jsonl"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert lines[0]["type"] == "run" and {x["type"] for x in lines[1:]} == {"event"}
    assert main(["runs", "export", filled["debate"], "--format", "xml"]) == 2
    assert "--format must be json or jsonl" in capsys.readouterr().err


def test_compare_bench_runs_pairs_items(filled: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "compare", filled["bench_a"], filled["bench_b"], "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["task"] == "arithmetic" and [m["method"] for m in data["methods"]] == [
        "single",
        "society:3:2",
    ]
    for m in data["methods"]:
        test = m["mcnemar"]
        assert test["shared"] == 6 and 0 <= test["p_value"] <= 1
        assert m["diff"] == pytest.approx(m["b"]["accuracy"] - m["a"]["accuracy"])
    assert main(["runs", "compare", filled["bench_a"], filled["bench_b"]]) == 0
    assert "McNemar p" in capsys.readouterr().out


def test_compare_debates_and_refusals(filled: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "compare", filled["debate"], filled["fallback"]]) == 0
    out = capsys.readouterr().out
    assert "Tests first, then the fix." in out and "final answer" in out and "fallback" in out
    assert main(["runs", "compare", filled["debate"], filled["bench_a"]]) == 2
    assert "cannot compare a 'run' run with a 'bench' run" in capsys.readouterr().err
    assert main(["runs", "compare", filled["absa"], filled["absa_batch"]]) == 2


def test_rm_and_errors(filled: dict[str, str], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["runs", "rm", filled["absa"][:10]]) == 2  # no terminal to ask on: --yes is needed
    assert capsys.readouterr().err.startswith(
        f"moot: error: moot runs rm would delete run {filled['absa'][:8]} "
    )
    assert main(["runs", "rm", filled["absa"][:10], "--yes"]) == 0
    assert filled["absa"] in capsys.readouterr().out
    with RunStore(os.environ["MOOT_STORE"]) as store:
        assert filled["absa"] not in [r.id for r in store.list()]
    assert main(["runs", "show", filled["absa"]]) == 2
    assert "no run" in capsys.readouterr().err
    assert main(["runs", "list", "--store", str(tmp_path / "none.db")]) == 2
    assert "no run store at" in capsys.readouterr().err


@pytest.mark.parametrize(("answer", "code", "kept"), [("n\n", 1, True), ("\n", 1, True), ("y\n", 0, False)])
def test_rm_asks_on_a_terminal(
    answer: str,
    code: int,
    kept: bool,
    filled: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import io

    from moot.cli import runs as runs_cli

    monkeypatch.setattr(runs_cli, "_stdin_is_terminal", lambda: True)
    monkeypatch.setattr("sys.stdin", io.StringIO(answer))
    assert main(["runs", "rm", filled["debate"]]) == code
    assert f"delete run {filled['debate'][:8]} (run, complete: " in capsys.readouterr().out
    with RunStore(os.environ["MOOT_STORE"]) as store:
        assert (filled["debate"] in [r.id for r in store.list()]) is kept


def test_show_of_a_running_debate_says_only_which_turns_are_in_flight(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "runs.db"
    with RunStore(path) as store:
        run_id = store.create_run("run", title="Still going?", model="m")
        for seq, (kind, speaker) in enumerate(
            [("turn_started", "affirmative"), ("turn_started", "critical"), ("turn_completed", "affirmative")]
        ):
            store.append_event(run_id, seq, kind, json.dumps({"speaker": speaker, "round": 1}))
    assert main(["runs", "show", run_id, "--store", str(path)]) == 0
    out = capsys.readouterr().out
    assert "critical is thinking (round 1)" in out and "affirmative is thinking" not in out
