"""``Debate(store=...)``: a debate run from Python, recorded as ``moot run`` records it."""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .errors import UsageError
from .models import Model, default_model_spec
from .runs.recording import debate_config, recording
from .transcript import DebateResult, Event

if TYPE_CHECKING:  # pragma: no cover
    from .debate_run import EventCallback
    from .engine import Debate
    from .runs.store import RunStore

__all__ = ["recorded_run"]

RunFn = Callable[[str, Any, "str | None", bool, "EventCallback | None"], Awaitable[DebateResult]]


def _spec(spec: str | Model | None) -> str | None:
    return spec.name if isinstance(spec, Model) else spec


async def recorded_run(
    debate: Debate,
    store: RunStore,
    topic: str,
    context: Any,
    initial_answer: str | None,
    debate_mode: bool,
    on_event: EventCallback | None,
    run: RunFn,
) -> DebateResult:
    """Run ``run(...)`` (the debate) inside a recording: its run row, each event as it comes, the result.

    The record is the one ``moot run`` writes (the same config, so ``moot run --from ID``
    re-runs it). Writes made while debates run are gathered and committed on the event loop
    every 10 ms; when the last recorded run of ``debate`` ends, the rest is committed at once,
    so nothing is left pending when the caller's event loop closes.
    """
    if not topic or not topic.strip():  # a usage error is not a run: nothing to record
        raise UsageError("the topic is empty")
    model = _spec(debate._default_spec)
    roles = {k: str(_spec(v)) for k, v in debate._role_specs.items()}
    config = debate_config(
        debate,
        topic.strip(),
        model=model,
        role_models=roles,
        context=context,
        initial_answer=initial_answer,
        debate_mode=debate_mode,
    )
    debate._recorded_in_flight += 1
    try:
        with recording(
            "run",
            title=topic.strip(),
            model=model or default_model_spec(),
            config=config,
            store=store,
            wait=False,
        ) as rec:

            def both(event: Event) -> Awaitable[None] | None:
                rec.on_event(event)  # stored first: an error in the caller's callback loses nothing
                return on_event(event) if on_event is not None else None

            result = await run(topic, context, initial_answer, debate_mode, both)
            rec.finish(result, status="fell_back" if result.fallback else "complete")
        return result
    finally:
        debate._recorded_in_flight -= 1
        if debate._recorded_in_flight == 0:
            try:
                store.flush()
            except sqlite3.Error as exc:  # the result is the caller's either way; say so loudly
                print(f"moot: warning: cannot write the run store {store.path} ({exc})", file=sys.stderr)
