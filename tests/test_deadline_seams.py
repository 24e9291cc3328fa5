"""Deadlines in benchmarks and batches are explicit and never hidden (issue 20).

Against a real local HTTP server slower than the ``answer`` preset's production deadline
(seed 000's 10 s, 4 s per call: the debate falls back after its second round), through
``moot bench`` and ``moot run --input``: no fallen-back unit is scored, none reported as
saved calls, the exit code is 1 and the method's row counts the units; lifting the
deadline and running again finishes them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fault_server import Fate, FaultServer, schema_reply
from moot import models
from moot.bench.records import ItemRecord
from moot.bench.summary import summarize
from moot.cli import main

SLOW = 4.0
"""Seconds per call: the ``answer`` preset (10 s) cannot finish its three sequential steps."""


class _Latency:
    """A server whose latency the test changes between runs."""

    def __init__(self) -> None:
        self.delay = SLOW

    def __call__(self, n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
        return Fate(content=schema_reply(body), delay=self.delay)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FaultServer, _Latency]]:
    monkeypatch.setattr(models.base, "ALLOW_MODEL_REQUESTS", True)
    for var in ("OPENAI_API_KEY", "MOOT_OPENAI_STRUCTURED_MODE", "MOOT_REQUEST_TIMEOUT"):
        monkeypatch.delenv(var, raising=False)
    latency = _Latency()
    with FaultServer(latency) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.url)
        yield srv, latency
    for key in [k for k in models._CACHE if k.startswith("openai:deadline-")]:
        del models._CACHE[key]


@pytest.mark.integration
def test_bench_never_scores_a_unit_that_fell_back_at_the_presets_deadline(
    server: tuple[FaultServer, _Latency], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, latency = server
    out = tmp_path / "out"
    argv = ["bench", "--task", "arithmetic", "--methods", "single,answer", "--n", "2"]
    argv += ["--model", "openai:deadline-bench", "--out", str(out), "--no-plots", "--no-store"]
    started = time.perf_counter()
    assert main(argv) == 1
    assert time.perf_counter() - started < 30
    captured = capsys.readouterr()
    err = " ".join(captured.err.split())  # the console wraps at 80 columns
    records = [
        ItemRecord.model_validate_json(line) for line in (out / "results.jsonl").read_text().splitlines()
    ]
    answer = [r for r in records if r.method == "answer"]
    assert len(answer) == 2
    for r in answer:  # recorded for audit (turns, calls), never the method's answer
        assert r.fallback == "timeout: the debate exceeded 10 s"
        assert (r.final, r.correct, r.parse_failed) == (None, False, False)
        assert r.calls == 4 and r.final_text
    summary = summarize("answer", answer)
    assert (summary.n, summary.fell_back, summary.parse_failures, summary.calls_saved) == (0, 2, 0, 0)
    report = (out / "report.md").read_text()
    row = next(line for line in report.splitlines() if line.startswith("| `answer`"))
    assert row.split("|")[-2].strip() == "2"  # the row's "fell back" cell
    assert "calls saved" not in report
    assert "2× timeout: the debate exceeded 10 s" in report
    assert "--deadline answer=100" in report and f"--resume {out} --deadline answer=100" in err
    assert "fell back: 2 units fell back and are not scored (answer 2)" in err and "saved" not in err
    # The table on the terminal shows the count in the method's row.
    assert any(
        line.split("│")[1:3] and "answer" in line and " 2 " in line for line in captured.out.splitlines()
    )

    # Lifting the deadline and resuming runs exactly the fallen-back units again.
    latency.delay = 0.0
    assert main([*argv, "--resume", str(out), "--deadline", "answer=60"]) == 0
    records = [
        ItemRecord.model_validate_json(line) for line in (out / "results.jsonl").read_text().splitlines()
    ]
    assert len(records) == 6  # 2 single + 2 fallen back + 2 reruns, appended
    meta = json.loads((out / "run.json").read_text())
    assert meta["deadlines"] == {"answer": 60}
    report = (out / "report.md").read_text()
    row = next(line for line in report.splitlines() if line.startswith("| `answer`"))
    assert row.split("|")[2].strip() == "2" and row.split("|")[-2].strip() == "0"
    assert "FELL BACK" not in report


@pytest.mark.integration
def test_a_run_input_batch_says_how_many_fell_back_and_how_to_lift_the_deadline(
    server: tuple[FaultServer, _Latency], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, latency = server
    topics = tmp_path / "topics.jsonl"
    topics.write_text('"Tea or coffee?"\n{"topic": "Tabs or spaces?", "initial_answer": "spaces"}\n')
    out = tmp_path / "results.jsonl"
    argv = [
        "run",
        "--input",
        str(topics),
        "--output",
        str(out),
        "--model",
        "openai:deadline-batch",
        "--no-store",
        "--concurrency",
        "2",  # both debates wait out their deadline together: 10 s, not 20
    ]
    assert main(argv) == 1
    err = " ".join(capsys.readouterr().err.split())
    rows = {r["input_id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert all(r["fallback"] == "timeout: the debate exceeded 10 s" for r in rows.values())
    assert rows["Tabs or spaces?"]["final_answer"] == "spaces"
    assert "fell back: 2 of 2 debates (2x timeout: the debate exceeded 10 s)" in err
    assert "--timeout 100" in err and "saved" not in err

    latency.delay = 0.0
    assert main([*argv, "--timeout", "60"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "2 that fell back run again" in err and "fell back:" not in err


# -- every door runs its debates under a deadline ------------------------------------------------------


def _door_debate() -> None:
    from moot import Debate
    from moot.models.testing import SchemaModel

    Debate("answer", model=SchemaModel()).run_sync("Q?")


def _door_cli(tmp_path: Path) -> None:
    assert main(["run", "Q?", "--model", "test", "--no-store", "--json"]) == 0


def _door_cli_batch(tmp_path: Path) -> None:
    topics = tmp_path / "t.jsonl"
    topics.write_text('"A?"\n')
    argv = ["run", "--input", str(topics), "--output", str(tmp_path / "r.jsonl"), "--model", "test"]
    assert main([*argv, "--no-store"]) == 0


def _door_langgraph() -> None:
    pytest.importorskip("langgraph")
    from langgraph.graph import END, START, StateGraph

    from moot.integrations.langgraph import debate_node
    from moot.models.testing import SchemaModel

    graph: Any = StateGraph(dict)
    graph.add_node("debate", debate_node("answer", model=SchemaModel()))
    graph.add_edge(START, "debate")
    graph.add_edge("debate", END)
    import asyncio

    asyncio.run(graph.compile().ainvoke({"topic": "Q?"}))


def _door_arbitrate() -> None:
    from moot.arbitration import arbitrate_sync
    from moot.models.testing import SchemaModel

    reports = [
        {"agent": "A", "findings": [{"metric": "gdp", "value": 1.0, "confidence": 0.9}]},
        {"agent": "B", "findings": [{"metric": "gdp", "value": 2.0, "confidence": 0.5}]},
    ]
    arbitrate_sync(reports, model=SchemaModel())


def _door_absa() -> None:
    from moot.absa import run_absa_sync
    from moot.models.testing import SchemaModel

    run_absa_sync("The pasta was great but the service was slow.", model=SchemaModel())


def _door_bench(tmp_path: Path) -> None:
    import asyncio

    from moot.bench.runner import BenchConfig, run_bench
    from moot.models.testing import SchemaModel

    config = BenchConfig(task="arithmetic", methods=["answer"], n=1)
    asyncio.run(run_bench(config, model=SchemaModel(), out=tmp_path / "bench"))


DOORS = {
    "Debate.run": lambda tmp: _door_debate(),
    "moot run": _door_cli,
    "moot run --input": _door_cli_batch,
    "debate_node": lambda tmp: _door_langgraph(),
    "arbitrate": lambda tmp: _door_arbitrate(),
    "run_absa": lambda tmp: _door_absa(),
    "run_bench": _door_bench,
}


@pytest.mark.parametrize("door", list(DOORS))
def test_every_door_runs_its_debates_under_a_deadline(
    door: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from moot.debate_run import DebateRun

    seen: list[Any] = []
    begin = DebateRun.begin

    async def spy(self: DebateRun) -> None:
        await begin(self)
        seen.append(self.deadline)

    monkeypatch.setattr(DebateRun, "begin", spy)
    DOORS[door](tmp_path)
    assert seen and all(d is not None and d.remaining_s() >= 0 for d in seen)


# -- the records and the figures -------------------------------------------------------------------


def _record(item: str, **fields: Any) -> ItemRecord:
    base: dict[str, Any] = {"item_id": item, "method": "answer", "gold": "1", "final": "1"}
    base |= {"correct": True, "parse_failed": False, "calls": 5, "nominal_calls": 5}
    return ItemRecord.model_validate(base | fields)


def test_a_fallen_back_record_is_never_an_answer_even_when_read_from_an_older_file() -> None:
    older = _record("a", calls=4, note="fallback: timeout: the debate exceeded 10 s")  # scored, before
    assert older.fallback == "timeout: the debate exceeded 10 s" and older.note is None
    assert (older.final, older.correct, older.parse_failed) == (None, False, False)
    summary = summarize(
        "answer", [older, _record("b"), _record("c", final=None, correct=False, parse_failed=True)]
    )
    assert (summary.n, summary.correct, summary.parse_failures) == (2, 1, 1)
    assert summary.fell_back == 1 and summary.fallbacks == (("timeout: the debate exceeded 10 s", 1),)
    assert (summary.calls, summary.nominal_calls, summary.calls_saved) == (10, 10, 0)


def test_a_resumes_rerun_replaces_the_fallen_back_line(tmp_path: Path) -> None:
    from moot.bench.runner import load_records

    path = tmp_path / "results.jsonl"
    lines = [_record("a", fallback="budget: calls 3"), _record("b"), _record("a", final="2", correct=False)]
    path.write_text("".join(r.model_dump_json() + "\n" for r in lines))
    by_item = {r.item_id: r for r in load_records(path)}
    assert by_item["a"].fallback is None and by_item["a"].final == "2"
    path.write_text("".join(r.model_dump_json() + "\n" for r in [*lines, _record("b", fallback="x")]))
    assert {r.item_id: r for r in load_records(path)}["b"].fallback is None  # a scored line stays


def test_bench_deadlines_are_checked_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["bench", "--methods", "single,answer", "--model", "test", "--n", "1", "--no-plots", "--no-store"]
    assert main([*argv, "--out", str(tmp_path / "a"), "--deadline", "single=5"]) == 2
    assert "only presets have a deadline" in capsys.readouterr().err
    assert main([*argv, "--out", str(tmp_path / "b"), "--deadline", "panel=5"]) == 2
    assert "panel is not one of the methods" in capsys.readouterr().err
    assert main([*argv, "--out", str(tmp_path / "c"), "--deadline", "answer=-1"]) == 2
    assert "positive seconds" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "c").exists()
