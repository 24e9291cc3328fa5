"""Every CLI command lands in the store (MOOT_STORE points at a private file, see conftest)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from moot import Debate
from moot.absa import FinalResult
from moot.arbitration import ArbitrationResult
from moot.cli import main
from moot.models import ModelRequest
from moot.models.testing import FunctionModel
from moot.runs import RunStore, load_result
from moot.transcript import DebateResult


def _reply(req: ModelRequest) -> dict[str, object]:
    if req.metadata["phase"] == "judge":
        return {"final_answer": "synthesised <b>", "citations": []}
    return {"answer": f"{req.metadata['speaker']} r{req.metadata['round']}", "confidence": 0.6}


@pytest.fixture(autouse=True)
def _fake(fake_provider: Callable[..., None]) -> None:
    fake_provider("recfake", lambda rest: FunctionModel(_reply, name=f"recfake:{rest}"))


def _store() -> RunStore:
    return RunStore(os.environ["MOOT_STORE"])


def test_moot_run_is_recorded_and_loads_back(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "Why?", "--model", "recfake:x", "--rounds", "1", "--json"]) == 0
    printed = DebateResult.model_validate_json(capsys.readouterr().out)
    store = _store()
    (run,) = store.list()
    assert (run.kind, run.status, run.title, run.model) == ("run", "complete", "Why?", "recfake:x")
    assert run.argv and run.usage.calls == printed.usage.calls and run.wall_s is not None
    assert (
        run.config["protocol"]["rounds"] == 1 and run.config["models"]["affirmative"]["spec"] == "recfake:x"
    )
    assert load_result(store, run.id) == printed
    assert [e.kind for e in store.events(run.id)][-1] == "debate_completed"


def test_run_from_reruns_the_recorded_configuration(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "Is it?", "--model", "recfake:x", "--rounds", "1", "--json"]) == 0
    first = DebateResult.model_validate_json(capsys.readouterr().out)
    run_id = _store().list()[0].id
    assert main(["run", "--from", run_id[:8], "--json"]) == 0
    again = DebateResult.model_validate_json(capsys.readouterr().out)
    assert again.topic == "Is it?" and len(again.rounds) == 1 and again.final_answer == first.final_answer
    newest = _store().list()[0]
    assert newest.id != run_id and newest.config["from_run"] == run_id[:8]
    assert main(["run", "Is it?", "--model", "recfake:x", "--rounds", "1"]) == 0  # human output
    shown = _store().list()[0].id[:8]
    assert f"recorded as run {shown}: moot runs show {shown}" in capsys.readouterr().out
    assert main(["run", "--from", "ffffffff"]) == 2
    assert "no run 'ffffffff'" in capsys.readouterr().err
    assert main(["run"]) == 2
    assert "give a TOPIC" in capsys.readouterr().err


def test_no_store_and_store_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "Q", "--model", "recfake:x", "--rounds", "1", "--no-store", "--json"]) == 0
    assert not Path(os.environ["MOOT_STORE"]).exists() or _store().list() == []
    other = tmp_path / "elsewhere.db"
    assert main(["run", "Q", "--model", "recfake:x", "--rounds", "1", "--store", str(other), "--json"]) == 0
    assert len(RunStore(other).list()) == 1


def test_unreachable_endpoint_is_recorded_as_failed_by_the_library_not_the_cli(
    capsys: pytest.CaptureFixture[str], fake_provider: Callable[..., None]
) -> None:
    from moot.errors import ModelConnectionError

    def down(req: ModelRequest) -> object:
        raise ModelConnectionError("connection refused")

    fake_provider("downfake", lambda rest: FunctionModel(down, name="downfake:x"))
    # The library records the run as failed, with its fallback result...
    Debate("answer", model="downfake:x", store=True, overrides={"rounds": 1}).run_sync("Q")
    (run,) = _store().list()
    assert run.status == "failed" and "cannot reach" in (run.error or "")
    assert isinstance(load_result(_store(), run.id), DebateResult)  # the fallback result is kept
    # ...the CLI calls it a usage error (exit 2, issue 37), which leaves nothing written.
    assert main(["run", "Q", "--model", "downfake:x", "--rounds", "1"]) == 2
    assert [r.id for r in _store().list()] == [run.id]


def test_absa_single_and_batch_are_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_provider: Callable[..., None]
) -> None:
    from absa.test_absa_cli import brain

    fake_provider("recabsa", lambda rest: FunctionModel(brain, name=f"recabsa:{rest}"))
    assert main(["absa", "The battery life is terrible.", "--model", "recabsa:x", "--json"]) == 0
    single = FinalResult.model_validate_json(capsys.readouterr().out)
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text('{"id": "a", "sentence": "The battery life is terrible."}\n"Nice place."\n')
    assert main(["absa", "--input", str(inp), "--output", str(out), "--model", "recabsa:x"]) == 0
    store = _store()
    batch, one = store.list()
    assert one.kind == batch.kind == "absa" and one.status == "complete"
    assert load_result(store, one.id) == single
    results = load_result(store, batch.id)
    assert [r.sentence for r in results] == ["The battery life is terrible.", "Nice place."]
    assert [i.item for i in store.iter_items(batch.id)] == ["a", "2"]
    endpoints = batch.summary.pop("endpoints")  # the model's limit range and 429s, as a bench's
    assert [e["endpoint"] for e in endpoints] == ["recabsa:x"] and endpoints[0]["throttled"] == 0
    assert batch.summary == {"sentences": 2, "failed": 0} and batch.usage.calls > 0


def test_absa_eval_is_recorded_with_gold_per_item(
    capsys: pytest.CaptureFixture[str], fake_provider: Callable[..., None]
) -> None:
    from absa.test_dataset_eval import gold_brain

    fake_provider("receval", lambda rest: FunctionModel(gold_brain, name=f"receval:{rest}"))
    data = Path(__file__).resolve().parents[2] / "src/moot/data/absa_sentences.jsonl"
    argv = ["absa-eval", str(data), "--model", "receval:x", "--limit", "2", "--no-ablations", "--json"]
    assert main(argv) == 0
    scores = json.loads(capsys.readouterr().out)
    store = _store()
    (run,) = store.list(kind="absa-eval")
    assert run.status == "complete" and run.score == max(s["f1"] for s in scores.values())
    items = list(store.iter_items(run.id))
    assert len(items) == 2 and all("gold" in i.data and i.correct is not None for i in items)
    assert set(load_result(store, run.id)) == set(scores)


def test_arbitrate_is_recorded_with_progress_events(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_provider: Callable[..., None]
) -> None:
    from moot.models.testing import ScriptedModel
    from test_arbitration import QATAR, ruling

    fake_provider("recarb", lambda rest: ScriptedModel([ruling("agent2_correct", "use_agent2", 0.7)]))
    path = tmp_path / "reports.json"
    path.write_text(json.dumps({"reports": QATAR}))
    assert main(["arbitrate", str(path), "--model", "recarb:x", "--json"]) == 0
    printed = ArbitrationResult.model_validate_json(capsys.readouterr().out)
    store = _store()
    (run,) = store.list(kind="arbitrate")
    assert run.status == "complete" and load_result(store, run.id) == printed
    assert [e.data["status"] for e in store.events(run.id)][-1] == "complete"
    assert run.config["reports"][0]["agent"] == QATAR[0]["agent"]
