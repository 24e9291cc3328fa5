"""The whole ABSA pipeline end to end with scripted models (persona mode, patch mode, ablations, failures)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from moot.absa import FinalResult, run_absa, run_absa_batch, run_absa_sync
from moot.errors import UsageError
from moot.models.base import ModelRequest
from moot.models.testing import FunctionModel, ScriptedModel

from .scripts import (
    SENTENCE,
    aspect_free_reply,
    patch_replies,
    persona_replies,
    stage1_replies,
    stage2_replies,
)


def aspects(res: FinalResult) -> list[tuple[str, str, float]]:
    return [(a["aspect"], a["polarity"], a["confidence"]) for a in res.aspects]


def test_persona_mode_end_to_end() -> None:
    model = ScriptedModel(persona_replies())
    res = run_absa_sync(SENTENCE, model=model)
    assert model.remaining == 0
    assert not res.failed and res.errors == {}
    # Stage 1: the wrong screen offsets were repaired, the percentage confidence clamped
    assert [(a.term, a.start, a.end) for a in res.stage1.aspects] == [("battery", 4, 11), ("screen", 34, 40)]
    assert any("repaired span of 'screen'" in n for n in res.stage1.span_notes)
    assert res.stage1.ate.confidence == 0.8 and res.stage1.ate.label == "mixed"
    # Debate: 2 rounds x 3 speakers + judge, in the seed's order
    speakers = [r.metadata["speaker"] for r in model.requests]
    assert speakers == [
        "ate",
        "atsa",
        "validator",
        "analyst",
        "critic",
        "empath",
        "analyst",
        "critic",
        "empath",
        "judge",
        "ate_review",
        "atsa_review",
    ]
    assert res.debate is not None and len(res.debate.rounds) == 2
    # The debate's shared context is the Stage-1 result
    analyst_prompt = "\n".join(m.content for m in model.requests[3].messages)
    assert "lasts all day" in analyst_prompt and "contrast" in analyst_prompt
    # Review context: critic/empath/analyst turns all name an aspect
    ctx = res.review_context
    assert ctx is not None
    assert ctx.mapping_stats == {"total": 6, "direct": 6, "fallback": 0, "none": 0}
    assert [h["polarity_hint"] for h in ctx.aspect_hints["screen"]] == ["neutral", "negative"] * 2
    # Stage 2 got the debate context in its prompt
    review_prompt = model.requests[10].messages[0].content
    assert "aspect_hints" in review_prompt and "dim screen" in review_prompt
    # Override: screen flipped to negative (neg 2.0 >= 1.6), battery already confident
    stats = res.override_stats
    assert (
        stats.applied,
        stats.skipped_already_confident,
        stats.skipped_conflict,
        stats.skipped_low_signal,
    ) == (1, 1, 0, 0)
    overrides = [e for e in res.stage2.correction_log if e.action == "DEBATE_OVERRIDE" and e.applied]
    assert [(e.aspect, e.before, e.after) for e in overrides] == [
        ("screen", {"polarity": "positive", "confidence": 0.6}, {"polarity": "negative", "confidence": 0.7})
    ]
    assert aspects(res) == [("battery", "positive", 0.9), ("screen", "negative", 0.7)]
    # Moderator: B (stage2 0.85), C (contrast is critical; mixed), A (mean with stage2 ATSA 0.8)
    assert res.moderator is not None
    assert res.moderator.applied_rules == ["B", "C", "A"]
    assert (res.label, res.confidence) == ("mixed", pytest.approx(0.825))
    assert res.moderator.selected_stage == "stage2"
    # Trace and usage
    assert [s.name for s in res.trace] == [
        "ate",
        "atsa",
        "validator",
        "debate",
        "review_context",
        "validator_proposals",
        "ate_review",
        "atsa_review",
        "debate_override",
        "moderator",
    ]
    assert all(s.duration_ms >= 0 for s in res.trace)
    assert res.usage.calls == 12
    # The result round-trips through JSON
    assert FinalResult.model_validate_json(res.model_dump_json()) == res


def test_patch_mode_end_to_end() -> None:
    model = ScriptedModel(patch_replies())
    res = run_absa_sync(SENTENCE, model=model, config="patch")
    assert model.remaining == 0 and not res.failed
    speakers = [r.metadata["speaker"] for r in model.requests]
    assert speakers == ["ate", "atsa", "validator", "epm", "tan", "cj", "cj", "ate_review", "atsa_review"]
    assert res.mode == "patch"
    assert res.debate is not None and res.debate.metrics["dropped_evidence_spans"] == 1
    ctx = res.review_context
    assert ctx is not None and ctx.summary is not None
    assert ctx.summary["sentence_evidence_spans"] == ["the screen is dim"]
    assert ctx.mapping_stats == {"total": 3, "direct": 2, "fallback": 0, "none": 1}
    assert ctx.mapping_fail_reasons["no_match"] == 1
    # final_patch applied in Stage 2: set_polarity (with the edit's confidence), confirm; unknown drop skipped
    patch_log = [
        (e.action, e.aspect, e.applied) for e in res.stage2.correction_log if e.step == "debate_patch"
    ]
    assert patch_log == [
        ("set_polarity", "screen", True),
        ("confirm_tuple", "battery", True),
        ("drop_tuple", "keyboard", False),
    ]
    assert (
        res.override_stats.patch_applied,
        res.override_stats.patch_skipped,
        res.override_stats.applied,
    ) == (2, 1, 0)
    assert aspects(res) == [("battery", "positive", 0.9), ("screen", "negative", 0.9)]
    assert res.moderator is not None and res.moderator.applied_rules == ["B", "C", "A"]
    assert (res.label, res.confidence) == ("mixed", pytest.approx(0.875))
    assert "debate_patch" in [s.name for s in res.trace]


def test_ablation_no_debate_makes_no_debate_calls() -> None:
    model = ScriptedModel({**stage1_replies(), **stage2_replies()})
    res = run_absa_sync(SENTENCE, model=model, config="abl_no_debate")
    assert model.remaining == 0
    assert res.debate is None and res.review_context is None and not res.debate_enabled
    assert [s.name for s in res.trace if s.skipped] == ["debate", "debate_override"]
    # no override: the wrong Stage-1 polarity of screen survives
    assert aspects(res) == [("battery", "positive", 0.9), ("screen", "positive", 0.6)]
    assert "{}" in model.requests[3].messages[0].content  # empty debate context in the ATE review prompt


def test_ablation_no_debate_override_keeps_context_but_not_override() -> None:
    model = ScriptedModel(persona_replies())
    res = run_absa_sync(SENTENCE, model=model, config="abl_no_debate_override")
    assert res.debate is not None and res.review_context is not None
    assert res.override_stats.applied == 0
    assert aspects(res) == [("battery", "positive", 0.9), ("screen", "positive", 0.6)]
    assert (
        next(s for s in res.trace if s.name == "debate_override").detail == "enable_debate_override is false"
    )


def test_seed_003_shape_rounds_and_order() -> None:
    replies = persona_replies(rounds=1)
    model = ScriptedModel(replies)
    cfg = {"pipeline": {"debate": {"rounds": 1, "order": ["empath", "critic", "analyst"], "max_rounds": 3}}}
    res = run_absa_sync(SENTENCE, model=model, config=cfg)
    debate_speakers = [r.metadata["speaker"] for r in model.requests][3:7]
    assert debate_speakers == ["empath", "critic", "analyst", "judge"]
    assert res.debate is not None and len(res.debate.rounds) == 1
    # one round: each side has weight 1.0 < 1.6 -> low signal everywhere
    assert res.override_stats.skipped_low_signal == 2 and res.override_stats.applied == 0


def test_failed_call_is_recorded_never_invented() -> None:
    replies = persona_replies()
    replies["ate"] = ["not json", "still not json"]  # the repair request fails too
    model = ScriptedModel(replies)
    res = run_absa_sync(SENTENCE, model=model)
    assert res.failed and "ate" in res.errors
    assert res.stage1.aspects == [] and res.stage1.ate.label is None
    assert next(s for s in res.trace if s.name == "atsa").skipped  # nothing to classify
    assert model.remaining == 1  # the unused ATSA reply
    assert res.moderator is not None


def test_debate_turn_failure_is_an_error() -> None:
    replies = persona_replies()
    replies["critic"] = [{"nonsense": 1}, {"nonsense": 2}, {"nonsense": 3}, {"nonsense": 4}]
    res = run_absa_sync(SENTENCE, model=ScriptedModel(replies))
    assert res.failed
    assert any(k.startswith("debate:turn:critic") for k in res.errors)
    assert res.review_context is not None and res.review_context.mapping_stats["total"] == 4


def korean_model(request: ModelRequest) -> dict[str, Any]:
    """A FunctionModel brain for a Korean contrast sentence."""
    speaker = request.metadata["speaker"]
    sentence = "배터리는 오래가지만 화면이 너무 어둡다."
    if speaker == "ate":
        return {
            "aspects": [{"term": "배터리", "start": 0, "end": 3}, {"term": "화면", "start": 11, "end": 13}],
            "label": "mixed",
            "confidence": 0.7,
        }
    if speaker == "atsa":
        return {
            "aspect_sentiments": [
                {"aspect": "배터리", "polarity": "positive", "opinion": "오래가지만", "confidence": 0.8},
                {"aspect": "화면", "polarity": "neutral", "opinion": "어둡다", "confidence": 0.4},
            ]
        }
    if speaker == "validator":
        return {
            "issues": [],
            "suggested_label": None,
            "confidence": 0.2,
            "correction_proposals": [
                {
                    "type": "FLIP_POLARITY",
                    "aspect": "화면",
                    "new_polarity": "negative",
                    "reason": "어둡다 is negative",
                }
            ],
        }
    if speaker in ("analyst", "critic", "empath"):
        stance = {"analyst": "neutral", "critic": "con", "empath": "pro"}[speaker]
        text = {
            "analyst": "평가가 엇갈린다",
            "critic": "디스플레이가 어두워서 불편하다",
            "empath": "배터리가 오래간다",
        }[speaker]
        return {
            "speaker": speaker,
            "stance": stance,
            "planning": "-",
            "reflection": "-",
            "message": text,
            "key_points": [],
        }
    if speaker == "judge":
        return {
            "consensus": "긍정과 부정이 혼합된 평가",
            "rationale": "-",
            "key_agreements": [],
            "key_disagreements": [],
            "winner": None,
        }
    if speaker == "ate_review":
        return {"aspect_review": [], "label": "mixed", "confidence": 0.75}
    assert speaker == "atsa_review", speaker
    assert sentence in request.messages[0].content
    return {"sentiment_review": []}


def test_korean_with_function_model() -> None:
    res = run_absa_sync("배터리는 오래가지만 화면이 너무 어둡다.", model=FunctionModel(korean_model))
    assert not res.failed
    assert [(a["aspect"], a["polarity"]) for a in res.aspects] == [
        ("배터리", "positive"),
        ("화면", "negative"),
    ]
    flip = res.stage2.correction_log[0]
    assert (flip.step, flip.action, flip.applied) == ("validator", "FLIP_POLARITY", True)
    ctx = res.review_context
    assert ctx is not None
    assert [p.aspect_refs for p in ctx.rebuttal_points[:3]] == [[], ["화면"], ["배터리"]]
    assert ctx.rebuttal_points[0].fail_reason == "neutral_stance"
    assert res.label == "mixed"


def test_batch_order_and_callback() -> None:
    seen: list[int] = []

    async def go() -> list[FinalResult]:
        return await run_absa_batch(
            ["Nice.", "Great.", "Fine."],
            model=FunctionModel(aspect_free_reply, delay=0.001),
            config="abl_no_debate",
            concurrency=2,
            on_result=lambda i, _r: seen.append(i),
        )

    results = asyncio.run(go())
    assert [r.sentence for r in results] == ["Nice.", "Great.", "Fine."]
    assert sorted(seen) == [0, 1, 2]
    assert all(r.label == "positive" for r in results)
    json.dumps([r.model_dump(mode="json") for r in results])


def test_empty_sentence_is_usage_error() -> None:
    with pytest.raises(UsageError):
        asyncio.run(run_absa("  ", model=ScriptedModel([])))


def test_failed_judge_still_allows_the_override() -> None:
    # The override reads the turns' aspect hints; the judge only adds the summary (and Rule E).
    replies = persona_replies()
    replies["judge"] = ["no", "still no"]
    res = run_absa_sync(SENTENCE, model=ScriptedModel(replies))
    assert res.review_context is not None and res.review_context.summary is None
    assert res.override_stats.applied == 1
    assert res.errors["debate"].startswith("judge failed")


def test_failed_patch_judge_skips_the_patch() -> None:
    replies = patch_replies()
    replies["cj"] = [replies["cj"][0], "no", "still no"]
    res = run_absa_sync(SENTENCE, model=ScriptedModel(replies), config="patch")
    step = next(s for s in res.trace if s.name == "debate_patch")
    assert step.skipped and step.detail == "no final_patch"
    assert res.override_stats.patch_applied == 0
