"""Human review of a debate's outcome in a LangGraph graph (``human_review=``, :mod:`moot.human_review`)."""

from __future__ import annotations

from typing import Any

import moot.graph_stream as _lg_stream

from ..human_review import LOW_CONFIDENCE, HumanDecision, ReviewMode, ask_human
from ..transcript import DebateResult, Turn

__all__ = ["review"]

POSITION_TEXT = 500
"""Characters of each position shown to the reviewer."""


def review_reason(result: DebateResult, mode: ReviewMode) -> str | None:
    """Why this outcome goes to a human under ``mode``, or None."""
    if result.skipped:
        return None
    if mode == "always":
        return "every outcome is reviewed (human_review='always')"
    if result.fallback:
        return f"the debate fell back: {result.fallback}"
    decision = result.decision
    if decision is not None:
        if decision.label in (None, "UNCERTAIN"):
            return f"split decision ({decision.label or 'no label'})"
        if decision.confidence is not None and decision.confidence < LOW_CONFIDENCE:
            return f"low confidence: {decision.confidence:.2f} < {LOW_CONFIDENCE}"
    verdict = result.verdict
    confidence = verdict.get("confidence") if verdict is not None and verdict.ok else None
    if isinstance(confidence, int | float) and confidence < LOW_CONFIDENCE:
        return f"low confidence verdict: {confidence:.2f} < {LOW_CONFIDENCE}"
    return None


def summary(result: DebateResult, reason: str) -> dict[str, Any]:
    """The interrupt's JSON value: what the reviewer needs to decide."""
    last = result.rounds[-1].turns if result.rounds else []
    positions = [
        {
            "speaker": t.speaker,
            "round": t.round,
            "stance": t.stance,
            "text": t.text[:POSITION_TEXT],
            "confidence": t.get("confidence"),
        }
        for t in last
    ]
    decision = result.decision
    return {
        "run_id": result.id,
        "topic": result.topic,
        "protocol": result.protocol,
        "positions": positions,
        "decision": None
        if decision is None
        else {"label": decision.label, "confidence": decision.confidence},
        "final_answer": result.final_answer,
        "fallback": result.fallback,
        "reason": reason,
        "resume_with": "{'accept': true}, an answer string, or {'answer': '...', 'note': '...'}",
    }


def review(result: DebateResult, mode: ReviewMode | None) -> bool:
    """Pause for a human when ``mode`` says so; record their decision in ``result``.

    Returns True when a human reviewed it (``result.human_review`` is set and, if they gave
    an answer, ``final_answer`` is theirs). Called inside a LangGraph node (``interrupt()``).
    """
    reason = None if mode is None else review_reason(result, mode)
    if reason is None:
        return False
    decision = HumanDecision.parse(ask_human(summary(result, reason)))
    rnd = result.rounds[-1].number if result.rounds else 0
    content = decision.content(reason)
    result.human_review = Turn(
        speaker="human", round=rnd, phase="human", output="human_review", content=content, model="human"
    )
    if decision.answer is not None:
        result.final_answer = decision.answer
    _lg_stream.write(
        {
            "type": "human_review",
            "source": "moot",
            "debate_id": result.id,
            "reason": reason,
            "decision": content,
        }
    )
    return True
