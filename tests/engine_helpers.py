"""Replies and models shared by the engine tests (test_engine, test_faults_engine)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from moot import FunctionModel, ModelRequest


def ans(text: str, conf: float = 0.5) -> dict[str, object]:
    """A valid ``answer`` turn reply."""
    return {"answer": text, "confidence": conf, "citations": []}


def critical_fails_others_wait(error: BaseException, cancelled: list[str]) -> FunctionModel:
    """A model whose ``critical`` turn raises ``error`` while every other turn sleeps 5 s.

    The speakers whose sleep is cancelled are appended to ``cancelled``, so a test can
    check that a failed sibling cancels the rest of its group at once.
    """

    async def fn(req: ModelRequest) -> object:
        if req.metadata["speaker"] == "critical":
            raise error
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            cancelled.append(req.metadata["speaker"])
            raise
        return ans("never")

    return FunctionModel(fn)


GOLD_SENTENCE = {
    "id": "1",
    "sentence": "The food was great.",
    "aspects": [{"term": "food", "start": 4, "end": 8, "polarity": "positive"}],
}
"""One gold ABSA example, as ``moot absa-eval`` reads it."""


def write_gold(path: Path) -> Path:
    """Write a one-sentence gold file for ``moot absa-eval`` at ``path``; returns it."""
    path.write_text(json.dumps(GOLD_SENTENCE) + "\n")
    return path
