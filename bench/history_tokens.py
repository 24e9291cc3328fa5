"""Prompt tokens a debate sends, by rounds, without and with a history strategy (moot.history).

A society-style debate: 4 agents speak at once each round and see every earlier turn
(``visibility: all``), no judge, majority vote. The model is an in-process FunctionModel that
answers instantly with a fixed 60-word answer and reports tokens as a server would (characters
/ 4 of each message, plus 4 a message), so the figures are the engine's own prompts, exactly,
with no server noise. For rounds 1 to 20:

- ``full``: no history option (no window known: every prompt carries every turn);
- ``window``: ``history: {strategy: window, max_tokens: 1500}``;
- ``summarize``: ``history: {strategy: summarize, max_tokens: 1500}``, summaries by a fifth
  persona (counted: their prompts are in the total, and their calls).

Run: ``python bench/history_tokens.py [--rounds 20] [--out bench/results/cost-history-2026-11-27.md]``.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

from moot import Debate
from moot.models import FunctionModel, ModelRequest, ModelResponse, Usage
from moot.models.testing import schema_instance

ANSWER = " ".join(["word"] * 60)
AGENTS = ["a1", "a2", "a3", "a4"]


def _tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def _reply(request: ModelRequest) -> ModelResponse:
    content = dict(schema_instance(request.json_schema or {}))
    for key in ("answer", "message", "content"):
        if key in content:
            content[key] = ANSWER
    text = json.dumps(content)
    prompt = sum(_tokens(m.content) + 4 for m in request.messages)
    return ModelResponse(
        text=text, usage=Usage(calls=1, prompt_tokens=prompt, completion_tokens=_tokens(text))
    )


def protocol(rounds: int, history: dict[str, Any] | None) -> dict[str, Any]:
    personas: dict[str, Any] = {k: {"name": k, "role": "Solver", "goal": "Answer correctly."} for k in AGENTS}
    personas["recorder"] = {"name": "Recorder", "role": "Summarizer", "goal": "Summarize faithfully."}
    data: dict[str, Any] = {
        "name": "society-4",
        "personas": personas,
        "order": [AGENTS],
        "visibility": "all",
        "rounds": rounds,
        "turn_output": "answer",
        "aggregation": "majority",
        "max_tokens_per_turn": 200,
    }
    if history is not None:
        data["history"] = history
    return data


STRATEGIES: dict[str, dict[str, Any] | None] = {
    "full": None,
    "window": {"strategy": "window", "max_tokens": 1500},
    "summarize": {"strategy": "summarize", "max_tokens": 1500, "summarizer": "recorder"},
}


def measure(rounds: int, history: dict[str, Any] | None) -> tuple[int, int, float]:
    """Prompt tokens and calls of one debate, and the engine's CPU ms per call."""
    model = FunctionModel(_reply)
    debate = Debate(protocol(rounds, history), model=model)
    started = time.process_time()
    result = debate.run_sync("What is 12 + 30 * 2?")
    cpu = (time.process_time() - started) * 1000
    assert result.fallback is None, result.fallback
    return result.usage.prompt_tokens, result.usage.calls, cpu / max(1, result.usage.calls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rows = []
    for r in range(1, args.rounds + 1):
        row: list[Any] = [r]
        for history in STRATEGIES.values():
            row += list(measure(r, history))
        rows.append(row)
    head = "| rounds | " + " | ".join(
        f"{name} prompt tokens | {name} calls | {name} CPU ms/call" for name in STRATEGIES
    )
    lines = [head + " |", "|" + "--:|" * (1 + 3 * len(STRATEGIES))]
    for row in rows:
        cells = [str(row[0])]
        for i in range(len(STRATEGIES)):
            tokens, calls, cpu = row[1 + 3 * i : 4 + 3 * i]
            cells += [f"{tokens:,}", str(calls), f"{cpu:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    print(table)
    if args.out is not None:
        args.out.write_text(table + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
