"""Engine events as small JSON dicts on LangGraph's custom stream (``get_stream_writer()``).

Every event of a debate run inside :func:`~moot.integrations.langgraph.debate_node` or
:func:`~moot.integrations.langgraph.build_debate_graph` is written to the custom stream as
one dict with a ``type`` field and ``"source": "moot"``:

==================== ================================================================
``type``             other fields
==================== ================================================================
``debate_started``   ``debate_id``, ``topic``
``turn_started``     ``debate_id``, ``round``, ``speaker``, ``phase``
``model_request``    ``round``, ``speaker``, ``phase``, ``model``, ``attempt`` (1: the
                     repair request), ``usage``, ``finish_reason``, ``error_kind``
``turn_completed``   ``round``, ``speaker``, ``phase`` (turn/moderator), ``ok``,
                     ``text`` (at most 2,000 characters, ``truncated`` if cut),
                     ``error``, ``model``, ``usage``
``verdict``          as ``turn_completed``, for the judge's turn
``round_completed``  ``round``
``retry``, ``error`` ``round``, ``speaker``, ``message``
``fallback``         ``reason``, ``final_answer`` (the answer kept)
``answer_kept``      ``reason``: the node did not write the debate's answer into the state
``human_review``     ``reason``, ``decision``: a human's decision was recorded
``debate_completed`` ``final_answer``, ``fallback``, ``skipped``, ``usage``, ``run_id``
==================== ================================================================

Outside a LangGraph run (``await node(state)`` called directly) nothing is written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .transcript import Event, Turn

__all__ = ["TEXT_LIMIT", "event_payload", "write"]

TEXT_LIMIT = 2000
"""Characters of a turn's text sent in one stream event."""


def _usage(usage: Any) -> dict[str, int]:
    return {
        "calls": usage.calls,
        "attempts": usage.attempts,
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
    }


def _turn_fields(turn: Turn) -> dict[str, Any]:
    text = turn.text or turn.raw or ""
    out: dict[str, Any] = {
        "phase": turn.phase,
        "ok": turn.ok,
        "text": text[:TEXT_LIMIT],
        "model": turn.model,
        "usage": _usage(turn.usage),
    }
    if len(text) > TEXT_LIMIT:
        out["truncated"] = True
    if turn.error is not None:
        out["error"] = turn.error
    return out


def event_payload(event: Event) -> list[dict[str, Any]]:
    """The stream dicts for one engine event (``debate_completed`` after a fallback gives two)."""
    base: dict[str, Any] = {"type": event.kind, "source": "moot", "debate_id": event.debate_id}
    if event.round is not None:
        base["round"] = event.round
    if event.speaker is not None:
        base["speaker"] = event.speaker
    if event.phase is not None:
        base["phase"] = event.phase
    if event.request is not None:
        req = event.request
        fields = {
            "model": req.response_model or req.model,
            "attempt": req.attempt,
            "usage": _usage(req.usage),
        }
        return [{**base, **fields, "error_kind": req.error_kind, "finish_reason": req.finish_reason}]
    if event.kind == "debate_started":
        return [{**base, "topic": event.message}]
    if event.turn is not None:
        base["type"] = "verdict" if event.turn.phase == "judge" else "turn_completed"
        return [{**base, **_turn_fields(event.turn)}]
    if event.result is not None:
        r = event.result
        done = {
            **base,
            "final_answer": r.final_answer,
            "fallback": r.fallback,
            "skipped": r.skipped,
            "usage": _usage(r.usage),
            "run_id": r.id,
        }
        if r.fallback is None:
            return [done]
        fallback = {**base, "type": "fallback", "reason": r.fallback, "final_answer": r.final_answer}
        return [fallback, done]
    if event.message is not None:
        base["message"] = event.message
    return [base]


def _writer() -> Callable[[Any], None] | None:
    try:
        from langgraph.config import get_stream_writer
    except ImportError:
        return None
    try:
        return get_stream_writer()
    except RuntimeError:  # not inside a LangGraph node
        return None


def write(payload: dict[str, Any]) -> None:
    """Write one dict to the custom stream of the LangGraph node this runs in (if any)."""
    writer = _writer()
    if writer is not None:
        writer(payload)


def stream_event(event: Event) -> None:
    """An event callback: the event's dicts to the custom stream."""
    writer = _writer()
    if writer is None:
        return
    for payload in event_payload(event):
        writer(payload)
