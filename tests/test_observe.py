"""moot.observe: observers subscribed to a run's events, attached once where the run starts."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from moot import Debate, observe
from moot.models import ModelRequest
from moot.models.testing import FunctionModel
from moot.observe import PipelineEvent, RunEnd, RunStart
from moot.runs import RunStore


def _reply(req: ModelRequest) -> dict[str, object]:
    if req.metadata["phase"] == "judge":
        return {"final_answer": "merged", "citations": []}
    return {"answer": f"{req.metadata['speaker']} r{req.metadata['round']}", "confidence": 0.6}


def _model() -> FunctionModel:
    return FunctionModel(_reply, name="test:observe")


class Log:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def on_start(self, start: RunStart) -> None:
        self.calls.append(("start", start))

    def on_event(self, event: BaseModel) -> None:
        self.calls.append(("event", event))

    def on_end(self, end: RunEnd) -> None:
        self.calls.append(("end", end))

    def kinds(self) -> list[str]:
        return [c[1].kind if c[0] == "event" else c[0] for c in self.calls]


@pytest.fixture
def logs() -> Iterator[list[Log]]:
    made: list[Log] = []

    def factory(start: RunStart, options: Mapping[str, Any]) -> Log | None:
        if options.get("log") is False:
            return None
        made.append(Log())
        return made[-1]

    observe.register("test-log", factory)
    try:
        yield made
    finally:
        observe.unregister("test-log")


def test_a_subscriber_sees_start_every_event_then_the_end(logs: list[Log]) -> None:
    seen: list[str] = []
    result = Debate("answer", model=_model(), overrides={"rounds": 1}).run_sync(
        "Why?", on_event=lambda e: seen.append(e.kind)
    )
    (log,) = logs
    kinds = log.kinds()
    assert kinds[0] == "start" and kinds[-1] == "end" and kinds[1:-1] == seen
    start, end = log.calls[0][1], log.calls[-1][1]
    assert (start.kind, start.title, start.model) == ("run", "Why?", "test:observe")
    assert start.config["protocol"]["rounds"] == 1
    assert (end.status, end.result) == ("complete", result)


def test_start_execute_and_a_skipped_run_are_observed(logs: list[Log]) -> None:
    debate = Debate("answer", model=_model(), overrides={"rounds": 1})
    asyncio.run(debate.start("Driven?").execute())
    debate.run_sync("Skipped?", debate_mode=False, initial_answer="as is")
    assert [log.calls[-1][1].status for log in logs] == ["complete", "skipped"]
    assert logs[1].calls[0][1].config["debate_mode"] is False


def test_a_failing_observer_is_dropped_and_the_run_goes_on(
    logs: list[Log], capsys: pytest.CaptureFixture[str]
) -> None:
    class Broken(Log):
        def on_event(self, event: BaseModel) -> None:
            raise RuntimeError("observer broke")

    observe.register("test-broken", lambda start, options: Broken())
    try:
        result = Debate("answer", model=_model(), overrides={"rounds": 1}).run_sync("Still?")
    finally:
        observe.unregister("test-broken")
    assert result.final_answer == "merged"
    assert logs[0].calls[-1][1].status == "complete"
    assert capsys.readouterr().err.count("observer broke") == 1


def test_a_nested_run_goes_to_the_enclosing_run(logs: list[Log]) -> None:
    debate = Debate("answer", model=_model(), overrides={"rounds": 1})

    async def outer() -> None:
        with observe.observed(RunStart(kind="arbitrate", title="reports")) as run:
            run.emit(PipelineEvent(kind="progress", data={"stage": "debate", "status": "running"}))
            await asyncio.gather(debate.run("A?"), debate.run("B?"))
            run.end("fell_back", {"n": 2})

    asyncio.run(outer())
    (log,) = logs  # one run: the debates inside it made no observers of their own
    kinds = log.kinds()
    assert kinds[:2] == ["start", "progress"] and kinds.count("debate_completed") == 2
    assert log.calls[-1][1].status == "fell_back" and kinds.count("end") == 1


def test_an_exception_ends_the_run_failed_and_cancel_interrupts(logs: list[Log]) -> None:
    with pytest.raises(ValueError), observe.observed(RunStart(kind="bench")):
        raise ValueError("bad")

    async def cancelled() -> None:
        with observe.observed(RunStart(kind="bench")):
            await asyncio.sleep(10)

    async def main() -> None:
        task = asyncio.create_task(cancelled())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    ends = [log.calls[-1][1] for log in logs]
    assert [(e.status, e.error) for e in ends] == [
        ("failed", "ValueError: bad"),
        ("interrupted", "interrupted"),
    ]


def test_options_reach_the_factories(logs: list[Log], tmp_path: Path) -> None:
    with observe.observed(RunStart(kind="bench"), log=False):
        pass
    assert logs == []
    path = tmp_path / "runs.db"
    with observe.observed(RunStart(kind="bench", title="t"), store=path, log=False) as run:
        run.emit(PipelineEvent(kind="unit_completed", unit="i1", part="m", correct=True, data={"x": 1}))
        run.emit(PipelineEvent(kind="unit_failed", data={"item_id": "i2", "method": "m", "error": "e"}))
        run.end("complete", summary={"units": 1}, score=1.0)
    with RunStore(path) as store:
        (row,) = store.list()
        assert (row.kind, row.status, row.score, row.summary) == ("bench", "complete", 1.0, {"units": 1})
        assert [(i.item, i.part, i.correct) for i in store.iter_items(row.id)] == [("i1", "m", True)]
        assert [e.kind for e in store.events(row.id)] == ["unit_failed"]


def test_wants_asks_the_observers_of_the_enclosing_run_which_kinds_they_ignore() -> None:
    class Ignoring(Log):
        ignores = frozenset({"model_request"})

    observers: list[Log] = [Ignoring()]
    observe.register("test-wants", lambda start, options: observers[0])
    try:
        with observe.observed(RunStart(kind="bench", title="t")) as run:
            assert run.listened and not run.wants("model_request") and run.wants("progress")
            with observe.observed(RunStart(kind="run", title="nested")) as inner:  # asks the outer run
                assert inner.nested and not inner.wants("model_request")
            observers.append(Log())  # a second observer that takes every kind
            run.observers.append(observers[1])
            assert run.wants("model_request")
            run.end("complete")
    finally:
        observe.unregister("test-wants")
    with observe.observed(RunStart(kind="bench", title="nobody")) as alone:
        assert not alone.wants("model_request")  # no observer: nobody wants anything
        alone.end("complete")
