"""``moot bench`` lands its units in the store, and ``--resume DIR|RUN_ID`` continues a recorded run."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from moot.app.records import bench_records
from moot.bench.records import ItemRecord
from moot.cli import main
from moot.errors import ModelHTTPError
from moot.models import FunctionModel, ModelRequest
from moot.runs import RunStore, load_result

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from bench_helpers import oracle  # noqa: E402


def _store() -> RunStore:
    return RunStore(os.environ["MOOT_STORE"])


def _flaky(broken: set[str]) -> FunctionModel:
    """The oracle, except that calls on items in ``broken`` fail (a 400 is not retried)."""
    good = oracle(lambda i, a, r: "right" if (i + a + r) % 3 else "wrong")

    async def fn(request: ModelRequest) -> object:
        if str(request.metadata["item"]) in broken:
            raise ModelHTTPError(400, "bad request", model="flaky")
        return (await good.request(request)).text

    return FunctionModel(fn, name="benchstore:flaky")


ARGV = ["bench", "--methods", "single,society:3:2", "--n", "4", "--seed", "3", "--no-plots"]


def test_bench_units_land_in_the_store_and_resume_by_run_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_provider: Callable[..., None]
) -> None:
    broken = {"arithmetic-1"}
    fake_provider("benchstore", lambda rest: _flaky(broken))
    out = tmp_path / "out"
    assert main([*ARGV, "--model", "benchstore:x", "--out", str(out)]) == 1  # one item fails: incomplete
    store = _store()
    (run,) = store.list(kind="bench")
    assert run.status == "failed" and "units missing" in (run.error or "")
    assert run.config["out"] == str(out.resolve()) and run.config["methods"] == ["single", "society:3:2"]
    assert run.summary["units"] == 6 and run.summary["expected_units"] == 8
    records = bench_records(store, run.id)
    assert len(records) == 6 and all(isinstance(r, ItemRecord) for r in records)
    assert {e.kind for e in store.events(run.id)} == {"bench_started", "unit_failed"}

    broken.clear()
    capsys.readouterr()
    assert main(["bench", "--resume", run.id[:8], "--no-plots"]) == 0
    (again,) = store.list(kind="bench")  # the same run, continued
    assert again.id == run.id and again.status == "complete" and again.error is None
    assert again.summary["units"] == 8 and set(again.summary["accuracy"]) == {"single", "society:3:2"}
    assert again.score == max(again.summary["accuracy"].values())
    if importlib.util.find_spec("pandas") is not None:  # the pandas extra
        from moot.app.records import units_frame

        frame = units_frame(store, run.id)
        assert len(frame) == 8 and set(frame["method"]) == {"single", "society:3:2"}
    units = load_result(store, run.id)
    assert sorted((u.item_id, u.method) for u in units) == sorted(
        (r.item_id, r.method) for r in json_lines(out / "results.jsonl")
    )


def json_lines(path: Path) -> list[ItemRecord]:
    return [ItemRecord.model_validate(json.loads(line)) for line in path.read_text().splitlines()]


def test_resume_takes_the_record_and_refuses_contradictions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_provider: Callable[..., None]
) -> None:
    fake_provider("benchstore2", lambda rest: _flaky(set()))
    out = tmp_path / "out"
    assert main([*ARGV, "--model", "benchstore2:x", "--out", str(out)]) == 0
    run_id = _store().list()[0].id
    capsys.readouterr()
    for extra, needle in [
        (["--seed", "5"], "--seed 5 contradicts the recorded run (seed 3)"),
        (["--methods", "single"], "--methods ['single'] contradicts the recorded run"),
        (["--model", "benchstore2:y"], "(model 'benchstore2:x')"),
        (["--n", "2"], "--n 2 contradicts the recorded run (n 4)"),
        (["--out", str(tmp_path / "other")], "contradicts the recorded run (out"),
    ]:
        assert main(["bench", "--resume", run_id, "--no-plots", *extra]) == 2
        assert needle in capsys.readouterr().err
    # No other argument: the recorded methods, not the defaults, and nothing left to run.
    assert main(["bench", "--resume", str(out), "--no-plots"]) == 0
    meta = json.loads((out / "run.json").read_text())
    assert meta["methods"] == ["single", "society:3:2"] and meta["n"] == 4 and meta["seed"] == 3
    assert len(_store().list(kind="bench")) == 1  # the folder's run in the store is continued
    # --n may grow the run; the same values are fine.
    assert main(["bench", "--resume", run_id, "--n", "5", "--seed", "3", "--no-plots"]) == 0
    assert _store().get(run_id).summary["items"] == 5
    assert main(["bench", "--resume", str(tmp_path / "nothing"), "--no-plots"]) == 2
    assert "neither a bench output folder nor a run id" in capsys.readouterr().err
