"""``Debate(..., store=...)``: a debate run from Python is recorded like ``moot run``."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from moot import Debate
from moot.cli import main
from moot.errors import UsageError
from moot.models import ModelRequest
from moot.models.testing import FunctionModel
from moot.runs import RunStore, load_result
from moot.transcript import DebateResult, Event


def _reply(req: ModelRequest) -> dict[str, object]:
    if req.metadata["phase"] == "judge":
        return {"final_answer": "merged", "citations": []}
    return {"answer": f"{req.metadata['speaker']} r{req.metadata['round']}", "confidence": 0.6}


def _model(delay: float = 0.0) -> FunctionModel:
    return FunctionModel(_reply, delay=delay, name="test:store")


def test_a_python_debate_shows_in_moot_runs_and_loads_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "runs.db"
    seen: list[str] = []
    debate = Debate("answer", model=_model(), store=path, overrides={"rounds": 1})
    result = debate.run_sync("Is tea good for you?", on_event=lambda e: seen.append(e.kind))
    assert seen[0] == "debate_started" and seen[-1] == "debate_completed"  # the caller's callback still runs

    assert main(["runs", "list", "--store", str(path), "--json"]) in (0, None)
    (row,) = json.loads(capsys.readouterr().out)["runs"]
    assert (row["kind"], row["title"], row["status"], row["model"]) == (
        "run",
        "Is tea good for you?",
        "complete",
        "test:store",
    )
    with RunStore(path) as store:  # a connection of its own: it sees only what was committed
        assert load_result(store, row["id"]) == result
        stored = [e.kind for e in store.events(row["id"])]
        assert stored == seen
        config = store.get(row["id"]).config
        assert config["protocol"]["rounds"] == 1 and config["models"]["critical"]["spec"] == "test:store"
    # `moot runs show` replays it as `moot run` printed it
    assert main(["runs", "show", row["id"][:8], "--store", str(path)]) in (0, None)
    assert "merged" in capsys.readouterr().out


def test_concurrent_runs_are_committed_when_the_last_ends(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    debate = Debate("answer", model=_model(0.01), store=path)

    async def many() -> list[DebateResult]:
        return await asyncio.gather(*(debate.run(f"Question {i}?") for i in range(5)))

    results = asyncio.run(many())  # no run_sync, no aclose: nothing may be left pending
    with RunStore(path) as store:
        runs = store.list()
        assert sorted(r.title for r in runs) == [f"Question {i}?" for i in range(5)]
        assert {r.status for r in runs} == {"complete"}
        by_title = {r.title: load_result(store, r.id) for r in runs}
    assert [by_title[r.topic] for r in results] == results


def test_store_true_uses_moot_store_and_a_runstore_is_shared(tmp_path: Path) -> None:
    Debate("answer", model=_model(), store=True).run_sync("Where?")
    with RunStore(os.environ["MOOT_STORE"]) as store:
        assert [r.title for r in store.list()] == ["Where?"]
        Debate("answer", model=_model(), store=store).run_sync("And here?")
        assert [r.title for r in store.list()] == ["And here?", "Where?"]
    assert Debate("answer", model=_model()).store is None  # the default records nothing


def test_a_cancelled_run_is_interrupted_and_a_usage_error_records_nothing(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    debate = Debate("answer", model=_model(delay=30), store=path)

    async def cancel() -> None:
        task = asyncio.create_task(debate.run("Slow?"))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel())
    with pytest.raises(UsageError, match="empty"):
        debate.run_sync("  ")
    with RunStore(path) as store:
        (run,) = store.list()
        assert (run.title, run.status, run.error) == ("Slow?", "interrupted", "interrupted")
        assert [e.kind for e in store.events(run.id)][:1] == ["debate_started"]


def test_an_event_callback_error_fails_the_record_and_reaches_the_caller(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"

    def boom(event: Event) -> None:
        if event.kind == "turn_completed":
            raise RuntimeError("callback broke")

    with pytest.raises(RuntimeError, match="callback broke"):
        Debate("answer", model=_model(), store=path).run_sync("Why?", on_event=boom)
    with RunStore(path) as store:
        (run,) = store.list()
        assert run.status == "failed" and "callback broke" in (run.error or "")
        assert "turn_completed" in [e.kind for e in store.events(run.id)]  # stored before the callback ran


def test_start_execute_stream_and_a_skipped_run_are_each_one_row(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    debate = Debate("answer", model=_model(), store=path, overrides={"rounds": 1})

    async def doors() -> None:
        await debate.start("Driven?").execute()
        async for _ in debate.stream("Streamed?"):
            pass
        await debate.run("Skipped?", debate_mode=False, initial_answer="kept")

    asyncio.run(doors())
    with RunStore(path) as store:
        rows = {r.title: r for r in store.list()}
        assert {t: r.status for t, r in rows.items()} == {
            "Driven?": "complete",
            "Streamed?": "complete",
            "Skipped?": "skipped",
        }
        assert load_result(store, rows["Skipped?"].id).final_answer == "kept"
        assert [e.kind for e in store.events(rows["Driven?"].id)][0] == "debate_started"
