"""Replay: a recorded debate re-run, re-decided or continued live from its own record, with no request."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from fault_server import FaultServer, varied
from moot import Debate, models
from moot.cli import main
from moot.errors import ReplayMissingError, UsageError
from moot.models.openai import OpenAIModel
from moot.models.testing import ReplayModel, SchemaModel
from moot.runs import RunStore
from moot.transcript import DebateResult

TOPIC = "Remote work makes teams more productive."
THREE_ROUNDS = {"rounds": 3, "early_stop": {"rule": "none"}}


def _adversarial(model: Any, **overrides: Any) -> DebateResult:
    """The recorded debate (3 rounds, no early stop, unless ``overrides`` say otherwise) on ``model``."""
    return Debate("adversarial", model=model, overrides=THREE_ROUNDS | overrides).run_sync(TOPIC)


@pytest.fixture
def recorded(tmp_path: Path) -> Any:
    """An adversarial run (3 rounds, no early stop) recorded against a real local server."""
    with FaultServer(varied) as server:
        model = OpenAIModel("m", base_url=server.url, api_key="k")
        store = RunStore(tmp_path / "runs.db")
        debate = Debate("adversarial", model=model, store=store, overrides=THREE_ROUNDS)
        result = debate.run_sync(TOPIC)
        run_id = store.list()[0].id
        yield server, store, run_id, result, model


@pytest.mark.integration
def test_replay_sends_no_request_and_gives_the_same_result(recorded: Any) -> None:
    server, store, run_id, original, _ = recorded
    served = server.requests
    again = _adversarial(ReplayModel.from_run(store, run_id))
    assert server.requests == served
    assert again.final_answer == original.final_answer
    assert again.decision == original.decision
    assert again.usage.calls == 0 and again.usage.cached == original.usage.calls
    recorded_models = {f"replay:{t.model}" for t in original.turns(include_judge=True)}
    assert {t.model for t in again.turns(include_judge=True)} == recorded_models == {"replay:openai:fake"}


@pytest.mark.integration
def test_another_decision_rule_is_computed_from_the_recorded_turns(recorded: Any) -> None:
    server, store, run_id, original, _ = recorded
    served = server.requests
    again = _adversarial(ReplayModel.from_run(store, run_id), aggregation="evidence_based")
    assert server.requests == served
    assert again.decision is not None and again.decision.strategy == "evidence_based"
    assert [t.content for t in again.turns()] == [t.content for t in original.turns()]


@pytest.mark.integration
def test_a_reply_the_record_does_not_hold_is_an_error_naming_it(recorded: Any) -> None:
    server, store, run_id, _, _ = recorded
    served = server.requests
    four = _adversarial(ReplayModel.from_run(store, run_id), rounds=4)
    assert server.requests == served
    failed = [t for t in four.turns(include_judge=True) if not t.ok]
    assert failed and failed[0].round == 4
    assert "no reply for" in (failed[0].error or "") and "round 4" in (failed[0].error or "")
    assert failed[0].error_kind == ReplayMissingError.__name__
    assert four.failed_turns == 3  # the round the record never had; rounds 1-3 replayed


@pytest.mark.integration
def test_replay_until_a_round_then_live(recorded: Any) -> None:
    server, store, run_id, original, model = recorded
    served = server.requests
    live = SchemaModel(name="test:other")
    replay = ReplayModel.from_run(store, run_id, live=live, until_round=1)
    forked = _adversarial(replay)
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


def _cli_run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code = main(argv)
    captured = capsys.readouterr()
    assert captured.out, captured.err
    return code, json.loads(captured.out)


@pytest.mark.integration
def test_moot_run_from_replay_and_replay_until(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "runs.db"
    with FaultServer(varied) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        try:
            base = ["--store", str(store), "--json"]
            no_stop = tmp_path / "no_stop.yaml"
            no_stop.write_text("early_stop: {rule: none}\n")
            code, first = _cli_run(
                [
                    "run",
                    TOPIC,
                    "--protocol",
                    "adversarial",
                    "--config",
                    str(no_stop),
                    "--rounds",
                    "3",
                    "--model",
                    "openai:m",
                    *base,
                ],
                capsys,
            )
            with RunStore(store) as opened:
                run_id = opened.list()[0].id
            served = server.requests
            # --replay: 0 requests, the same answer; the new run names its source.
            code, again = _cli_run(["run", "--from", run_id, "--replay", *base], capsys)
            assert server.requests == served
            assert again["final_answer"] == first["final_answer"]
            assert again["usage"]["calls"] == 0 and again["usage"]["cached"] == first["usage"]["calls"]
            # Another decision rule on the recorded turns: still 0 requests.
            rule = tmp_path / "rule.yaml"
            rule.write_text("aggregation: evidence_based\nearly_stop: {rule: none}\n")
            code, redecided = _cli_run(
                [
                    "run",
                    "--from",
                    run_id,
                    "--replay",
                    "--protocol",
                    "adversarial",
                    "--rounds",
                    "3",
                    "--config",
                    str(rule),
                    *base,
                ],
                capsys,
            )
            assert server.requests == served
            assert redecided["decision"]["strategy"] == "evidence_based"
            # --replay-until 1 with another model for the opponent: round 1 replayed, later rounds live.
            code, forked = _cli_run(
                ["run", "--from", run_id, "--replay-until", "1", "--role-model", "opponent=test", *base],
                capsys,
            )
            live_requests = server.requests - served
            by_round = {r["number"]: {t["speaker"]: t["model"] for t in r["turns"]} for r in forked["rounds"]}
            assert set(by_round[1].values()) == {"replay:openai:fake"}
            assert by_round[2]["opponent"] == "test:schema" and by_round[2]["proponent"] == "openai:fake"
            # Live: the proponent and the moderator at the server, the opponent at the test model.
            assert live_requests == 4
            assert forked["usage"]["calls"] == live_requests + 2
            assert forked["usage"]["cached"] == 3  # round 1: proponent, opponent, moderator
        finally:
            models._CACHE.pop("openai:m", None)
    with RunStore(store) as opened:
        rows = {r.id: r for r in opened.list()}
        replays = [opened.get(i).config.get("replay") for i in rows]
    assert {"from_run": run_id, "until_round": None} in replays
    assert {"from_run": run_id, "until_round": 1} in replays
    assert main(["run", TOPIC, "--replay", "--model", "test"]) == 2
    assert "give --from RUN_ID" in capsys.readouterr().err


RECORDED = Path(__file__).parent / "data" / "recorded_adversarial_local.json"
"""A real ``moot run ... --protocol adversarial --json`` on the embedded model (SmolLM2), as recorded."""


def test_a_recorded_real_debate_is_a_regression_test_with_no_server_or_model() -> None:
    # Not an integration test: real model requests are blocked here, and none is needed.
    recorded = DebateResult.model_validate_json(RECORDED.read_text())
    replay = ReplayModel.from_result(recorded)
    result = Debate("adversarial", model=replay).run_sync(recorded.topic)
    assert result.final_answer == recorded.final_answer == "OPPOSE"
    assert result.decision == recorded.decision
    assert [t.content for t in result.turns(include_judge=True)] == [
        t.content for t in recorded.turns(include_judge=True)
    ]
    assert result.usage.calls == 0 and result.usage.cached == recorded.usage.calls == 6


@pytest.mark.integration
def test_a_recorded_bench_replays_with_no_request_and_names_what_it_never_recorded(tmp_path: Path) -> None:
    from moot.bench.runner import BenchConfig, run_bench

    def bench(model: Any, methods: list[str], out: str) -> Any:
        config = BenchConfig(task="arithmetic", methods=methods, model="openai:m", n=6, temperature=0.7)
        return asyncio.run(run_bench(config, model=model, out=tmp_path / out, unit_retries=0))

    def answers(run: Any) -> dict[tuple[str, str], Any]:
        return {
            (r.item_id, r.method): (r.final, [[a.text for a in rnd] for rnd in r.rounds]) for r in run.records
        }

    with FaultServer(varied) as server:
        live = OpenAIModel("m", base_url=server.url, api_key="k")
        recorded = bench(live, ["single", "vote:3", "society:3:2"], "live")
        asyncio.run(live.aclose())
        served = server.requests
        replayed = bench(
            ReplayModel.from_bench(recorded.records), ["single", "vote:3", "society:3:2"], "again"
        )
        # Another method list: vote:2 is made of recorded round-0 samples; vote:5 needs two never made.
        other = bench(ReplayModel.from_bench(recorded.records), ["vote:2", "vote:5"], "other")
    assert server.requests == served
    assert answers(replayed) == answers(recorded) and len(replayed.records) == 18
    assert {r.method for r in other.records} == {"vote:2"} and len(other.records) == 6
    assert {method for _, method, _ in other.failures} == {"vote:5"}
    assert all(
        "no reply for agent3" in error or "no reply for agent4" in error for *_, error in other.failures
    )


@pytest.mark.integration
def test_moot_bench_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with FaultServer(varied) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        common = ["--task", "arithmetic", "--n", "6", "--temperature", "0.7", "--no-plots"]
        try:
            first = tmp_path / "first"
            argv = ["bench", *common, "--methods", "single,vote:3,society:3:2", "--model", "openai:m"]
            assert main([*argv, "--out", str(first)]) == 0
            served = server.requests
            again = tmp_path / "again"
            assert main(["bench", "--replay", str(first), "--out", str(again), "--no-plots"]) == 0
            more = tmp_path / "more"
            code = main(
                [
                    "bench",
                    "--replay",
                    str(first),
                    "--methods",
                    "vote:2,vote:5",
                    "--out",
                    str(more),
                    "--no-plots",
                ]
            )
            said = capsys.readouterr()
        finally:
            models._CACHE.pop("openai:m", None)
    assert server.requests == served
    assert code == 1  # vote:5's two unrecorded samples fail its units, named
    assert "6 item/method units missing" in said.out + said.err  # the library test checks the naming

    def rows(path: Path) -> list[tuple[str, str, Any]]:
        data = [json.loads(line) for line in (path / "results.jsonl").read_text().splitlines()]
        return sorted((r["item_id"], r["method"], r["final"]) for r in data)

    assert rows(again) == rows(first)
    assert {m for _, m, _ in rows(more)} == {"vote:2"}
    assert main(["bench", "--replay", str(first), "--out", str(first), "--no-plots"]) == 2
    assert "recorded run's own folder" in capsys.readouterr().err
