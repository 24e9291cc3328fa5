"""An ABSA run replayed from its record: no request, the same result; what it lacks is named."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from moot.absa import FinalResult, run_absa, run_absa_batch
from moot.errors import UsageError
from moot.models.testing import ReplayModel, ScriptedModel
from moot.runs import RunStore

from .scripts import SENTENCE, persona_replies

OTHER = "The screen is dim but the battery lasts all day."


def _replies(times: int = 1) -> dict[str, list[Any]]:
    replies = {k: v * times for k, v in persona_replies().items()}
    replies["ate"] = ["not JSON at all", *replies["ate"]]  # the first answer is invalid: one repair
    return replies


def _same(again: FinalResult, first: FinalResult) -> None:
    """The same analysis: every output of every stage, the debate's turns, the decision."""
    for field in (
        "label",
        "confidence",
        "aspects",
        "stage1",
        "stage2",
        "review_context",
        "moderator",
        "errors",
    ):
        assert getattr(again, field) == getattr(first, field), field
    assert again.debate is not None and first.debate is not None
    assert [t.content for t in again.debate.turns(include_judge=True)] == [
        t.content for t in first.debate.turns(include_judge=True)
    ]
    assert [s.name for s in again.trace] == [s.name for s in first.trace]


def test_a_recorded_absa_run_replays_with_no_model(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.db")
    first = asyncio.run(run_absa(SENTENCE, model=ScriptedModel(_replies()), store=store))
    run_id = store.list()[0].id
    replay = ReplayModel.from_run(store, run_id)
    assert replay.name == "replay:test:scripted"
    again = asyncio.run(run_absa(SENTENCE, model=replay))
    _same(again, first)
    # Every request was answered from the record (the invalid first answer and its repair too).
    assert len(replay.requests) == replay.replayed == first.usage.calls and not replay.missing
    assert again.usage.calls == 0 and again.usage.cached == first.usage.calls
    assert again.stage_requests is not None
    assert [(r.stage, r.attempt, r.reply) for r in again.stage_requests] == [
        (r.stage, r.attempt, r.reply) for r in first.stage_requests or []
    ]
    store.close()


def test_a_recorded_batch_replays_each_sentence_its_own_replies(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.db")
    replies = _replies(2)
    replies["atsa"][1] = {
        "aspect_sentiments": [{"aspect": "screen", "polarity": "negative", "confidence": 0.8}]
    }
    ids = ["s1", "s2"]
    first = asyncio.run(run_absa_batch([SENTENCE, OTHER], model=ScriptedModel(replies), store=store, ids=ids))
    replay = ReplayModel.from_run(store, store.list()[0].id)
    # Two at a time, so the sentences' requests interleave: each still gets its own replies.
    again = asyncio.run(run_absa_batch([SENTENCE, OTHER], model=replay, ids=ids, concurrency=2))
    for a, f in zip(again, first, strict=True):
        _same(a, f)
    assert replay.replayed == sum(r.usage.calls for r in first) and not replay.missing


def test_a_reply_the_record_never_held_names_the_stage_and_the_sentence(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.db")
    replies = {
        k: v for k, v in _replies().items() if k in ("ate", "atsa", "validator", "ate_review", "atsa_review")
    }
    asyncio.run(run_absa(SENTENCE, model=ScriptedModel(replies), config="abl_no_debate", store=store))
    replay = ReplayModel.from_run(store, store.list()[0].id)
    # The debate on: its turns were never recorded. They fail, named; nothing is sent instead.
    again = asyncio.run(run_absa(SENTENCE, model=replay, config="default"))
    assert again.failed and again.usage.calls == 0
    missing = {who["speaker"] for who in replay.missing}
    # Every speaking turn failed: the judge is not asked to rule on nothing (issue 32).
    assert missing == {"analyst", "critic", "empath"}
    assert again.debate is not None and (again.debate.fallback or "").startswith("no argument")
    assert all(who["sentence"] == SENTENCE for who in replay.missing)
    error = again.errors["debate:turn:analyst:r1"]
    assert "no reply for analyst" in error and SENTENCE[:40] in error
    # The stages it did record are replayed as recorded.
    assert again.stage1.aspects and again.stage2.errors == {}
    # In a batch the sentence's id is named too (here a record whose ATE requests were cut out).
    data = again.record_data()
    data["stage_requests"] = [r for r in data["stage_requests"] if r["stage"] != "ate"]
    batch = ReplayModel.from_absa({"7": data})
    (res,) = asyncio.run(run_absa_batch([SENTENCE], model=batch, ids=["7"], config="abl_no_debate"))
    assert "no reply for ate (round 0, absa, sentence 7 'The battery" in res.errors["ate"]
    assert batch.missing == [
        {"speaker": "ate", "round": 0, "phase": "absa", "item": "7", "sentence": SENTENCE}
    ]


def test_what_cannot_be_replayed_is_refused(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.db")
    first = asyncio.run(run_absa(SENTENCE, model=ScriptedModel(_replies()), store=store))
    data = first.model_dump(mode="json")  # --json output: it keeps no stage requests
    with pytest.raises(UsageError, match="keeps no stage requests"):
        ReplayModel.from_absa(data)
    with pytest.raises(UsageError, match="not an ABSA result of sentence 1"):
        ReplayModel.from_absa({"1": {"topic": "x"}})
    store.close()


RECORDED = Path(__file__).parents[1] / "data" / "recorded_absa_local.json"
"""A real ``moot absa "The pasta was great but the service was slow." --model local`` (the embedded
SmolLM2), its stored result as ``moot runs show --json`` gives it, stage requests included."""


def test_a_recorded_real_absa_run_is_a_regression_test_with_no_server_or_model() -> None:
    # Not an integration test: real model requests are blocked here, and none is needed.
    recorded = FinalResult.model_validate_json(RECORDED.read_text(encoding="utf-8"))
    replay = ReplayModel.from_absa(recorded)
    assert replay.name == "replay:local"
    again = asyncio.run(run_absa(recorded.sentence, model=replay))
    _same(again, recorded)
    assert again.label == recorded.label == "positive"
    assert again.usage.calls == 0 and again.usage.cached == recorded.usage.calls == 11
