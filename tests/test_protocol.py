from __future__ import annotations

from pathlib import Path

import pytest

from moot import ConfigError, Debate, ScriptedModel, load_protocol
from moot.schemas import AnswerTurn, Arbitration
from moot.structured import extract_json, schema_hint
from seed_configs import SEED_003_OVERRIDE


def test_unknown_top_level_key_is_named() -> None:
    with pytest.raises(ConfigError, match="unknown key 'roundz'") as info:
        load_protocol("panel", {"roundz": 3})
    assert info.value.key == "roundz"


def test_unknown_persona_field_is_named() -> None:
    with pytest.raises(ConfigError, match="personas.analyst.mood"):
        load_protocol("panel", {"personas": {"analyst": {"mood": "happy"}}})


def test_unknown_persona_in_order_is_named() -> None:
    with pytest.raises(ConfigError, match="unknown persona 'ghost'"):
        load_protocol("panel", {"order": ["analyst", "ghost"]})


def test_unknown_preset_lists_available() -> None:
    with pytest.raises(ConfigError, match="unknown protocol 'nope'; available: .*panel"):
        load_protocol("nope")


def test_unknown_output_schema() -> None:
    with pytest.raises(ConfigError, match="unknown output schema 'poem'"):
        load_protocol("panel", {"turn_output": "poem"})


def test_malformed_yaml(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("rounds: [1, 2\n")
    with pytest.raises(ConfigError, match="malformed YAML"):
        load_protocol(bad)


def test_missing_file() -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_protocol("/no/such/file.yaml")


def test_seed_003_shape_loads_from_yaml(tmp_path: Path) -> None:
    cfg = tmp_path / "seed.yaml"
    cfg.write_text(
        """
pipeline:
  debate:
    extends: patch
    rounds: 2
    order: ["epm", "tan", "cj"]
    personas:
      epm: {name: "EPM", role: "Evidence–Polarity Mapper", goal: "g", stance: "", style: ""}
""",
        encoding="utf-8",
    )
    proto = load_protocol(cfg)
    assert proto.rounds == 2 and proto.personas["epm"].stance is None and proto.personas["epm"].goal == "g"
    assert proto.personas["tan"].role == "Target–Aspect Normalizer"  # merged from the preset


def test_conditions_yaml_max_rounds_is_metadata_and_warned(caplog: pytest.LogCaptureFixture) -> None:
    proto = load_protocol(
        "patch", {"pipeline": {"debate": {"enabled": True, "max_rounds": 3, "injection": {"strategy": "x"}}}}
    )
    assert proto.rounds == 1 and proto.enabled  # seed 003: rounds (default 1) decides, max_rounds is meta
    warnings = [r.getMessage() for r in caplog.records if r.name == "moot"]
    assert warnings == [
        "overrides: pipeline.debate.max_rounds has no effect"
        " (seed 003 metadata; the round count is `rounds`)",
        "overrides: pipeline.debate.injection has no effect (memory injection is not implemented)",
    ]


@pytest.mark.parametrize("mode", ["", "mode: patch\n", "pipeline_mode"])
def test_seed_003_override_example_is_the_patch_debate(tmp_path: Path, mode: str) -> None:
    text = SEED_003_OVERRIDE
    if mode == "pipeline_mode":
        text = text.replace("pipeline:\n", "pipeline:\n  mode: patch\n")
    else:
        text = mode + text
    cfg = tmp_path / "exp.yaml"
    cfg.write_text(text, encoding="utf-8")
    proto = load_protocol(cfg)
    assert (proto.name, proto.rounds, proto.speakers(), proto.turn_output) == (
        "patch",
        1,
        ["epm", "tan", "cj"],
        "patch",
    )
    assert proto.judge is not None and proto.judge.output == "patch_judgement"


def test_mode_contradicting_personas_names_both(tmp_path: Path) -> None:
    cfg = tmp_path / "exp.yaml"
    cfg.write_text("mode: persona\n" + SEED_003_OVERRIDE, encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_protocol(cfg)
    assert str(err.value) == (
        "mode 'persona' contradicts the personas cj, epm, tan, which belong to mode 'patch' "
        "(preset 'patch'); fix the mode or the personas"
    )
    assert err.value.key == "mode"


def test_enabled_false_is_kept_and_unknown_keys_fail(tmp_path: Path) -> None:
    assert not load_protocol({"pipeline": {"debate": {"enabled": False}}, "mode": "patch"}).enabled
    assert not load_protocol({"enable_debate": False, "debate": {}, "mode": "persona"}).enabled
    with pytest.raises(ConfigError) as err:
        load_protocol({"pipeline": {"debate": {"order": ["epm"], "speakerz": 1}}})
    assert err.value.key == "speakerz" and "speakerz" in str(err.value)
    with pytest.raises(ConfigError) as err:
        load_protocol({"pipeline": {"debate": {}}, "mode": "patch", "colour": 1})
    assert err.value.key == "colour"


def test_extends_cycle_is_a_clear_error(tmp_path: Path) -> None:
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text(f"extends: {b}\n")
    b.write_text(f"extends: {a}\n")
    with pytest.raises(ConfigError, match="extends: cycle") as err:
        load_protocol(a)
    assert err.value.key == "extends"


def test_answer_allows_at_most_three_rounds() -> None:
    assert load_protocol("answer", {"rounds": 3}).rounds == 3
    with pytest.raises(ConfigError, match="rounds 4 exceeds the limit of 3 rounds for 'answer'"):
        load_protocol("answer", {"rounds": 4})


def test_dict_protocol_and_extends() -> None:
    proto = load_protocol({"extends": "answer", "rounds": 3, "timeout": 5})
    assert proto.rounds == 3 and proto.timeout == 5 and proto.name == "answer"


def test_stages_from_nested_order() -> None:
    proto = load_protocol("adversarial-extended")
    assert proto.stages() == [["proponent", "opponent", "advocate", "critic"], ["refiner"]]
    assert load_protocol("answer").stages() == [["affirmative", "critical"]]


def test_role_model_for_unknown_persona() -> None:
    with pytest.raises(ConfigError, match="unknown persona 'nobody'"):
        Debate("answer", model=ScriptedModel([]), role_models={"nobody": "local"})


def test_judge_aggregation_needs_judge() -> None:
    with pytest.raises(ConfigError, match="needs a judge"):
        load_protocol({"personas": {"a": {}}, "order": ["a"]})


def test_confidence_is_clamped_and_percentages_read() -> None:
    assert AnswerTurn.model_validate({"answer": "x", "confidence": 100}).confidence == 1.0
    assert AnswerTurn.model_validate({"answer": "x", "confidence": 85}).confidence == 0.85
    assert AnswerTurn.model_validate({"answer": "x", "confidence": -3}).confidence == 0.0
    assert AnswerTurn.model_validate({"answer": "x", "confidence": "70%"}).confidence == 0.7


@pytest.mark.parametrize(
    ("given", "read"),
    [
        (1.2, 1.0),
        (1.9, 1.0),
        (1, 1.0),
        (0.7, 0.7),
        (2, 0.02),
        (2.5, 0.025),
        (50, 0.5),
        (250, 1.0),
        ("1.2%", 0.012),
    ],
)
def test_only_plain_percentages_are_read_as_percentages(given: object, read: float) -> None:
    # Issue 32: a reply's 1.2 is an overshoot of the 0-1 scale (very confident), never 1.2 per cent.
    assert AnswerTurn.model_validate({"answer": "x", "confidence": given}).confidence == pytest.approx(read)


def test_extract_json_tolerates_fences_and_chatter() -> None:
    assert extract_json('Sure! ```json\n{"a": 1}\n``` done') == {"a": 1}
    assert extract_json('prefix {"a": {"b": 2}} suffix') == {"a": {"b": 2}}
    with pytest.raises(ValueError):
        extract_json("no json here")


def test_schema_hint_lists_fields_and_enums() -> None:
    hint = schema_hint(Arbitration)
    assert '"resolution": "agent1_correct" | "agent2_correct"' in hint
    assert '"confidence": number' in hint


def test_conditions_yaml_alone_says_how_to_pick_the_debate(tmp_path: Path) -> None:
    cfg = tmp_path / "cond.yaml"
    cfg.write_text("pipeline:\n  debate:\n    enabled: true\n    max_rounds: 3\n")
    with pytest.raises(ConfigError, match="give the seeds' shape a `mode:`"):
        load_protocol(cfg)
    cfg.write_text("mode: patch\npipeline:\n  debate:\n    enabled: true\n    max_rounds: 3\n")
    assert (load_protocol(cfg).name, load_protocol(cfg).rounds) == ("patch", 1)
