"""Issue 32: blind, shuffled and audited deciding steps, judge failover, no decision without an argument."""

from __future__ import annotations

import asyncio
import json
import random
import re
from pathlib import Path
from typing import Any

import pytest

from moot import Debate
from moot.models.base import ModelRequest, ModelResponse
from moot.models.testing import FunctionModel

ANSWER = re.compile(r"^- (.+?) \[turn, round 2\]: (.*)$", re.MULTILINE)


def _shown(request: ModelRequest) -> list[tuple[str, str]]:
    """(name shown, answer) of the candidates' last answers, in the order the judge was shown them."""
    return ANSWER.findall(request.messages[-1].content)


def _answer_debate(judge_pick: Any, *, good_first: list[bool], **options: Any) -> Debate:
    """The ``answer`` preset: one speaker gives the GOOD answer (which one: ``good_first``), the judge
    picks with ``judge_pick(shown) -> answer``."""
    state = {"item": -1}

    def fn(request: ModelRequest) -> Any:
        phase, speaker = request.metadata.get("phase"), request.metadata.get("speaker")
        if phase == "turn":
            item = int(request.messages[0].content.split("[TOPIC]\n")[1].split("\n")[0].split()[-1])
            good = good_first[item] == (speaker == "affirmative")
            return {"answer": f"GOOD {item}" if good else f"BAD {item}", "confidence": 0.5}
        return {"final_answer": judge_pick(_shown(request)), "confidence": 0.5}

    del state
    return Debate("answer", model=FunctionModel(fn), overrides={"timeout": 60}, **options)


async def _run_all(debate: Debate, n: int) -> list[Any]:
    return [await debate.run(f"question {i}") for i in range(n)]


def test_audit_measures_a_judge_that_picks_the_first_shown_30_percent_of_the_time() -> None:
    rng = random.Random(11)

    def pick(shown: list[tuple[str, str]]) -> str:
        if rng.random() < 0.3:
            return shown[0][1]
        return next(a for _, a in shown if a.startswith("GOOD"))

    good_first = [random.Random(i).random() < 0.5 for i in range(400)]
    debate = _answer_debate(pick, good_first=good_first, judge_audit=True)
    results = asyncio.run(_run_all(debate, 400))
    records = [r.verdict.judging for r in results]
    flips = [r.position_flip for r in records]
    assert None not in flips
    rate = sum(bool(f) for f in flips) / len(flips)
    # True rate: in the order showing the worse answer first, the judge takes it with p = 0.3.
    assert rate == pytest.approx(0.30, abs=0.05)
    audit = results[0].metrics["judge_audit"]
    assert audit["n"] == 1 and audit["extra_calls"] == 2  # reversed + blind, counted apart
    assert results[0].usage.calls == 5  # the method's cost: 4 speaker turns and the synthesis
    from moot.judging import audit_summary

    summary = audit_summary(records)
    low, high = summary["position_flip_ci95"]
    assert low <= 0.30 <= high and summary["n"] == 400


@pytest.mark.parametrize(("shuffle", "expected"), [(False, 0.65), (True, 0.50)])
def test_equal_candidates_first_persona_wins_065_unshuffled_050_shuffled(
    shuffle: bool, expected: float
) -> None:
    rng = random.Random(5)

    def pick(shown: list[tuple[str, str]]) -> str:
        if rng.random() < 0.3:
            return shown[0][1]
        return rng.choice(shown)[1]

    def fn(request: ModelRequest) -> Any:
        phase, speaker = request.metadata.get("phase"), request.metadata.get("speaker")
        if phase == "turn":
            return {"answer": f"answer of {speaker}", "confidence": 0.5}
        return {"final_answer": pick(_shown(request)), "confidence": 0.5}

    debate = Debate("answer", model=FunctionModel(fn), overrides={"timeout": 60}, judge_shuffle=shuffle)
    results = asyncio.run(_run_all(debate, 400))
    share = sum(r.final_answer == "answer of affirmative" for r in results) / len(results)
    assert share == pytest.approx(expected, abs=0.05)
    orders = {tuple(r.verdict.judging.order) for r in results}
    assert orders == (
        {("affirmative", "critical"), ("critical", "affirmative")}
        if shuffle
        else {("affirmative", "critical")}
    )
    assert all(r.verdict.judging.shuffled == shuffle for r in results)


def test_every_speaking_turn_failed_is_a_fallback_not_uncertain() -> None:
    # Issue 32 item 5: adversarial against a server answering unusable text decided "UNCERTAIN".
    debate = Debate("adversarial", model=FunctionModel(lambda r: "I cannot answer that."))
    result = debate.run_sync("Cats are better than dogs", initial_answer="kept")
    assert result.fallback is not None and result.fallback.startswith(
        "no argument: every speaking turn failed"
    )
    assert result.final_answer == "kept" and result.decision is None
    assert all(r.moderator is None for r in result.rounds)  # no moderator call over nothing
    assert len(result.rounds) == 2 and result.failed_turns == 4  # seed 002 goes on after a failed turn
    assert result.degraded


def test_every_speaking_turn_failed_in_a_rule_protocol_falls_back() -> None:
    proto = {
        "personas": {"a": {}, "b": {}},
        "order": ["a", "b"],
        "rounds": 1,
        "aggregation": "majority",
    }
    result = Debate(proto, model=FunctionModel(lambda r: "nope")).run_sync("2+2?")
    assert result.fallback is not None and "every speaking turn failed" in result.fallback
    assert result.decision is None


def _cut_judge(replies: list[ModelResponse]) -> tuple[Debate, list[ModelRequest]]:
    seen: list[ModelRequest] = []

    def fn(request: ModelRequest) -> Any:
        if request.metadata.get("phase") == "turn":
            return {"answer": "Sunlight scatters.", "confidence": 0.7}
        seen.append(request)
        return replies.pop(0)

    return Debate("answer", model=FunctionModel(fn), overrides={"timeout": 60}), seen


def test_a_decisive_field_cut_at_the_token_limit_is_repaired_with_room() -> None:
    cut = ModelResponse(text='{ "final_answer": "S', finish_reason="length")
    whole = ModelResponse(
        text=json.dumps({"final_answer": "Scattering.", "confidence": 0.9}), finish_reason="stop"
    )
    debate, seen = _cut_judge([cut, whole])
    result = debate.run_sync("Why is the sky blue?")
    assert result.final_answer == "Scattering." and result.fallback is None
    assert result.verdict is not None and result.verdict.repaired
    assert seen[1].max_tokens == 2 * (seen[0].max_tokens or 0)  # room to finish
    assert "cut off" in seen[1].messages[-1].content


def test_a_decisive_field_cut_twice_is_a_failed_turn_never_the_fragment() -> None:
    cut = ModelResponse(text='{ "final_answer": "S', finish_reason="length")
    debate, _ = _cut_judge([cut, cut])
    result = debate.run_sync("Why is the sky blue?", initial_answer="fallback answer")
    assert result.final_answer == "fallback answer"
    assert result.fallback is not None and "judge failed" in result.fallback
    assert result.verdict is not None and not result.verdict.ok
    assert "cut off at the token limit" in (result.verdict.error or "")


def _first_shown_judge(request: ModelRequest) -> Any:
    """Speakers answer their own name; the judge always takes the first-shown answer (position-bound)."""
    phase, speaker = request.metadata.get("phase"), request.metadata.get("speaker")
    if phase == "turn":
        return {"answer": f"answer of {speaker}", "confidence": 0.5}
    return {"final_answer": _shown(request)[0][1], "confidence": 0.5}


def test_the_audit_reaches_the_store_the_trace_and_the_summary(tmp_path: Path) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from moot.app.tracing import DebateTracer
    from moot.runs import RunStore, load_result

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = DebateTracer(provider.get_tracer("moot"), capture=False)
    store = tmp_path / "runs.db"
    debate = Debate("answer", model=FunctionModel(_first_shown_judge), store=store, judge_audit=True)
    result = debate.run_sync("Which?", on_event=tracer.on_event)
    judging = result.verdict.judging if result.verdict else None
    assert judging is not None and judging.position_flip is True and judging.first_slot is True
    assert judging.identity_flip is False and judging.extra_calls == 2
    with RunStore(store) as opened:
        (record,) = opened.list()
        stored = load_result(opened, record.id)
    assert record.summary["judge_audit"]["answer"]["position_flip_rate"] == 1.0
    assert stored.verdict.judging == judging
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "invoke_agent synthesizer"]
    attrs = dict(span.attributes or {})
    assert attrs["moot.judge.position_flip"] is True and attrs["moot.judge.order"] == (
        "affirmative",
        "critical",
    )
    assert attrs["moot.judge.audit_extra_calls"] == 2
    provider.shutdown()


def test_swap_robust_makes_a_position_bound_synthesis_a_fallback() -> None:
    debate = Debate("answer", model=FunctionModel(_first_shown_judge), judge_swap_robust=True)
    result = debate.run_sync("Which?", initial_answer="KEEP")
    assert result.fallback is not None and result.fallback.startswith("position-sensitive")
    assert result.final_answer == "KEEP" and result.metrics["undecided_reason"] == "position-sensitive"
    assert result.verdict is not None and result.verdict.judging is not None
    assert result.verdict.judging.position_sensitive
    assert result.usage.calls == 6  # the second order is part of a swap-robust decision's cost


def test_swap_robust_panel_winner_becomes_a_tie() -> None:
    def fn(request: ModelRequest) -> Any:
        if request.metadata.get("phase") == "turn":
            speaker = request.metadata.get("speaker")
            return {
                "speaker": str(speaker),
                "stance": "neutral",
                "planning": "p",
                "reflection": "r",
                "message": "m",
            }
        first = re.search(r"^- (\S+) \[turn", request.messages[-1].content, re.MULTILINE)
        assert first is not None
        return {"winner": first.group(1), "consensus": "c", "rationale": "r"}

    plain = Debate("panel", model=FunctionModel(fn), overrides={"rounds": 1}).run_sync("Is it good?")
    assert plain.verdict is not None and plain.verdict.get("winner") == "analyst"
    robust = Debate("panel", model=FunctionModel(fn), overrides={"rounds": 1}, judge_swap_robust=True)
    result = robust.run_sync("Is it good?")
    assert result.verdict is not None and result.verdict.get("winner") is None  # undecided: a tie
    assert result.fallback is None and result.final_answer == "c"
    assert result.metrics["undecided_reason"] == "position-sensitive"


def test_langgraph_node_and_subgraph_take_the_options() -> None:
    from moot.integrations.langgraph import build_debate_graph, debate_node

    node = debate_node("answer", model=FunctionModel(_first_shown_judge), judge_audit=True, judge_blind=True)
    out = asyncio.run(node({"topic": "Which?"}))
    assert out["debate"]["metrics"]["judge_audit"]["position_flip_rate"] == 1.0
    assert out["debate"]["verdict"]["judging"]["blind"]
    graph = build_debate_graph("answer", model=FunctionModel(_first_shown_judge), judge_audit=True)
    state = asyncio.run(graph.ainvoke({"topic": "Which?"}))
    assert state["result"]["metrics"]["judge_audit"]["n"] == 1
    assert state["result"]["verdict"]["judging"]["position_flip"] is True


def test_judge_shares_model_with_names_the_speakers_on_the_judges_model() -> None:
    shared = FunctionModel(_first_shown_judge, name="test:judge-family")
    other = FunctionModel(_first_shown_judge, name="test:other")
    debate = Debate("answer", model=other, role_models={"affirmative": shared, "synthesizer": shared})
    result = debate.run_sync("Which?")
    assert result.judge_shares_model_with == ["affirmative"]


def test_bench_run_show_and_viewer_report_the_audit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from fastapi.testclient import TestClient

    from moot.cli import main
    from moot.runs import RunStore
    from moot.view import create_app

    store = tmp_path / "runs.db"
    monkeypatch.setenv("MOOT_STORE", str(store))
    out = tmp_path / "bench"
    args = ["bench", "--task", "arithmetic", "--methods", "society:3:2,answer", "--model", "test", "--n", "4"]
    code = main([*args, "--judge-audit", "--no-plots", "--out", str(out)])
    err = capsys.readouterr().err
    assert (
        "judge audit society:3:2: no deciding step" in err and "judge audit answer: position flip rate" in err
    )
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "## Judge audit" in report and "--judge-audit" in report
    with RunStore(store) as opened:
        (record,) = opened.list(kind="bench")
    audit = record.summary["judge_audit"]
    assert set(audit) == {"society:3:2", "answer"} and audit["answer"]["decisions"] == 4
    assert set(audit["answer"]) >= {
        "position_flip_rate",
        "position_flip_ci95",
        "first_slot_share",
        "identity_flip_rate",
        "n",
        "extra_calls",
    }
    assert audit["answer"]["extra_calls"] == 8
    main(["runs", "show", record.id])
    assert "judge audit answer" in capsys.readouterr().out
    client = TestClient(create_app(str(store)), base_url="http://127.0.0.1:7575")
    page = client.get(f"/runs/{record.id}").text
    assert "Judge audit" in page and "no deciding step" in page
    assert code in (0, 1)


def test_debate_page_shows_who_ruled_and_the_audit(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from moot.runs import RunStore
    from moot.view import create_app

    store = tmp_path / "runs.db"
    Debate("answer", model=FunctionModel(_first_shown_judge), store=store, judge_audit=True).run_sync(
        "Which?"
    )
    with RunStore(store) as opened:
        (record,) = opened.list()
    page = TestClient(create_app(str(store)), base_url="http://127.0.0.1:7575").get(f"/runs/{record.id}").text
    assert "judge audit" in page and "reversed order: a different decision" in page


def test_yaml_judging_options_and_failover_lists(tmp_path: Path) -> None:
    from moot.errors import ConfigError
    from moot.protocol import load_protocol

    path = tmp_path / "p.yaml"
    path.write_text(
        "extends: answer\njudging: {blind: true, shuffle: true, seed: 7}\n"
        "personas:\n  synthesizer: {model: ['test:schema', 'test']}\n",
        encoding="utf-8",
    )
    proto = load_protocol(str(path))
    assert proto.judging.blind and proto.judging.shuffle and proto.judging.seed == 7
    assert [m.name for m in Debate(proto).models_for("synthesizer")] == ["test:schema", "test:schema"]
    with pytest.raises(ConfigError, match="judging.blindd"):
        load_protocol({"extends": "answer", "judging": {"blindd": True}})
    # the CLI's options merge into a file's judging: block
    assert load_protocol(str(path), {"judging": {"audit": True}}).judging.seed == 7
    assert Debate("answer").protocol.judging.model_dump() == {
        "blind": False,
        "shuffle": False,
        "audit": False,
        "swap_robust": False,
        "seed": 0,
    }  # the presets keep their seeds' behaviour


def test_absa_takes_the_options() -> None:
    from moot.absa import run_absa
    from moot.absa.config import load_config

    cfg = load_config(None).with_judging({"blind": True, "audit": True})
    result = asyncio.run(run_absa("The pasta was great but the service was slow.", model="test", config=cfg))
    assert result.debate is not None and result.debate.verdict is not None
    judging = result.debate.verdict.judging
    assert judging is not None and judging.blind and judging.reversed_order is not None


def test_self_preference_counts_the_judges_own_model_speakers_against_the_others() -> None:
    from moot.bench.records import ItemRecord
    from moot.bench.summary import self_preference
    from moot.transcript import JudgingRecord

    def unit(i: int, sided: str) -> ItemRecord:
        record = JudgingRecord(order=["affirmative", "critical"], decision="x", sided_with=sided)
        return ItemRecord(
            item_id=str(i),
            method="answer",
            gold="1",
            final="1",
            correct=True,
            parse_failed=False,
            judging=[record],
            judge_shares_model_with=["affirmative"],
        )

    records = [unit(i, "affirmative" if i < 30 else "critical") for i in range(40)]
    pref = self_preference(records)
    assert pref is not None and pref["n"] == 40
    assert pref["own_win_rate"] == 0.75 and pref["other_win_rate"] == 0.25
    low, high = pref["own_ci95"]
    assert low < 0.75 < high
    same = [r.model_copy(update={"judge_shares_model_with": ["affirmative", "critical"]}) for r in records]
    assert self_preference(same) is None  # every speaker on the judge's model: no "other"


def test_the_audit_never_changes_the_run_it_measures() -> None:
    # Its calls are outside the budget and the deadline, and a failed audit call is only noted.
    calls = {"judge": 0}

    def fn(request: ModelRequest) -> Any:
        if request.metadata.get("phase") == "judge":
            calls["judge"] += 1
            if request.metadata.get("audit"):
                raise ModelResponseError("audit call failed", model="t")
        return _first_shown_judge(request)

    from moot.errors import ModelResponseError

    debate = Debate(
        "answer", model=FunctionModel(fn), overrides={"budget": {"max_calls": 5}}, judge_audit=True
    )
    result = debate.run_sync("Which?")
    assert result.fallback is None and not result.degraded and result.final_answer == "answer of affirmative"
    judging = result.verdict.judging if result.verdict else None
    assert judging is not None and judging.position_flip is None and len(judging.audit_errors) == 2
    assert result.metrics["judge_audit"]["n"] == 0 and result.usage.calls == 5


def test_langgraph_node_leaves_the_answer_when_no_speaker_argued() -> None:
    from moot.integrations.langgraph import debate_node

    node = debate_node("adversarial", model=FunctionModel(lambda r: "unusable"), answer_key="answer")
    out = asyncio.run(node({"topic": "Cats are better than dogs", "answer": "the state's own"}))
    assert "answer" not in out  # the state's answer is left as it was
    assert out["debate"]["fallback"].startswith("no argument") and out["debate"]["final_answer"] is None
