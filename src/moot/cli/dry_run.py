"""``moot run --dry-run``: the prompts the first round would send, without calling a model.

The messages are built by the engine's own :func:`moot.prompting.build_messages`, with
the same prompt file, task, persona, schema and token cap a real run uses. A speaker of
round 1 who speaks after others (a sequential round, or a later group of ``order``)
sees their replies; those do not exist before the run, so its ``[HISTORY]`` names
whose replies will stand there instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..engine import Debate
from ..models.base import Message
from ..prompting import build_messages, render_context
from ..schemas import get_output
from ..transcript import Turn

__all__ = ["PlannedCall", "first_round_calls", "format_calls"]

_NONE_YET = "[HISTORY]\n(none yet)"


@dataclass
class PlannedCall:
    """One request the first round would send."""

    speaker: str
    stage: int
    """Index of the speaker's group in the round (0: speaks first)."""
    model: str
    output: str
    """Name of the reply's schema."""
    max_tokens: int
    messages: list[Message] = field(default_factory=list)
    waits_for: list[str] = field(default_factory=list)
    """Speakers whose round-1 replies this call's ``[HISTORY]`` will hold."""

    def as_json(self) -> dict[str, Any]:
        """A plain dict for ``--dry-run --json``."""
        return {
            "speaker": self.speaker,
            "round": 1,
            "stage": self.stage,
            "model": self.model,
            "output": self.output,
            "max_tokens": self.max_tokens,
            "waits_for": self.waits_for,
            "messages": [m.model_dump() for m in self.messages],
        }


def first_round_calls(debate: Debate, topic: str, context: Any, models: dict[str, str]) -> list[PlannedCall]:
    """The calls of round 1, in speaking order; ``models[key]`` names who plays ``key``.

    Raises:
        UsageError: an empty topic.
    """
    p = debate.protocol
    # start() without resolving models: it checks the topic and gives the run's visibility rule.
    run = debate.start(topic, context=context, resolve=False)
    context_json = render_context(context)
    calls: list[PlannedCall] = []
    before: list[Turn] = []  # stand-ins for the replies of earlier groups in this round
    for stage, group in enumerate(p.stages()):
        for key in group:
            persona = p.personas[key]
            output = p.output_for(key)
            messages = build_messages(
                prompt=p.prompt_for(key),
                topic=topic.strip(),
                context=context_json,
                persona=persona,
                section="HISTORY",
                turns=[],
                task=p.task_for(key, 1),
                output_type=get_output(output),
                max_tokens=p.max_tokens_per_turn,
            )
            seen = [t.speaker for t in run.visible(key, 1, before)]  # the engine's own visibility rule
            if seen:
                placeholder = "\n".join(f"- {s} [turn, round 1]: <{s}'s reply, at run time>" for s in seen)
                user = messages[1].content.replace(_NONE_YET, f"[HISTORY]\n{placeholder}", 1)
                messages = [messages[0], Message(role="user", content=user)]
            calls.append(
                PlannedCall(key, stage, models.get(key, "?"), output, p.max_tokens_per_turn, messages, seen)
            )
        before += [Turn(speaker=k, round=1, stance=p.personas[k].stance) for k in group]
    return calls


def format_calls(calls: list[PlannedCall]) -> str:
    """The calls as text for a terminal (``--json`` prints each :meth:`PlannedCall.as_json`)."""
    blocks = []
    for call in calls:
        after = f", after {', '.join(call.waits_for)}" if call.waits_for else ""
        head = (
            f"=== round 1 · {call.speaker} · model {call.model} · reply {call.output}"
            f" · max_tokens {call.max_tokens}{after} ==="
        )
        body = "\n".join(f"--- {m.role} ---\n{m.content}" for m in call.messages)
        blocks.append(f"{head}\n{body}")
    return "\n\n".join(blocks)
