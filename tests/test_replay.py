"""Replay: a recorded debate re-run, re-decided or continued live from its own record, with no request."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from fault_server import Fate, FaultServer, schema_reply

from moot import Debate
from moot.errors import ReplayMissingError, UsageError
from moot.models.openai import OpenAIModel
from moot.models.testing import ReplayModel, SchemaModel
from moot.runs import RunStore

pytestmark = pytest.mark.integration

TOPIC = "Remote work makes teams more productive."


def _varied(n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
    reply = json.loads(schema_reply(body))
    rng = random.Random(n)
    for key, value in reply.items():
        if isinstance(value, float):
            reply[key] = round(rng.random(), 3)
    if "leaning" in reply:
        reply["leaning"] = rng.choice(["support", "oppose"])
    return Fate(content=json.dumps(reply))


@pytest.fixture
def recorded(tmp_path: Path) -> Any:
    """An adversarial run (3 rounds, no early stop) recorded against a real local server."""
    with FaultServer(_varied) as server:
        model = OpenAIModel("m", base_url=server.url, api_key="k")
        store = RunStore(tmp_path / "runs.db")
        debate = Debate(
            "adversarial", model=model, store=store, overrides={"rounds": 3, "early_stop": {"rule": "none"}}
        )
        result = debate.run_sync(TOPIC)
        run_id = store.list()[0].id
        yield server, store, run_id, result, model


def test_replay_sends_no_request_and_gives_the_same_result(recorded: Any) -> None:
    server, store, run_id, original, _ = recorded
    served = server.requests
    replay = ReplayModel.from_run(store, run_id)
    again = Debate(
        "adversarial", model=replay, overrides={"rounds": 3, "early_stop": {"rule": "none"}}
    ).run_sync(TOPIC)
    assert server.requests == served
    assert again.final_answer == original.final_answer
    assert again.decision == original.decision
    assert again.usage.calls == 0 and again.usage.cached == original.usage.calls
    recorded_models = {f"replay:{t.model}" for t in original.turns(include_judge=True)}
    assert {t.model for t in again.turns(include_judge=True)} == recorded_models == {"replay:openai:fake"}


def test_another_decision_rule_is_computed_from_the_recorded_turns(recorded: Any) -> None:
    server, store, run_id, original, _ = recorded
    served = server.requests
    overrides = {"rounds": 3, "early_stop": {"rule": "none"}, "aggregation": "evidence_based"}
    again = Debate("adversarial", model=ReplayModel.from_run(store, run_id), overrides=overrides).run_sync(
        TOPIC
    )
    assert server.requests == served
    assert again.decision is not None and again.decision.strategy == "evidence_based"
    assert [t.content for t in again.turns()] == [t.content for t in original.turns()]


def test_a_reply_the_record_does_not_hold_is_an_error_naming_it(recorded: Any) -> None:
    server, store, run_id, _, _ = recorded
    served = server.requests
    replay = ReplayModel.from_run(store, run_id)
    four = Debate(
        "adversarial", model=replay, overrides={"rounds": 4, "early_stop": {"rule": "none"}}
    ).run_sync(TOPIC)
    assert server.requests == served
    failed = [t for t in four.turns(include_judge=True) if not t.ok]
    assert failed and failed[0].round == 4
    assert "no reply for" in (failed[0].error or "") and "round 4" in (failed[0].error or "")
    assert failed[0].error_kind == ReplayMissingError.__name__
    assert four.failed_turns == 3  # the round the record never had; rounds 1-3 replayed


def test_replay_until_a_round_then_live(recorded: Any) -> None:
    server, store, run_id, original, model = recorded
    served = server.requests
    live = SchemaModel(name="test:other")
    replay = ReplayModel.from_run(store, run_id, live=live, until_round=1)
    forked = Debate(
        "adversarial", model=replay, overrides={"rounds": 3, "early_stop": {"rule": "none"}}
    ).run_sync(TOPIC)
    assert server.requests == served  # the recorded server is never asked again
    by_round = {r.number: [t.model for t in r.turns] for r in forked.rounds}
    assert set(by_round[1]) == {"replay:openai:fake"}  # the recorded server's name for its model
    assert set(by_round[2]) == set(by_round[3]) == {"test:other"}
    assert [t.content for t in forked.rounds[0].turns] == [t.content for t in original.rounds[0].turns]
    assert forked.usage.cached == replay.replayed and forked.usage.calls == len(live.requests) > 0


def test_replay_refuses_what_it_cannot_replay(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="needs a live model"):
        ReplayModel([], until_round=1)
    with pytest.raises(UsageError, match="not a debate result"):
        ReplayModel.from_result({"items": []})
