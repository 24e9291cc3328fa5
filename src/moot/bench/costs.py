"""What a benchmark will cost before anything is spent (``moot bench --dry-run``).

Each method's calls for each item are laid out as :mod:`moot.bench.methods` makes them (a
society agent's history grows by its own reply and its peers' each round; a preset runs the
engine's calls, :mod:`moot.estimate`; with ``--history`` or a known window each prompt's
history is fitted as the run fits it, :mod:`moot.history`), with every reply as long as
``max_tokens`` allows and the prompt tokens estimated from characters
(:func:`moot.models.pricing.estimate_tokens`, high rather than low), then priced with the
model's price (:func:`moot.models.pricing.spec_pricing`).
No model is resolved, loaded or called. The figure is what the run costs **at most**.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..history import Exchange, fit_exchanges
from ..models.base import Message
from ..models.pricing import CHARS_PER_TOKEN, estimate_tokens, spec_pricing
from ..protocol import HistorySpec
from .methods import MethodSpec, history_override
from .tasks import Item, Task

__all__ = ["MethodCost", "estimate_methods", "format_estimate"]

SAMPLE_ITEMS = 5
"""Items laid out per method; the rest are assumed alike (prompts of one task differ little)."""


@dataclass
class MethodCost:
    """One method's calls, tokens and cost at most, over all the items."""

    method: str
    calls: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None


def _society(
    task: Task,
    item: Item,
    agents: int,
    rounds: int,
    max_tokens: int,
    *,
    window: int | None = None,
    history: HistorySpec | None = None,
) -> list[int]:
    """Prompt tokens of each call of a society: its agents' histories grow every round.

    From round 1 on, each prompt's history is fitted as the run fits it (:func:`fit_exchanges`):
    to ``history``'s ``max_tokens`` and to ``window`` less ``max_tokens``, when given.
    """
    reply = "x" * int(max_tokens * CHARS_PER_TOKEN)
    question = [Message(role="user", content=item.prompt)]
    exchanges: list[Exchange] = []
    limit = None if window is None else window - max_tokens
    cap = history.max_tokens if history is not None else None
    out = []
    for r in range(rounds):
        if r and (limit is not None or cap is not None):
            sent = fit_exchanges(None, question, exchanges, prompt_limit=limit, max_tokens=cap).messages
        else:
            sent = question + [m for pair in exchanges for m in pair]
        out += [estimate_tokens(None, sent)] * agents
        if r + 1 < rounds:
            peers = task.debate_prompt(item, [reply] * (agents - 1))
            exchanges.append((Message(role="assistant", content=reply), Message(role="user", content=peers)))
    return out


def _preset(
    name: str, item: Item, model: str, history: HistorySpec | None = None
) -> tuple[list[int], list[int]]:
    """Prompt tokens and reply caps of each call of a preset's debate on ``item``."""
    from ..engine import Debate
    from ..estimate import estimate_debate

    overrides = {"history": history_override(history)} if history is not None else None
    debate = Debate(name, overrides=overrides)  # as MethodContext.debate sets it
    players = {key: p.model or model for key, p in debate.protocol.personas.items()}
    calls = estimate_debate(debate, item.prompt, None, players).calls
    return [c.prompt_tokens for c in calls], [c.max_tokens for c in calls]


def estimate_methods(
    specs: list[MethodSpec],
    task: Task,
    items: list[Item],
    model: str,
    max_tokens: int | None,
    history: HistorySpec | None = None,
) -> list[MethodCost]:
    """Each method's calls, tokens and cost at most over ``items`` (see the module docstring).

    ``history``: the run's ``--history`` (a society's prompts carry at most its ``max_tokens``
    of history; a preset has it as its protocol's ``history``).
    """
    cap = max_tokens or 256
    pricing, window = spec_pricing(model)
    sample = items[:SAMPLE_ITEMS]
    scale = len(items) / max(1, len(sample))
    out = []
    for spec in specs:
        prompts: list[int] = []
        caps: list[int] = []
        for item in sample:
            if spec.kind == "preset":
                p, c = _preset(spec.name, item, model, history)
            elif spec.kind == "society":
                p = _society(task, item, spec.agents, spec.rounds, cap, window=window, history=history)
                c = [cap] * len(p)
            else:  # single, vote:K: K samples of the question
                p = [estimate_tokens(None, [Message(role="user", content=item.prompt)])] * spec.agents
                c = [cap] * len(p)
            prompts += p
            caps += c
        prompt, completion = round(sum(prompts) * scale), round(sum(caps) * scale)
        cost = pricing.price.cost_usd(prompt, completion) if pricing.price is not None else None
        out.append(MethodCost(spec.name, round(len(prompts) * scale), prompt, completion, cost))
    return out


def format_estimate(costs: list[MethodCost], model: str, note: str | None) -> str:
    """The estimate as lines of text: one per method, then the total."""
    lines = [f"estimate on {model} (at most: every reply at its max_tokens):"]
    total: Any = 0.0
    for c in costs:
        cost = "unknown" if c.cost_usd is None else f"${c.cost_usd:.5f}"
        lines.append(
            f"  {c.method}: {c.calls:,} calls · ~{c.prompt_tokens:,} prompt + {c.completion_tokens:,} "
            f"completion tokens · {cost}"
        )
        total = None if total is None or c.cost_usd is None else total + c.cost_usd
    lines.append(f"  total: {'unknown' if total is None else f'${total:.5f}'}")
    if total is None and note:
        lines.append(f"  no price: {note}")
    return "\n".join(lines)
