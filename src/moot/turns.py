"""Transcript records built from structured-call outcomes: finished, cancelled and trimmed turns."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .models import Model
from .models.base import CallStats
from .structured import Outcome
from .transcript import Persona, Turn

__all__ = ["cancelled_turn", "trim", "trim_text", "turn_from"]


def _slot(persona: Persona, phase: str, rnd: int, output: str) -> dict[str, Any]:
    """The fields that place a turn in the transcript: who, when, which schema."""
    return {"speaker": persona.key, "round": rnd, "phase": phase, "stance": persona.stance, "output": output}


def turn_from(outcome: Outcome, persona: Persona, phase: str, rnd: int, output: str, model: str) -> Turn:
    """The transcript record of one finished structured call."""
    kind = None
    if not outcome.ok:
        kind = type(outcome.exception).__name__ if outcome.exception else "invalid_output"
    return Turn(
        **_slot(persona, phase, rnd, output),
        content=outcome.value.model_dump(mode="json") if outcome.value is not None else None,
        raw=None if outcome.ok else outcome.raw,
        error=outcome.error,
        error_kind=kind,
        repaired=outcome.repaired,
        trimmed=outcome.trimmed,
        model=outcome.model or model,
        usage=outcome.usage,
        latency_ms=outcome.latency_ms,
        queue_ms=outcome.queue_ms,
    )


def cancelled_turn(
    persona: Persona,
    phase: str,
    rnd: int,
    output: str,
    model: str,
    stats: CallStats,
    started: float,
    reason: str,
) -> Turn:
    """The record of a call cut short by the run stopping; ``usage`` keeps the requests it sent."""
    queue_ms = stats.queue_s * 1000
    # A call cut short during its repair keeps the answer it had already received.
    earlier = f" (its last answer was rejected: {stats.error})" if stats.error else ""
    return Turn(
        **_slot(persona, phase, rnd, output),
        raw=stats.raw,
        error=f"cancelled: the debate stopped ({reason}) before this turn finished{earlier}",
        error_kind="cancelled",
        cancelled=True,
        model=model,
        usage=stats.usage.model_copy(),
        latency_ms=(time.perf_counter() - started) * 1000 - queue_ms,
        queue_ms=queue_ms,
    )


def trim(turn: Turn, model: Model, cap: int) -> None:
    """Cut the main text to ``cap`` tokens (seed 000: over-long answers are trimmed)."""
    assert turn.content is not None
    for key in ("answer", "final_answer", "message", "content"):
        text = turn.content.get(key)
        if isinstance(text, str) and text:
            trimmed = trim_text(text, cap, model.count_tokens)
            if trimmed != text:
                turn.content[key] = trimmed
                turn.trimmed = True
            return


def trim_text(text: str, cap: int, count: Callable[[str], int | None]) -> str:
    """The longest word prefix of ``text`` within ``cap`` tokens (4 chars/token if no tokenizer)."""

    def tokens(s: str) -> int:
        n = count(s)
        return n if n is not None else (len(s) + 3) // 4

    if tokens(text) <= cap:
        return text
    words = text.split(" ")
    lo, hi = 0, len(words)
    while lo < hi:  # binary search: few tokenizer calls even for long texts
        mid = (lo + hi + 1) // 2
        if tokens(" ".join(words[:mid])) <= cap:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[:lo]).rstrip()
