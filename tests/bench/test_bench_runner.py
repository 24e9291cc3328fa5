from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from bench_helpers import oracle, untimed

from moot.bench.records import ItemRecord
from moot.bench.runner import RESULTS_FILE, BenchConfig, RunObserver, load_records, run_bench
from moot.errors import ModelError, UsageError
from moot.models import FunctionModel, ModelRequest

METHODS = ["single", "vote:3", "society:3:2"]


def right(item: int, agent: int, round_: int) -> str:
    return "right" if (item + agent + round_) % 3 else "wrong"


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


class _StopAfter(RunObserver):
    """Cancels the run after ``limit`` units finished: an interruption at an arbitrary point."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.count = 0
        self.task: asyncio.Task[object] | None = None

    def finished_unit(self, record: ItemRecord) -> None:
        self.count += 1
        if self.count == self.limit and self.task is not None:
            self.task.cancel()


async def _interrupted(config: BenchConfig, out: Path, limit: int) -> None:
    observer = _StopAfter(limit)
    task = asyncio.ensure_future(
        run_bench(config, model=oracle(right, delay=0.002), out=out, observer=observer)
    )
    observer.task = task
    with pytest.raises(asyncio.CancelledError):
        await task


def test_resume_after_interruption_loses_and_repeats_nothing(tmp_path: Path) -> None:
    out = tmp_path / "run"
    config = BenchConfig(task="arithmetic", methods=METHODS, n=12, concurrency=4)
    asyncio.run(_interrupted(config, out, limit=10))
    results = out / RESULTS_FILE
    before = _lines(results)
    assert 10 <= len(before) < 36  # in-flight units were cancelled, not written
    with results.open("a", encoding="utf-8") as fh:
        fh.write('{"item_id": "arithmetic-11", "method": "sin')  # a crash in the middle of a write

    fresh = oracle(right)
    run = asyncio.run(run_bench(config, model=fresh, out=out, resume=True))
    after = _lines(results)
    keys = [(r["item_id"], r["method"]) for r in after]
    assert len(keys) == len(set(keys)) == 36  # nothing repeated, nothing lost
    assert after[: len(before)] == before  # earlier lines untouched
    done_before = {(r["item_id"], r["method"]) for r in before}
    asked = {(r.metadata["item"], r.metadata["method"]) for r in fresh.requests}
    assert not asked & done_before  # no finished unit was run again
    assert asked == set(keys) - done_before
    assert run.complete and run.resumed == len(before) and len(run.records) == 36

    # The same results as an uninterrupted run (the oracle is deterministic).
    clean = asyncio.run(run_bench(config, model=oracle(right), out=tmp_path / "clean"))
    assert sorted(untimed(r) for r in run.records) == sorted(untimed(r) for r in clean.records)


def test_existing_results_need_resume_and_the_same_configuration(tmp_path: Path) -> None:
    out = tmp_path / "run"
    config = BenchConfig(task="arithmetic", methods=["single"], n=3)
    asyncio.run(run_bench(config, model=oracle(right), out=out))
    with pytest.raises(UsageError, match="--resume"):
        asyncio.run(run_bench(config, model=oracle(right), out=out))
    other = config.model_copy(update={"seed": 1})
    with pytest.raises(UsageError, match="different seed"):
        asyncio.run(run_bench(other, model=oracle(right), out=out, resume=True))
    # Growing n and adding a method is allowed: only the new units run.
    bigger = config.model_copy(update={"n": 5, "methods": ["single", "vote:2"]})
    model = oracle(right)
    run = asyncio.run(run_bench(bigger, model=model, out=out, resume=True))
    # The two new singles' samples are vote:2's agent 0 on those items (round 0 is shared).
    assert run.complete and run.resumed == 3 and len(model.requests) == 5 * 2


def test_failed_units_are_reported_not_recorded_and_retried_on_resume(tmp_path: Path) -> None:
    out = tmp_path / "run"
    inner = oracle(right)

    def flaky(request: ModelRequest) -> str:
        if request.metadata["item"] == "arithmetic-1":
            raise ModelError("backend exploded", model="test")
        return inner.fn(request)  # type: ignore[return-value]

    config = BenchConfig(task="arithmetic", methods=["single", "vote:2"], n=3)
    run = asyncio.run(run_bench(config, model=FunctionModel(flaky), out=out, retry_pause=0))
    assert not run.complete
    assert {(i, m) for i, m, _ in run.failures} == {("arithmetic-1", "single"), ("arithmetic-1", "vote:2")}
    assert len(_lines(out / RESULTS_FILE)) == 4
    run = asyncio.run(run_bench(config, model=oracle(right), out=out, resume=True))
    assert run.complete and len(_lines(out / RESULTS_FILE)) == 6


def test_max_errors_stops_the_run(tmp_path: Path) -> None:
    def dead(request: ModelRequest) -> str:
        raise ModelError("connection refused", model="test")

    model = FunctionModel(dead)
    config = BenchConfig(task="arithmetic", methods=["single"], n=50, concurrency=1, max_errors=3)
    run = asyncio.run(run_bench(config, model=model, out=tmp_path / "run", retry_pause=0))
    assert run.stopped and len(run.failures) == 3 and len(model.requests) == 3  # no retry pass: dead


def test_transient_faults_are_retried_within_the_invocation(tmp_path: Path) -> None:
    inner = oracle(right)
    seen: set[tuple[object, object]] = set()

    def first_call_fails(request: ModelRequest) -> str:
        key = (request.metadata["item"], request.metadata["method"])
        if key not in seen and request.metadata["item"] in ("arithmetic-1", "arithmetic-4"):
            seen.add(key)
            raise ModelError("HTTP 503", model="test")
        return inner.fn(request)  # type: ignore[return-value]

    config = BenchConfig(task="arithmetic", methods=["single", "vote:2"], n=6)
    run = asyncio.run(
        run_bench(config, model=FunctionModel(first_call_fails), out=tmp_path / "r", retry_pause=0)
    )
    assert run.complete and not run.failures and run.retried == 4
    assert len(_lines(tmp_path / "r" / RESULTS_FILE)) == 12


def test_retries_are_bounded(tmp_path: Path) -> None:
    inner = oracle(right)

    def one_item_dead(request: ModelRequest) -> str:
        if request.metadata["item"] == "arithmetic-2":
            raise ModelError("HTTP 500", model="test")
        return inner.fn(request)  # type: ignore[return-value]

    model = FunctionModel(one_item_dead)
    config = BenchConfig(task="arithmetic", methods=["single"], n=4)
    run = asyncio.run(run_bench(config, model=model, out=tmp_path / "r", unit_retries=2, retry_pause=0))
    assert [f[:2] for f in run.failures] == [("arithmetic-2", "single")] and run.retried == 2
    assert sum(r.metadata["item"] == "arithmetic-2" for r in model.requests) == 3


def test_a_second_writer_on_the_same_out_is_refused(tmp_path: Path) -> None:
    import fcntl

    out = tmp_path / "r"
    out.mkdir()
    with (out / ".lock").open("a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("4242\n")
        held.flush()
        config = BenchConfig(task="arithmetic", methods=["single"], n=2)
        with pytest.raises(UsageError, match=r"another moot bench \(pid 4242\) is writing to"):
            asyncio.run(run_bench(config, model=oracle(right), out=out))
    assert not (out / RESULTS_FILE).exists() and not (out / "run.json").exists()
    run = asyncio.run(run_bench(config, model=oracle(right), out=out))  # released: runs, and cleans up
    assert run.complete and not (out / ".lock").exists()


def test_timeout_bounds_the_invocation_and_keeps_what_finished(tmp_path: Path) -> None:
    import time

    config = BenchConfig(task="arithmetic", methods=["single"], n=40, concurrency=2)
    started = time.perf_counter()
    run = asyncio.run(run_bench(config, model=oracle(right, delay=0.05), out=tmp_path / "r", timeout_s=0.4))
    assert time.perf_counter() - started < 2.0
    assert run.timed_out and not run.complete and 0 < len(run.records) < 40
    assert len(_lines(tmp_path / "r" / RESULTS_FILE)) == len(run.records)
    rest = asyncio.run(run_bench(config, model=oracle(right), out=tmp_path / "r", resume=True))
    assert rest.complete and not rest.timed_out


def test_usage_errors_abort_the_run(tmp_path: Path) -> None:
    def blocked(request: ModelRequest) -> str:
        raise UsageError("no API key")

    config = BenchConfig(task="arithmetic", methods=["single"], n=5)
    with pytest.raises(UsageError, match="no API key"):
        asyncio.run(run_bench(config, model=FunctionModel(blocked), out=tmp_path / "run"))


def test_a_damaged_line_in_the_middle_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / RESULTS_FILE
    path.write_text('{"broken\n{"also": 1}\n', encoding="utf-8")
    with pytest.raises(UsageError, match=":1:"):
        load_records(path)


def test_an_out_that_is_a_file_is_a_usage_error(tmp_path: Path) -> None:
    blocker = tmp_path / "taken"
    blocker.write_text("not a directory", encoding="utf-8")
    config = BenchConfig(task="arithmetic", methods=["single"], n=1)
    with pytest.raises(UsageError, match="cannot use --out .*taken: File exists"):
        asyncio.run(run_bench(config, model=oracle(right), out=blocker))
    with pytest.raises(UsageError, match="cannot use --out"):
        asyncio.run(run_bench(config, model=oracle(right), out=blocker / "sub"))
