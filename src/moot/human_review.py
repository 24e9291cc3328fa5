"""Human review inside a LangGraph graph: pause with ``interrupt()``, resume with ``Command(resume=...)``.

Used by :func:`moot.integrations.langgraph.debate_node`, the debate subgraph and
:func:`moot.arbitration.arbitration_node` when given ``human_review=``:

* ``"split"``: pause only when the outcome needs a human (a split or low-confidence
  decision, a fallback; for arbitration, a metric flagged for review);
* ``"always"``: pause before every verdict is handed on.

The graph stops with an interrupt whose value is a JSON summary (``"type": "human_review"``,
the topic, the positions, the flagged decision and ``reason``). The client resumes it with
``Command(resume=VALUE)``, where VALUE is:

* ``{"accept": true}`` (or ``true``, or ``None``): keep the decision as it is;
* a string, or ``{"answer": "..."}``: the human's answer replaces the final answer;
* any of these dicts may carry a ``"note"``; arbitration also takes
  ``{"decisions": {"<metric>": {"agent": "<name>"} | {"value": 0.1}}}``.

An interrupt needs a checkpointer (the paused graph's state must be stored somewhere);
without one the node raises :class:`~moot.errors.UsageError` before any model call.
LangGraph is imported only when a review is asked for.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from .errors import MissingDependencyError, UsageError

__all__ = ["LOW_CONFIDENCE", "HumanDecision", "ReviewMode", "ask_human", "check_mode", "require_checkpointer"]

ReviewMode = Literal["split", "always"]
"""When a graph pauses for a human (see the module docstring)."""

LOW_CONFIDENCE = 0.6
"""Under ``"split"``, a decision or verdict whose confidence is below this goes to a human."""

T = TypeVar("T")


def check_mode(mode: str | None) -> ReviewMode | None:
    """Validate ``human_review=`` at construction time.

    Raises:
        UsageError: not None, ``"split"`` or ``"always"``.
    """
    if mode not in (None, "split", "always"):
        raise UsageError(f"human_review must be 'split', 'always' or None, not {mode!r}")
    return mode  # type: ignore[return-value]


def require_checkpointer(what: str) -> None:
    """Raise one clear error when the running graph has no checkpointer (an interrupt needs one).

    Raises:
        UsageError: no checkpointer, or not inside a LangGraph node at all.
    """
    try:
        from langgraph.config import get_config
    except ImportError:
        raise MissingDependencyError(
            "langgraph", "langgraph", "human_review pauses a LangGraph graph"
        ) from None
    try:
        config = get_config()
    except RuntimeError:
        raise UsageError(
            f"{what}: human_review works only inside a LangGraph graph (it calls interrupt())"
        ) from None
    if config.get("configurable", {}).get("__pregel_checkpointer") is None:
        raise UsageError(
            f"{what}: human_review pauses the graph with interrupt(), which needs a checkpointer: "
            "compile with graph.compile(checkpointer=MemorySaver()) or run it on the Agent Server"
        )


async def run_once(name: str, step: Callable[[], Awaitable[T]]) -> T:
    """Run ``step`` as a LangGraph task: on resume after an interrupt its result is replayed.

    A node that pauses reruns from its start when resumed; the task keeps the work before the
    pause (a whole debate) from being done, and paid for, twice. The result must be plain data.
    """
    from langgraph.func import task

    async def body() -> T:
        return await step()

    body.__name__ = name
    result: T = await task(body)()
    return result


def run_once_sync(name: str, step: Callable[[], T]) -> T:
    """:func:`run_once` for a graph run with ``invoke``: ``step`` as a LangGraph sync task."""
    from langgraph.func import task

    def body() -> T:
        return step()

    body.__name__ = name
    result: T = task(body)().result()
    return result


def ask_human(summary: dict[str, Any]) -> Any:
    """Pause the graph with ``summary`` as the interrupt's value; return the resume value."""
    from langgraph.types import interrupt

    return interrupt({"type": "human_review", "source": "moot", **summary})


@dataclass
class HumanDecision:
    """What the human answered, parsed from the resume value."""

    accepted: bool
    """True: the decision stands as it is."""
    answer: str | None = None
    """The human's own answer (replaces the final answer), if given."""
    note: str = ""
    """Free text from the reviewer."""
    decisions: dict[str, Any] | None = None
    """Arbitration only: per-metric choices."""

    @classmethod
    def parse(cls, value: Any) -> HumanDecision:
        """Read a resume value (see the module docstring).

        Raises:
            UsageError: a value of another shape.
        """
        if value is None or value is True:
            return cls(accepted=True)
        if isinstance(value, str):
            if not value.strip():
                raise UsageError("human review: the resume value is a blank answer")
            return cls(accepted=False, answer=value.strip())
        if isinstance(value, dict):
            answer = value.get("answer")
            if answer is not None and (not isinstance(answer, str) or not answer.strip()):
                raise UsageError("human review: 'answer' must be non-blank text")
            decisions = value.get("decisions")
            if decisions is not None and not isinstance(decisions, dict):
                raise UsageError("human review: 'decisions' must map metric names to choices")
            accepted = bool(value.get("accept", answer is None and decisions is None))
            note = str(value.get("note") or "")
            return cls(accepted, answer.strip() if answer else None, note, decisions)
        raise UsageError(
            f"human review: resume with a string, None/True or a dict with accept/answer/note, not {value!r}"
        )

    def content(self, reason: str) -> dict[str, Any]:
        """The human turn's content."""
        out: dict[str, Any] = {"accepted": self.accepted, "reason": reason, "note": self.note}
        if self.answer is not None:
            out["answer"] = self.answer
        if self.decisions is not None:
            out["decisions"] = self.decisions
        return out
