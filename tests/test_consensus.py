"""Seed 002's decision rules and quality metrics; issue 11's warnings for missing information."""

from __future__ import annotations

import pytest

from moot import Debate, ScriptedModel
from moot.errors import ModelHTTPError
from moot.models.testing import Reply

EVIDENCE = ["remote staff logged more focused hours", "a 2023 survey found output rose"]


def arg(conf: float, evidence: list[str] | None = None, text: str = "an argument") -> dict[str, object]:
    return {"content": text, "confidence": conf, "supporting_evidence": evidence or []}


def mod(conf: float = 0.5, leaning: str = "support", **logic: float) -> dict[str, object]:
    return {"evaluation": "e", "leaning": leaning, "consensus_reached": False, "confidence": conf, **logic}


def failed() -> ModelHTTPError:
    return ModelHTTPError(400, "bad request", model="test:scripted")  # not retryable: the turn fails


def test_extended_margin_counts_proponent_and_opponent_only() -> None:
    # advocate 0.9, everyone else 0.5: counting the advocate would give SUPPORT; the seed's rule does not.
    script: dict[str, list[Reply]] = {
        "proponent": [arg(0.5, EVIDENCE)],
        "opponent": [arg(0.5, EVIDENCE)],
        "advocate": [arg(0.9, EVIDENCE)],
        "critic": [arg(0.5, EVIDENCE)],
        "refiner": [{"synthesis": "both have a point"}],
        "moderator": [mod(0.9)],
    }
    result = Debate("adversarial-extended", model=ScriptedModel(script)).run_sync("X")
    d = result.decision
    assert d is not None and (d.label, d.confidence) == ("UNCERTAIN", 0.5)
    assert (d.details["pro_strength"], d.details["con_strength"]) == (0.5, 0.5)
    assert d.warnings == []


def test_strength_is_confidence_times_evidence_times_moderator_logic() -> None:
    script: dict[str, list[Reply]] = {
        "proponent": [arg(0.9, EVIDENCE)],  # 0.9 * 1.0 * pro_logic 0.5 = 0.45
        "opponent": [arg(0.4, ["one study disagrees"])],  # 0.4 * 0.75 * con_logic 1.0 = 0.3
        "moderator": [mod(0.9, pro_logic=0.5, con_logic=1.0)],
    }
    result = Debate("adversarial", model=ScriptedModel(script)).run_sync("X")
    d = result.decision
    assert d is not None and d.label == "SUPPORT" and d.confidence == pytest.approx(0.45 / 0.75)
    assert (d.details["pro_strength"], d.details["con_strength"]) == (0.45, 0.3)
    assert result.metrics["logical_consistency"] == 0.75


def test_a_failed_turn_is_missing_information_not_zero_strength() -> None:
    script: dict[str, list[Reply]] = {
        "proponent": [arg(0.9, EVIDENCE)],
        "opponent": [failed()],
        "moderator": [mod(0.9)],
    }
    result = Debate("adversarial", model=ScriptedModel(script)).run_sync("X")
    d = result.decision
    assert d is not None and (d.label, d.confidence) == ("UNCERTAIN", 0.5)  # not SUPPORT at 0.95
    assert d.warnings == [
        "round 1 is left out of the decision: the turn of opponent failed (missing information, "
        "not zero strength)",
        "no round in which every counted speaker argued: the decision is UNCERTAIN",
    ]


def test_a_failed_round_is_left_out_and_the_complete_one_decides() -> None:
    script: dict[str, list[Reply]] = {
        "proponent": [arg(0.5, EVIDENCE), arg(0.9, EVIDENCE)],
        "opponent": [arg(0.8, EVIDENCE), failed()],
        "moderator": [mod(0.5), mod(0.5)],
    }
    result = Debate("adversarial", model=ScriptedModel(script)).run_sync("X")
    d = result.decision
    assert d is not None and d.label == "OPPOSE" and d.details["rounds_counted"] == [1]
    assert d.confidence == pytest.approx(0.8 / 1.3)
    assert len(d.warnings) == 1 and d.warnings[0].startswith("round 2 is left out")


def test_empty_and_degenerate_evidence_are_warned_and_count_as_a_bare_claim() -> None:
    script: dict[str, list[Reply]] = {
        "proponent": [arg(0.6, ["fact", "fact", "x"])],
        "opponent": [arg(0.6, [])],
        "moderator": [mod(0.9)],
    }
    result = Debate("adversarial", model=ScriptedModel(script)).run_sync("X")
    d = result.decision
    assert d is not None and d.label == "UNCERTAIN"
    assert (d.details["pro_strength"], d.details["con_strength"]) == (0.3, 0.3)
    assert d.warnings == [
        "proponent's evidence in round 1 is degenerate (3 items, none distinct and substantive)",
        "opponent gave no evidence in round 1",
    ]


def test_evidence_that_restates_the_argument_or_a_field_is_not_evidence() -> None:
    # what the embedded model produced: the claim copied into the evidence, and a stray field
    text = "This is a task I am not ready to do."
    script: dict[str, list[Reply]] = {
        "proponent": [arg(1.0, [], text)],
        "opponent": [arg(1.0, [text, "confidence: 1.0,"], text)],
        "moderator": [mod(1.0)],
    }
    d = Debate("adversarial", model=ScriptedModel(script)).run_sync("X").decision
    assert d is not None and (d.label, d.details["pro_strength"], d.details["con_strength"]) == (
        "UNCERTAIN",
        0.5,
        0.5,
    )
    assert (
        d.warnings[1]
        == "opponent's evidence in round 1 is degenerate (2 items, none distinct and substantive)"
    )


def test_repeated_evidence_counts_once() -> None:
    script: dict[str, list[Reply]] = {
        "proponent": [arg(0.8, ["The survey found more output", "the survey  found more output."])],
        "opponent": [arg(0.8, EVIDENCE)],
        "moderator": [mod(0.9)],
    }
    d = Debate("adversarial", model=ScriptedModel(script)).run_sync("X").decision
    assert d is not None and (d.details["pro_strength"], d.details["con_strength"]) == (0.6, 0.8)


def test_all_seed_quality_metrics_are_reported() -> None:
    script: dict[str, list[Reply]] = {
        "proponent": [arg(0.9, EVIDENCE, "tests first catch the bug")],
        "opponent": [arg(0.4, [], "fix first then test")],
        "moderator": [mod(0.9, "support", pro_logic=0.8, con_logic=0.6)],
    }
    m = Debate("adversarial", model=ScriptedModel(script)).run_sync("X").metrics
    expected = {
        "logical_consistency": 0.7,
        "evidence_quality": 0.75,
        "consensus_quality": 1.0,
    }
    for key, value in expected.items():
        assert m[key] == value, key
    assert m["argument_diversity"] is not None and m["decision_confidence"] is not None
    five = [m[k] for k in ("logical_consistency", "evidence_quality", "argument_diversity")]
    five += [m["consensus_quality"], m["decision_confidence"]]
    assert m["overall_quality"] == pytest.approx(sum(five) / 5, abs=1e-4)


def test_majority_vote_warns_about_a_failed_moderator() -> None:
    script: dict[str, list[Reply]] = {
        "proponent": [arg(0.5, EVIDENCE)] * 2,
        "opponent": [arg(0.5, EVIDENCE)] * 2,
        "moderator": [failed(), mod(0.5, "oppose")],
    }
    result = Debate("adversarial", model=ScriptedModel(script), overrides={"aggregation": "majority_vote"})
    d = result.run_sync("X").decision
    assert d is not None and d.label == "OPPOSE"
    assert d.warnings == ["the moderator's evaluation of round 1 failed: its vote is missing"]


def test_refiner_has_its_own_prompt_and_schema() -> None:
    script: dict[str, list[Reply]] = {
        k: [arg(0.6, EVIDENCE)] for k in ("proponent", "opponent", "advocate", "critic")
    }
    script["refiner"] = [{"synthesis": "both sides agree output matters", "agreements": ["output"]}]
    script["moderator"] = [mod(0.9)]
    model = ScriptedModel(script)
    result = Debate("adversarial-extended", model=model).run_sync("X")
    req = next(r for r in model.requests if r.metadata["speaker"] == "refiner")
    assert req.json_schema is not None and "synthesis" in req.json_schema["properties"]
    prompt = "\n".join(m.content for m in req.messages)
    assert "You do not argue a side" in prompt and "take no side" in prompt
    refiner = next(t for t in result.turns() if t.speaker == "refiner")
    assert refiner.text == "both sides agree output matters" and refiner.output == "refinement"
