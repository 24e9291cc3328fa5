"""What a debate will cost before anything is spent: calls x tokens x price (``--dry-run``).

Every call of every round is laid out as the engine would make it (its prompt file, task,
persona, visibility rule and ``history`` option; no early stop), with stand-in replies as long
as their ``max_tokens`` allows, and priced with each model's price (:mod:`moot.models.pricing`).
The prompt tokens are :func:`~moot.models.pricing.estimate_tokens`' (high rather than low), the
completion tokens every reply's cap: the figure is what the debate costs **at most**. A prompt
that would pass its model's known window is shortened as the run would shorten it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .engine import Debate
from .history import fit_turns, summary_task
from .models.base import Message, Usage
from .models.pricing import CHARS_PER_TOKEN, estimate_tokens, spec_pricing
from .prompting import build_messages, render_context
from .schemas import get_output
from .transcript import Round, Turn

__all__ = ["CallEstimate", "Estimate", "estimate_debate"]


@dataclass
class CallEstimate:
    """One call the debate would make, at most."""

    speaker: str
    phase: str
    round: int
    model: str
    prompt_tokens: int
    max_tokens: int
    cost_usd: float | None
    left_out: int = 0
    """Turns its history leaves out to fit the window or the ``history`` option."""


@dataclass
class Estimate:
    """The calls of a whole debate, their tokens and cost at most, and each model's window."""

    calls: list[CallEstimate] = field(default_factory=list)
    windows: dict[str, int | None] = field(default_factory=dict)
    """Each model's context window when known without asking a server (None: unknown)."""
    notes: list[str] = field(default_factory=list)
    """Unpriced models (why their cost is unknown)."""

    @property
    def usage(self) -> Usage:
        """The calls' tokens and cost as a Usage (``cost_usd`` None when a model has no price)."""
        cost = (
            None if any(c.cost_usd is None for c in self.calls) else sum(c.cost_usd or 0 for c in self.calls)
        )
        return Usage(
            calls=len(self.calls),
            prompt_tokens=sum(c.prompt_tokens for c in self.calls),
            completion_tokens=sum(c.max_tokens for c in self.calls),
            cost_usd=cost,
            cost_note="; ".join(self.notes) or None,
        )

    def as_json(self) -> dict[str, Any]:
        """Plain data for ``--dry-run --json``."""
        u = self.usage
        return {
            "calls": u.calls,
            "prompt_tokens": u.prompt_tokens,
            "completion_tokens_at_most": u.completion_tokens,
            "cost_usd_at_most": u.cost_usd,
            "cost_note": u.cost_note,
            "windows": self.windows,
            "largest_prompt_tokens": max((c.prompt_tokens for c in self.calls), default=0),
            "calls_shortened": sum(1 for c in self.calls if c.left_out),
        }

    def lines(self) -> list[str]:
        """The estimate as a few lines of text."""
        u = self.usage
        cost = "unknown" if u.cost_usd is None else "$0" if u.cost_usd == 0 else f"${u.cost_usd:.5f}"
        out = [
            f"estimate (at most: every reply at its max_tokens): {u.calls} calls · ~{u.prompt_tokens:,} "
            f"prompt + {u.completion_tokens:,} completion tokens · cost {cost}"
        ]
        out += [f"  no price: {n}" for n in self.notes]
        for name, window in self.windows.items():
            largest = max((c.prompt_tokens + c.max_tokens for c in self.calls if c.model == name), default=0)
            shortened = sum(1 for c in self.calls if c.model == name and c.left_out)
            said = f"{window:,} tokens" if window else "unknown (asked of the server once a prompt needs it)"
            line = f"  {name}: window {said}; largest call ~{largest:,} tokens"
            if shortened:
                line += f"; {shortened} calls' history shortened to fit"
            out.append(line)
        return out


def _stand_in(key: str, number: int, phase: str, stance: Any, max_tokens: int) -> Turn:
    """A reply as long as ``max_tokens`` allows (the most a real one can take)."""
    text = "x" * int(max_tokens * CHARS_PER_TOKEN)
    phase_name: Any = phase
    return Turn(speaker=key, round=number, phase=phase_name, stance=stance, content={"message": text})


def _round_turns(rnd: Round) -> list[Turn]:
    return rnd.turns + ([rnd.moderator] if rnd.moderator is not None else [])


def estimate_debate(debate: Debate, topic: str, context: Any, players: Mapping[str, str]) -> Estimate:
    """Every call of ``debate`` on ``topic``, priced at most (see the module docstring).

    ``players[key]`` is the model spec that plays persona ``key``: no model is resolved, loaded or
    called (:func:`~moot.models.pricing.spec_pricing`); tokens are estimated from characters, and
    windows are those the spec or the price table give.

    Raises:
        UsageError: an empty topic, or a malformed price or window option.
    """
    p = debate.protocol
    run = debate.start(topic, context=context, resolve=False)
    context_json = render_context(context)
    history = p.history
    estimate = Estimate()
    rounds: list[Round] = []
    run.result.rounds = rounds

    def call(
        key: str,
        phase: str,
        number: int,
        prompt: str,
        section: str,
        visible: list[Turn],
        task: str,
        output: str,
        max_tokens: int,
    ) -> Turn:
        spec = players.get(key, "?")
        pricing, window = spec_pricing(spec)
        estimate.windows.setdefault(spec, window)
        output_type = get_output(output)

        def build(turns: list[Turn], note: str) -> list[Message]:
            return build_messages(
                prompt=prompt,
                topic=topic.strip(),
                context=context_json,
                persona=p.personas[key],
                section=section,
                turns=turns,
                task=task + note,
                output_type=output_type,
                max_tokens=max_tokens,
            )

        limit = None if window is None else window - max_tokens
        fitted = fit_turns(None, visible, build, prompt_limit=limit, spec=history)
        tokens = fitted.tokens or estimate_tokens(None, fitted.messages)
        cost = pricing.price.cost_usd(tokens, max_tokens) if pricing.price is not None else None
        if pricing.price is None and pricing.note and pricing.note not in estimate.notes:
            estimate.notes.append(pricing.note)
        estimate.calls.append(
            CallEstimate(key, phase, number, spec, tokens, max_tokens, cost, fitted.left_out)
        )
        return _stand_in(key, number, phase, p.personas[key].stance, max_tokens)

    summaries: dict[int, Turn] = {}

    def summarized(visible: list[Turn], upto: int) -> list[Turn]:
        if history is None or history.strategy != "summarize" or upto < 1:
            return visible
        if not any(t.round <= upto for t in visible):
            return visible
        for k in range(1, upto + 1):
            if k not in summaries:
                key = history.summarizer or next(
                    (s.persona for s in (p.judge, p.moderator) if s is not None), p.speakers()[0]
                )
                before = [summaries[k - 1]] if k > 1 else []
                these = _round_turns(rounds[k - 1])
                summaries[k] = call(
                    key,
                    "summary",
                    k,
                    "history_summarizer.md",
                    "ALL_TURNS",
                    [*before, *these],
                    summary_task(k),
                    "message",
                    history.summary_max_tokens,
                )
        return [summaries[upto], *(t for t in visible if t.round > upto)]

    for number in range(1, p.rounds + 1):
        rnd = Round(number=number)
        rounds.append(rnd)
        for group in p.stages():
            seen = [t for t in rnd.turns]  # earlier stages of this round
            made = []
            for key in group:
                visible = summarized(run.visible(key, number, seen), number - 2)
                made.append(
                    call(
                        key,
                        "turn",
                        number,
                        p.prompt_for(key),
                        "HISTORY",
                        visible,
                        p.task_for(key, number),
                        p.output_for(key),
                        p.max_tokens_per_turn,
                    )
                )
            rnd.turns.extend(made)
        if p.moderator is not None:
            m = p.moderator
            rnd.moderator = call(
                m.persona,
                "moderator",
                number,
                m.prompt,
                "ALL_TURNS",
                summarized(list(rnd.turns), number - 1),
                m.task,
                m.output,
                m.max_tokens or p.max_tokens_per_turn,
            )
    if p.judge is not None:
        j = p.judge
        every = [t for r in rounds for t in _round_turns(r)]
        call(
            j.persona,
            "judge",
            p.rounds,
            j.prompt,
            "ALL_TURNS",
            summarized(every, p.rounds - 1),
            j.task,
            j.output,
            j.max_tokens or p.max_tokens_per_turn,
        )
    return estimate
