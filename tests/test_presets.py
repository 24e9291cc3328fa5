from __future__ import annotations

import pytest

from moot import Debate, ScriptedModel, load_protocol, presets
from moot.models.testing import Reply


def arg(text: str, conf: float, evidence: list[str] | None = None) -> dict[str, object]:
    return {"content": text, "confidence": conf, "supporting_evidence": evidence or []}


EVIDENCE = ["remote staff logged more focused hours", "a 2023 survey found output rose"]


def refinement(text: str) -> dict[str, object]:
    return {"synthesis": text, "agreements": ["both cite output"], "open_questions": []}


def mod(conf: float, leaning: str = "support") -> dict[str, object]:
    return {"evaluation": "e", "leaning": leaning, "consensus_reached": conf > 0.8, "confidence": conf}


def test_every_preset_loads_and_describes_itself() -> None:
    names = presets()
    assert {"answer", "panel", "adversarial", "adversarial-extended", "patch", "arbitration"} <= set(names)
    for name, description in names.items():
        assert description, name
        assert load_protocol(name).name == name


def test_adversarial_stops_early_when_moderator_is_confident() -> None:
    model = ScriptedModel(
        {
            "proponent": [arg("for", 0.9, EVIDENCE)],
            "opponent": [arg("against", 0.4)],
            "moderator": [mod(0.85)],
        }
    )
    result = Debate("adversarial", model=model).run_sync("Remote work raises productivity.")
    assert result.stopped_early and len(result.rounds) == 1 and result.usage.calls == 3
    assert [r.metadata["speaker"] for r in model.requests] == ["proponent", "opponent", "moderator"]
    assert result.decision is not None and result.decision.label == "SUPPORT"
    # pro strength 0.9 * 1.0 = 0.9, con 0.4 * 0.5 = 0.2 -> 0.9 / 1.1, capped at 0.95
    assert result.decision.confidence == pytest.approx(0.9 / 1.1)
    assert result.final_answer == "SUPPORT"
    assert result.metrics["evidence_coverage"] == 0.5


def test_adversarial_threshold_is_strict_and_runs_to_max_rounds() -> None:
    model = ScriptedModel(
        {
            "proponent": [arg("p1", 0.5), arg("p2", 0.5)],
            "opponent": [arg("o1", 0.5), arg("o2", 0.5)],
            "moderator": [mod(0.8), mod(0.9)],
        }
    )
    result = Debate("adversarial", model=model).run_sync("X")
    assert not result.stopped_early and len(result.rounds) == 2 and result.usage.calls == 6
    assert result.decision is not None and result.decision.label == "UNCERTAIN"
    assert result.decision.confidence == 0.5


def test_adversarial_extended_runs_four_concurrently_then_refiner_then_moderator() -> None:
    script: dict[str, list[Reply]] = {
        k: [arg(f"{k}{r}", 0.6) for r in (1, 2, 3)] for k in ("proponent", "opponent", "advocate", "critic")
    }
    script["refiner"] = [refinement(f"refiner{r}") for r in (1, 2, 3)]
    script["moderator"] = [mod(0.5), mod(0.5), mod(0.5)]
    model = ScriptedModel(script, delay=0.02)
    result = Debate("adversarial-extended", model=model).run_sync("X")
    assert len(result.rounds) == 3 and result.usage.calls == 18
    assert model.max_in_flight == 4
    speakers = [r.metadata["speaker"] for r in model.requests[:6]]
    assert set(speakers[:4]) == {"proponent", "opponent", "advocate", "critic"}
    assert speakers[4:] == ["refiner", "moderator"]
    refiner_prompt = model.requests[4].messages[1].content
    assert all(f"{k}1" in refiner_prompt for k in ("proponent", "opponent", "advocate", "critic"))


@pytest.mark.parametrize(
    ("strategy", "label"),
    [("confidence_weighted", "OPPOSE"), ("evidence_based", "SUPPORT"), ("majority_vote", "SUPPORT")],
)
def test_consensus_strategies_are_configurable(strategy: str, label: str) -> None:
    model = ScriptedModel(
        {
            "proponent": [arg("p", 0.3, EVIDENCE)],  # strength 0.3, evidence 1.0
            "opponent": [arg("o", 0.95)],  # strength 0.475, evidence 0.5
            "moderator": [mod(0.9, "support")],
        }
    )
    result = Debate("adversarial", model=model, overrides={"aggregation": strategy}).run_sync("X")
    assert result.decision is not None and result.decision.label == label


def test_panel_is_sequential_prt_with_judge_3x_rounds_plus_1_calls() -> None:
    def prt(who: str, stance: str) -> dict[str, object]:
        return {
            "speaker": who,
            "stance": stance,
            "planning": "p",
            "reflection": "r",
            "message": f"{who} says",
        }

    model = ScriptedModel(
        {
            "analyst": [prt("analyst", "neutral")] * 2,
            "critic": [prt("critic", "con")] * 2,
            "empath": [prt("empath", "pro")] * 2,
            "judge": [{"winner": None, "consensus": "mostly positive", "rationale": "because"}],
        }
    )
    result = Debate("panel", model=model).run_sync("The food was great but the service slow.")
    assert result.usage.calls == 7
    assert [r.metadata["speaker"] for r in model.requests] == ["analyst", "critic", "empath"] * 2 + ["judge"]
    assert result.final_answer == "mostly positive"
    assert result.verdict is not None and result.verdict.get("winner") is None
    assert [t.stance for t in result.rounds[0].turns] == ["neutral", "con", "pro"]


def test_panel_accepts_seed_yaml_overrides() -> None:
    proto = load_protocol("panel", {"pipeline": {"debate": {"rounds": 1, "order": ["critic", "analyst"]}}})
    assert proto.rounds == 1 and proto.speakers() == ["critic", "analyst"]


def test_patch_preset_validates_edits_and_drops_non_substring_spans() -> None:
    sentence = "The battery life is great but the screen is dim."
    edit = {"op": "set_polarity", "target": {"aspect_ref": "screen"}, "value": "negative", "evidence": "dim"}
    model = ScriptedModel(
        {
            "epm": [{"agent": "EPM", "proposed_edits": [edit]}],
            "tan": [
                {"agent": "TAN", "proposed_edits": [{"op": "explode", "target": {"aspect_ref": "x"}}]},
                {"agent": "TAN"},
            ],
            "cj": [
                {"agent": "CJ", "proposed_edits": []},
                {
                    "final_patch": [edit],
                    "final_tuples": [{"aspect_ref": "screen", "polarity": "negative"}],
                    "sentence_polarity": "mixed",
                    "sentence_evidence_spans": ["battery life is great", "screen is very dim"],
                },
            ],
        }
    )
    result = Debate("patch", model=model).run_sync(
        sentence, context={"stage1": {"aspects": ["battery life", "screen"]}}
    )
    assert [r.metadata["speaker"] for r in model.requests] == ["epm", "tan", "tan", "cj", "cj"]
    tan = result.rounds[0].turns[1]
    assert tan.repaired and tan.get("proposed_edits") == []
    assert result.final_answer == "mixed"
    assert result.verdict is not None
    assert result.verdict.get("sentence_evidence_spans") == ["battery life is great"]
    assert result.metrics["dropped_evidence_spans"] == 1
    judge_prompt = model.requests[-1].messages[1].content
    assert "- epm: set_polarity target=screen value=negative evidence='dim'" in judge_prompt
