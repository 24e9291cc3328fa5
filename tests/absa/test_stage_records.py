"""Each ABSA stage request is kept in the stored result: messages, reply, parsed output, cost."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from moot.absa import FinalResult, load_config, run_absa, run_absa_batch
from moot.models.testing import ScriptedModel
from moot.runs import RunStore

from .scripts import SENTENCE, persona_replies

STAGES = ["ate", "atsa", "validator", "ate_review", "atsa_review"]


def _replies() -> dict[str, list[Any]]:
    replies = persona_replies()
    replies["ate"] = ["not JSON at all", *replies["ate"]]  # the first answer is invalid: one repair
    return replies


def test_one_sentence_keeps_every_stage_request_in_its_stored_result(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.db")
    result = asyncio.run(run_absa(SENTENCE, model=ScriptedModel(_replies()), store=store))
    requests = result.stage_requests
    assert requests is not None
    assert [(r.stage, r.attempt) for r in requests] == [("ate", 0), ("ate", 1), *((s, 0) for s in STAGES[1:])]
    first, repair = requests[0], requests[1]
    assert first.error_kind == "invalid_output" and first.reply == "not JSON at all"
    assert first.error is not None and first.error.startswith("invalid output:") and first.parsed is None
    assert [m.role for m in first.messages] == ["system", "user"] and SENTENCE in first.messages[0].content
    # The repair sent the same messages, the invalid answer and the schema error.
    assert repair.messages[:2] == first.messages and repair.messages[2].content == "not JSON at all"
    assert repair.error_kind is None and repair.parsed is not None and repair.parsed["label"] == "mixed"
    config = load_config(None)
    for r in requests:
        assert r.model == "test:scripted" and r.output and r.usage.calls == 1 and r.latency_ms >= 0
        assert (r.temperature, r.max_tokens) == (config.temperature, config.max_tokens)
    # The default JSON (--json, a batch's output) is as it was; the store keeps the requests.
    assert "stage_requests" not in result.model_dump()
    stored = store.get(store.list()[0].id).result
    assert stored is not None
    assert [r["stage"] for r in stored["stage_requests"]] == ["ate", *STAGES]
    assert stored["stage_requests"][1]["parsed"] == repair.parsed
    assert stored["stage_requests"][0]["reply"] == "not JSON at all"
    # Read back, it is the same result.
    assert FinalResult.model_validate(stored) == result
    assert FinalResult.model_validate(stored).stage_requests == requests
    store.close()


def test_a_batch_keeps_each_sentences_stage_requests_in_its_unit(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.db")
    other = "The screen is dim but the battery lasts all day."
    replies = {k: v * 2 for k, v in persona_replies().items()}
    results = asyncio.run(
        run_absa_batch([SENTENCE, other], model=ScriptedModel(replies), store=store, ids=["a", "b"])
    )
    items = {i.item: i.data for i in store.iter_items(store.list()[0].id)}
    assert set(items) == {"a", "b"}
    for unit, res in zip("ab", results, strict=True):
        stored = items[unit]["result"]["stage_requests"]
        assert res.stage_requests is not None and len(stored) == len(res.stage_requests) >= 3
        assert [r["stage"] for r in stored] == [r.stage for r in res.stage_requests]
        assert stored[0]["stage"] == "ate" and stored[-1]["stage"] == "atsa_review"
        assert res.sentence in stored[0]["messages"][0]["content"]
    store.close()


def test_stored_stage_requests_are_redacted(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.db")
    sentence = "The docs at http://alice:hunter2@example.com/x?api_key=K9 are great."
    asyncio.run(run_absa(sentence, model=ScriptedModel(persona_replies()), store=store))
    stored = store.get(store.list()[0].id).result
    assert stored is not None
    text = str(stored["stage_requests"])
    assert "hunter2" not in text and "K9" not in text and "example.com" in text
    store.close()


def test_an_evaluation_keeps_each_sentence_runs_stage_requests_in_its_unit(tmp_path: Path) -> None:
    from moot.absa import evaluate, load_dataset
    from moot.models.testing import FunctionModel

    from .test_absa_cli import brain

    store = RunStore(tmp_path / "runs.db")
    items = load_dataset(limit=2)
    configs = {name: load_config(name) for name in ("default", "abl_no_debate")}
    seen: dict[tuple[str, str], FinalResult] = {}
    asyncio.run(
        evaluate(
            items,
            configs,
            model=FunctionModel(brain, name="evalfake"),
            store=store,
            on_result=lambda name, i, res: seen.__setitem__((items[i].id, name), res),
        )
    )
    run = store.list()[0]
    units = {(u.item, u.part): u.data for u in store.iter_items(run.id)}
    assert set(units) == set(seen) and len(units) == 4
    for key, res in seen.items():
        stored = units[key]["result"]["stage_requests"]
        assert res.stage_requests is not None and len(stored) == len(res.stage_requests) >= 3
        assert [r["stage"] for r in stored] == [r.stage for r in res.stage_requests]
        assert stored[0]["stage"] == "ate" and stored[-1]["stage"] == "atsa_review"
        assert res.sentence in stored[0]["messages"][0]["content"]
        assert FinalResult.model_validate(units[key]["result"]).stage_requests == res.stage_requests
    store.close()
    # The viewer's page of one evaluated sentence shows them, for each config.
    pytest.importorskip("fastapi", reason="moot view needs the view extra")
    from fastapi.testclient import TestClient

    from moot.view import create_app

    page = TestClient(create_app(str(tmp_path / "runs.db")), base_url="http://127.0.0.1:7575").get(
        f"/runs/{run.id}/items/{items[0].id}"
    )
    assert page.status_code == 200
    assert page.text.count('<details class="transcript stage-transcript" data-stage="ate"') == 2
    assert "The stage requests were not kept" not in page.text
