"""Scripted replies for end-to-end ABSA pipeline tests (routed by request.metadata["speaker"])."""

from __future__ import annotations

from typing import Any

from moot.models.base import ModelRequest

SENTENCE = "The battery lasts all day but the screen is dim."
B0 = SENTENCE.index("battery")
S0 = SENTENCE.index("screen")
OP0 = SENTENCE.index("lasts all day")


def stage1_replies() -> dict[str, list[Any]]:
    return {
        "ate": [
            {
                "aspects": [
                    {"term": "battery", "start": B0, "end": B0 + 7},
                    {"term": "screen", "start": 99, "end": 105},
                ],  # wrong offsets: repaired
                "label": "Mixed",
                "confidence": 80,  # percentage: clamped to 0.8
            }
        ],
        "atsa": [
            {
                "aspect_sentiments": [
                    {
                        "aspect": "battery",
                        "polarity": "positive",
                        "opinion": "lasts all day",
                        "opinion_start": OP0,
                        "opinion_end": OP0 + 13,
                        "confidence": 0.9,
                    },
                    # wrong polarity: the debate override corrects it
                    {"aspect": "screen", "polarity": "positive", "opinion": "dim", "confidence": 0.6},
                ]
            }
        ],
        "validator": [
            {
                "issues": [{"type": "contrast", "severity": "medium", "description": "but"}],
                "suggested_label": "mixed",
                "confidence": 0.7,
                "correction_proposals": [],
            }
        ],
    }


def stage2_replies() -> dict[str, list[Any]]:
    return {
        "ate_review": [
            {"aspect_review": [{"action": "keep", "term": "battery"}], "label": "mixed", "confidence": 0.85}
        ],
        "atsa_review": [{"sentiment_review": [{"action": "maintain", "aspect": "battery"}]}],
    }


def prt(speaker: str, stance: str, message: str, key_points: list[str]) -> dict[str, Any]:
    return {
        "speaker": speaker,
        "stance": stance,
        "planning": "plan",
        "reflection": "reflect",
        "message": message,
        "key_points": key_points,
    }


def persona_replies(rounds: int = 2) -> dict[str, list[Any]]:
    out = {**stage1_replies(), **stage2_replies()}
    out["analyst"] = [
        prt("analyst", "neutral", "Both the battery and the screen are discussed.", [])
    ] * rounds
    out["critic"] = [prt("critic", "con", "The screen is dim, a real flaw.", ["dim screen"])] * rounds
    out["empath"] = [prt("empath", "pro", "The battery lasting all day is great.", ["battery"])] * rounds
    out["judge"] = [
        {
            "winner": None,
            "consensus": "The panel found the review mixed.",
            "key_agreements": ["battery good", "screen dim"],
            "key_disagreements": [],
            "rationale": "contrast between two aspects",
        }
    ]
    return out


def patch_replies() -> dict[str, list[Any]]:
    out = {**stage1_replies(), **stage2_replies()}
    edit = {
        "op": "set_polarity",
        "target": {"aspect_ref": "screen"},
        "value": "negative",
        "evidence": "dim",
        "confidence": 0.9,
    }
    out["epm"] = [{"agent": "EPM", "proposed_edits": [edit]}]
    out["tan"] = [{"agent": "TAN", "proposed_edits": []}]
    judgement = {
        "final_patch": [
            edit,
            {"op": "confirm_tuple", "target": {"aspect_ref": "battery", "polarity": "positive"}},
            {"op": "drop_tuple", "target": {"aspect_ref": "keyboard"}},
        ],
        "final_tuples": [
            {"aspect_ref": "battery", "polarity": "positive"},
            {"aspect_ref": "screen", "polarity": "negative"},
        ],
        "unresolved_conflicts": [],
        "sentence_polarity": "mixed",
        "sentence_evidence_spans": ["the screen is dim", "not in the sentence"],
    }
    # cj speaks once as a speaker, then judges (the judge persona of the patch preset is cj)
    out["cj"] = [{"agent": "CJ", "proposed_edits": [edit]}, judgement]
    return out


def aspect_free_reply(request: ModelRequest) -> dict[str, Any]:
    """A FunctionModel brain for the ABSA stage calls: no aspects, a positive label, no edits."""
    speaker = request.metadata["speaker"]
    if speaker == "ate":
        return {"aspects": [], "label": "positive", "confidence": 0.9}
    if speaker == "validator":
        return {"issues": [], "suggested_label": None, "confidence": 0.0}
    if speaker == "ate_review":
        return {"aspect_review": [], "label": "positive", "confidence": 0.9}
    return {"sentiment_review": []}
