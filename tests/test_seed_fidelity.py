"""Issue 9: the seeds' own configurations run the debate they describe, through the CLI."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from moot import Debate
from moot.absa import FinalResult
from moot.cli import main
from moot.models import ModelRequest
from moot.models.testing import FunctionModel, Reply, ScriptedModel, schema_instance
from moot.schemas import get_output
from moot.transcript import DebateResult
from seed_configs import SEED_003_CONDITIONS, SEED_003_OVERRIDE

SENTENCE = "The pasta was great but the service was slow."


def patch_brain(request: ModelRequest) -> dict[str, Any]:
    """Patch speakers confirm, the judge returns a patch with a real evidence span; others: schema minimum."""
    meta = request.metadata
    if meta.get("phase") == "judge" and meta.get("speaker") == "cj":
        return {
            "final_patch": [],
            "final_tuples": [{"aspect_ref": "pasta", "polarity": "positive"}],
            "unresolved_conflicts": [],
            "sentence_polarity": "mixed",
            "sentence_evidence_spans": ["pasta was great"],
        }
    if meta.get("speaker") in ("epm", "tan", "cj"):
        return {"agent": meta["speaker"], "proposed_edits": []}
    assert request.json_schema is not None
    return dict(schema_instance(request.json_schema))


@pytest.fixture(autouse=True)
def _fake(fake_provider: Callable[..., None]) -> None:
    fake_provider("seedfake", lambda rest: FunctionModel(patch_brain, name=f"seedfake:{rest}"))


def _write(tmp_path: Path, text: str, name: str = "exp.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("mode", ["", "mode: patch\n"])
def test_moot_run_config_seed_003_override_runs_the_patch_debate(
    tmp_path: Path, mode: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _write(tmp_path, mode + SEED_003_OVERRIDE)
    assert main(["run", SENTENCE, "--config", str(cfg), "--model", "seedfake:x", "--json"]) == 0
    res = DebateResult.model_validate_json(capsys.readouterr().out)
    assert res.protocol == "patch" and len(res.rounds) == 1 and res.usage.calls == 4
    assert [t.speaker for t in res.turns()] == ["epm", "tan", "cj"]
    assert all("proposed_edits" in (t.content or {}) for t in res.turns())
    assert res.verdict is not None and res.verdict.get("final_patch") == []
    assert res.final_answer == "mixed"


@pytest.mark.parametrize("mode", ["", "mode: patch\n"])
def test_moot_absa_config_seed_003_override_runs_the_patch_debate(
    tmp_path: Path, mode: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _write(tmp_path, mode + SEED_003_OVERRIDE)
    assert main(["absa", SENTENCE, "--config", str(cfg), "--model", "seedfake:x", "--json"]) == 0
    res = FinalResult.model_validate_json(capsys.readouterr().out)
    assert res.mode == "patch" and res.debate is not None and res.debate.protocol == "patch"
    assert [t.speaker for t in res.debate.turns()] == ["epm", "tan", "cj"]
    assert res.debate.verdict is not None and res.debate.verdict.get("sentence_polarity") == "mixed"


@pytest.mark.parametrize("command", ["run", "absa"])
def test_mode_contradicting_personas_is_a_usage_error(
    tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _write(tmp_path, "mode: persona\n" + SEED_003_OVERRIDE)
    assert main([command, SENTENCE, "--config", str(cfg), "--model", "seedfake:x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'persona'" in err and "'patch'" in err


def test_max_rounds_3_is_metadata_one_round_four_calls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    cfg = _write(tmp_path, SEED_003_CONDITIONS)
    argv = ["run", SENTENCE, "--protocol", "patch", "--config", str(cfg), "--model", "seedfake:x", "--json"]
    assert main(argv) == 0
    res = DebateResult.model_validate_json(capsys.readouterr().out)
    assert len(res.rounds) == 1 and res.usage.calls == 4
    messages = [r.getMessage() for r in caplog.records if r.name == "moot"]
    assert f"{cfg}: pipeline.debate.max_rounds has no effect" in "\n".join(messages)  # names the file
    assert any("injection has no effect" in m for m in messages)


def test_enabled_false_skips_the_debate_in_moot_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _write(tmp_path, "pipeline:\n  debate:\n    enabled: false\n")
    argv = ["run", SENTENCE, "--protocol", "patch", "--config", str(cfg), "--model", "seedfake:x"]
    argv += ["--initial-answer", "kept", "--json"]
    assert main(argv) == 0
    res = DebateResult.model_validate_json(capsys.readouterr().out)
    assert res.skipped and res.usage.calls == 0 and res.final_answer == "kept"


def test_unknown_key_in_seed_block_fails_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _write(tmp_path, "pipeline:\n  debate:\n    roundz: 1\n")
    assert main(["run", SENTENCE, "--protocol", "patch", "--config", str(cfg), "--model", "seedfake:x"]) == 2
    assert "'roundz'" in capsys.readouterr().err


def test_answer_rounds_over_the_seed_limit_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "Why?", "--protocol", "answer", "--rounds", "4", "--model", "seedfake:x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("moot: error:") and "limit of 3 rounds" in err


# -- seed 003: the judge's evidence ---------------------------------------------------------------
def _judgement(spans: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "final_patch": [],
        "final_tuples": [{"aspect_ref": "pasta", "polarity": "Positive"}],
        "sentence_polarity": "mixed",
        "sentence_evidence_spans": spans,
        **extra,
    }


def _patch_script(*judge_replies: dict[str, Any]) -> ScriptedModel:
    speakers: dict[str, list[Reply]] = {k: [{"agent": k, "proposed_edits": []}] for k in ("epm", "tan")}
    # cj speaks once as a speaker, then judges
    speakers["cj"] = [{"agent": "cj", "proposed_edits": []}, *judge_replies]
    return ScriptedModel(speakers)


def test_judge_aspect_evidence_is_kept_in_the_result() -> None:
    evidence = [{"aspect_ref": "pasta", "spans": ["pasta was great"]}]
    model = _patch_script(_judgement(["pasta was great"], aspect_evidence=evidence))
    result = Debate("patch", model=model).run_sync(SENTENCE)
    assert result.verdict is not None and result.verdict.get("aspect_evidence") == evidence
    assert result.verdict.get("final_tuples") == [
        {"aspect_ref": "pasta", "aspect_term": None, "polarity": "positive"}
    ]
    assert (
        DebateResult.model_validate_json(result.model_dump_json()).verdict.get("aspect_evidence") == evidence
    )  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("spans", "reason"),
    [
        ([], "at least one evidence span is required"),
        (["pasta was delicious"], "no evidence span is an exact substring of the sentence"),
    ],
)
def test_missing_or_inexact_spans_get_one_repair_with_the_reason(spans: list[str], reason: str) -> None:
    model = _patch_script(_judgement(spans), _judgement(["service was slow"]))
    result = Debate("patch", model=model).run_sync(SENTENCE)
    assert result.verdict is not None and result.verdict.ok and result.verdict.repaired
    assert result.verdict.get("sentence_evidence_spans") == ["service was slow"]
    repair = model.requests[-1].messages[-1].content
    assert reason in repair
    assert result.usage.calls == 5


def test_spans_still_inexact_after_the_repair_are_a_recorded_failure() -> None:
    model = _patch_script(_judgement(["nope"]), _judgement(["still not in it"]))
    result = Debate("patch", model=model).run_sync(SENTENCE)
    v = result.verdict
    assert v is not None and not v.ok and v.error is not None
    assert "no evidence span is an exact substring" in v.error and "still not in it" in (v.raw or "")
    assert result.fallback is not None and result.fallback.startswith("judge failed")
    assert result.failed_turns == 1


def test_closed_sets_are_enums_in_the_schemas() -> None:
    edit = get_output("patch").model_json_schema()["$defs"]["EditTarget"]["properties"]["polarity"]
    assert {"enum": ["positive", "negative", "neutral", "mixed"], "type": "string"} in edit["anyOf"]
    stance = get_output("prt").model_json_schema()["properties"]["stance"]
    assert stance["enum"] == ["pro", "con", "neutral"]
    turn = get_output("patch").model_validate(
        {
            "agent": "epm",
            "proposed_edits": [
                {"op": "set_polarity", "target": {"aspect_ref": "a", "polarity": " NEGATIVE"}}
            ],
        }
    )
    assert turn.model_dump()["proposed_edits"][0]["target"]["polarity"] == "negative"
    with pytest.raises(ValidationError):
        get_output("patch").model_validate(
            {
                "agent": "epm",
                "proposed_edits": [
                    {"op": "set_polarity", "target": {"aspect_ref": "a", "polarity": "great"}}
                ],
            }
        )


# -- packaging: the offline `test` model the bare-install CI step runs -----------------------------
def test_test_model_runs_a_whole_debate_offline(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "Should a small team write tests first?", "--model", "test", "--json"]) == 0
    res = DebateResult.model_validate_json(capsys.readouterr().out)
    assert res.usage.calls == 5 and res.failed_turns == 0 and res.final_answer
    assert main(["run", "X", "--model", "test:nope"]) == 2
    assert "unknown test model 'nope'" in capsys.readouterr().err


def test_click_is_a_declared_dependency() -> None:
    import tomllib

    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    deps = [d.split(">")[0].split("=")[0].strip() for d in pyproject["project"]["dependencies"]]
    assert "click" in deps  # moot.cli imports it directly


def test_absa_closed_sets_are_enums() -> None:
    from moot.absa.schemas import RebuttalPoint

    point = RebuttalPoint(speaker="critic", stance="con", polarity_hint="negative", fail_reason="no_match")
    assert (point.polarity_hint, point.fail_reason) == ("negative", "no_match")
    for bad in ({"polarity_hint": "great"}, {"fail_reason": "bogus"}):
        with pytest.raises(ValidationError):
            RebuttalPoint.model_validate({"speaker": "critic", "stance": "con", **bad})
