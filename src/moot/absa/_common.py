"""Helpers shared by the ABSA stages: prompt files, traced structured calls, span checks."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from ..models.base import Message, Model, Usage
from ..structured import ask, schema_hint
from ..transcript import Event, RequestRecord
from .schemas import StageEvent, StageRequest, TraceStep

if TYPE_CHECKING:
    from .config import AbsaConfig

T = TypeVar("T", bound=BaseModel)

__all__ = ["EventFn", "ProgressFn", "Recorder", "find_span", "load_prompt", "render_prompt"]


def load_prompt(name: str) -> str:
    """The text of ``moot/prompts/absa_{name}.md``."""
    return resources.files("moot").joinpath(f"prompts/absa_{name}.md").read_text("utf-8")


def render_prompt(name: str, output_type: type[BaseModel], **values: Any) -> str:
    """Fill a prompt's ``{{KEY}}`` markers; ``{{SCHEMA}}`` is the output type's field list.

    Values that are not strings are written as JSON (non-ASCII kept, for Korean).
    """
    text = load_prompt(name).replace("{{SCHEMA}}", schema_hint(output_type))
    for key, value in values.items():
        rendered = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        text = text.replace("{{" + key.upper() + "}}", rendered)
    return text


ProgressFn = Callable[[str, TraceStep | None], None]
"""``on_progress(name, None)`` when a step starts, ``on_progress(name, step)`` when it has ended."""

EventFn = Callable[[StageEvent | Event], None]
"""``on_event(event)``: each step's start and end, each stage's output, and every debate event."""


@dataclass
class Recorder:
    """Collects the process trace, usage and failed calls of one pipeline run."""

    started: float = field(default_factory=time.perf_counter)
    trace: list[TraceStep] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    errors: dict[str, str] = field(default_factory=dict)
    requests: list[StageRequest] = field(default_factory=list)
    """Every request the stage calls sent, with its text, as each ended (the run's record)."""
    on_progress: ProgressFn | None = None
    """Told as each step starts and ends (``moot absa`` shows it), so a long run is not silent."""
    on_event: EventFn | None = None
    """Told the same and more (stage outputs, debate events), for a record written as it happens."""

    def emit(self, event: StageEvent | Event) -> None:
        """Pass ``event`` to ``on_event``."""
        if self.on_event is not None:
            self.on_event(event)

    def progress(self, name: str) -> None:
        """Show ``name`` as what runs now (``on_progress`` only: nothing is recorded)."""
        if self.on_progress is not None:
            self.on_progress(name, None)

    def begin(self, name: str) -> None:
        """Say that step ``name`` starts."""
        self.progress(name)
        self.emit(StageEvent(kind="step_started", name=name))

    def now_ms(self) -> float:
        """Milliseconds since the run started."""
        return (time.perf_counter() - self.started) * 1000

    def step(
        self, name: str, started_ms: float, *, ok: bool = True, skipped: bool = False, detail: str = ""
    ) -> None:
        """Record a finished step that started at ``started_ms``."""
        step = TraceStep(
            name=name,
            ok=ok,
            skipped=skipped,
            started_ms=round(started_ms, 3),
            duration_ms=round(self.now_ms() - started_ms, 3),
            detail=detail,
        )
        self.trace.append(step)
        if self.on_progress is not None:
            self.on_progress(name, step)
        self.emit(StageEvent(kind="step_completed", name=name, step=step))

    def skip(self, name: str, detail: str) -> None:
        """Record a step that did not run."""
        self.step(name, self.now_ms(), skipped=True, detail=detail)

    async def call(
        self,
        model: Model,
        speaker: str,
        prompt: str,
        user: str,
        output_type: type[T],
        config: AbsaConfig,
        errors: dict[str, str],
    ) -> T | None:
        """One structured call via :func:`moot.structured.ask`, traced.

        Uses the config's ``max_tokens`` and ``temperature``. On failure it returns None and
        records the error both on the run and in ``errors`` (the calling stage's own result).
        Each request it sends is kept in ``requests`` as it ends (a cut-off call keeps those).
        """
        self.begin(speaker)
        t0 = self.now_ms()
        sent: list[StageRequest] = []

        def on_request(record: RequestRecord) -> None:
            sent.append(StageRequest.of(speaker, record))
            self.requests.append(sent[-1])

        outcome = await ask(
            model,
            [Message(role="system", content=prompt), Message(role="user", content=user)],
            output_type,
            max_tokens=config.max_tokens,
            temperature=config.temperature,
            metadata={"speaker": speaker, "phase": "absa"},
            on_request=on_request,
        )
        if outcome.value is not None and sent and sent[-1].error_kind is None:
            sent[-1].parsed = outcome.value.model_dump(mode="json")
        self.usage = self.usage + outcome.usage
        if outcome.value is None:
            error = outcome.error or "failed"
            self.errors[speaker] = errors[speaker] = error
            self.step(speaker, t0, ok=False, detail=error[:300])
            return None
        self.step(speaker, t0, detail="repaired" if outcome.repaired else "")
        assert isinstance(outcome.value, output_type)
        return outcome.value


def find_span(
    sentence: str, text: str, start: int | None = None, end: int | None = None
) -> tuple[int, int] | None:
    """Verify ``sentence[start:end] == text``, or locate ``text`` in the sentence.

    Small models often get offsets wrong but copy the words right, so a wrong
    span is repaired to the occurrence of ``text`` nearest the claimed start
    (exact match first, then case-insensitive). Returns None when ``text`` does
    not occur in the sentence at all.
    """
    if not text:
        return None
    if (
        start is not None
        and end is not None
        and 0 <= start < end <= len(sentence)
        and sentence[start:end] == text
    ):
        return start, end
    for hay, needle in ((sentence, text), (sentence.casefold(), text.casefold())):
        if len(hay) != len(sentence):  # casefold changed lengths (e.g. German ß): offsets would lie
            continue
        hits = []
        i = hay.find(needle)
        while i >= 0:
            hits.append(i)
            i = hay.find(needle, i + 1)
        if hits:
            best = min(hits, key=lambda h: abs(h - (start or 0)))
            return best, best + len(needle)
    return None
