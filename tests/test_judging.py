"""Issue 32: blind, shuffled and audited deciding steps, judge failover, no decision without an argument."""

from __future__ import annotations

import asyncio
import json
import random
import re
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
    assert result.rounds[0].moderator is None  # no moderator call over nothing
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
