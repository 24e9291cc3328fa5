"""The whole ABSA pipeline: Stage 1 -> debate -> review context -> Stage 2 -> moderator.

::

    from moot.absa import run_absa_sync
    result = run_absa_sync("The pasta was great but the service was slow.", model="local")
    result.label, result.aspects, result.moderator.applied_rules
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ..deadline import Deadline, pipeline_timeout_s, timeout_scope
from ..errors import UsageError
from ..jsontext import check_unique_ids
from ..models import default_model_spec, resolve_model, run_with_model
from ..models.base import Model, Usage, unit_scope
from ..models.cache import cache_scope
from ..observe import PipelineEvent, RunStart, degraded_status, observed
from ..transcript import DebateResult, Event
from ._common import EventFn, ProgressFn, Recorder
from .config import AbsaConfig, load_config
from .moderator import moderate
from .review_context import build_review_context
from .schemas import FinalResult, ModeratorInputs, ReviewContext, Stage1Result, StageEvent, ValidatorSignal
from .stage1 import run_stage1
from .stage2 import run_stage2

__all__ = [
    "DEADLINE_ERROR",
    "BatchOutcome",
    "default_timeout_s",
    "observed_batch",
    "run_absa",
    "run_absa_batch",
    "run_absa_sync",
]

_T = TypeVar("_T")

ConfigLike = AbsaConfig | str | Path | dict[str, Any] | None


async def _debate(
    sentence: str,
    stage1: Stage1Result,
    model: Model,
    cfg: AbsaConfig,
    rec: Recorder,
    deadline: Deadline | None,
) -> DebateResult:
    # Imported here so the pure parts of moot.absa load without the engine.
    from ..engine import Debate

    def on_event(event: Event) -> None:  # the debate is the long stage: say who speaks
        if event.kind == "turn_started":
            rec.progress(f"debate: {event.speaker} (round {event.round})")
        rec.emit(event)

    # Under the run's deadline the debate ends at the earlier of it and its own budget, by
    # itself, so its requests (cut-off turns included) count in its usage; an interrupt
    # cancels it as any task.
    debate = Debate(cfg.protocol(), model=model)
    result = await debate.run(sentence, context=stage1.context(), on_event=on_event, deadline=deadline)
    if result.fallback and deadline is not None and deadline.expired():
        rec.usage = rec.usage + result.usage
        rec.errors["debate"] = result.fallback
        raise _DeadlinePassed
    return result


class _DeadlinePassed(Exception):
    """Internal: the run's deadline ended the debate; the sentence ends as a deadline result."""


def _moderator_inputs(
    stage1: Stage1Result, result: FinalResult, context: ReviewContext | None
) -> ModeratorInputs:
    validator = None
    if stage1.validator is not None:
        v = stage1.validator
        validator = ValidatorSignal(
            issues=[i.model_dump() for i in v.issues],
            suggested_label=v.suggested_label,
            confidence=v.confidence,
        )
    return ModeratorInputs(
        stage1_ate=stage1.ate,
        stage1_atsa=stage1.atsa,
        stage2_ate=result.stage2.ate,
        stage2_atsa=result.stage2.atsa,
        validator=validator,
        final_aspect_sentiments=[s.model_dump() for s in result.stage2.sentiments],
        debate_summary=context.summary if context is not None else None,
    )


async def run_absa(
    sentence: str,
    *,
    model: str | Model | None = None,
    config: ConfigLike = None,
    on_progress: ProgressFn | None = None,
    on_event: EventFn | None = None,
    timeout_s: float | None = None,
    deadline: Deadline | None = None,
    store: Any = None,
    cache: Any = None,
) -> FinalResult:
    """Analyse one sentence.

    The analysis is one run (kind ``absa``) for its observers (:mod:`moot.observe`): with
    ``store=`` it is recorded as one run, with every step, stage output and debate event; it
    ends ``fell_back`` when a call failed. Inside a batch it is part of the batch's run.

    Args:
        sentence: the sentence (any language; the shipped synonyms cover Korean and English).
        model: a ``provider:model`` spec, a Model, or None for the embedded ``local`` model.
        config: an :class:`AbsaConfig`, a shipped config name, a YAML path, a dict, or None (defaults).
        on_progress: ``on_progress(step, None)`` as each step (and debate turn) starts and
            ``on_progress(step, trace_step)`` as a step ends.
        on_event: ``on_event(event)`` with a :class:`StageEvent` as each step starts and ends and
            as Stage 1, the review context and Stage 2 are done, and each debate
            :class:`~moot.transcript.Event` as it happens (``moot absa`` records them all, so a
            killed run keeps every completed step and turn).
        timeout_s: seconds the run may take (``--timeout``); None: the default deadline,
            :func:`default_timeout_s` (sized by :mod:`moot.deadline` for the config and the
            model: on a remote backend 300 s for the stage calls plus the debate's own
            budget, 300 s for the shipped presets, so 600 s; with a declared speed, e.g.
            ``local``, an estimate of every call at that speed). At the deadline the run
            stops and returns what it completed (trace, usage, failed calls) with a
            ``deadline`` entry in ``errors`` (saying which deadline), so the result counts
            as failed.
        deadline: a caller's deadline (a batch's): the run ends at the earlier of it and its
            own (``timeout_s`` or the default), the same way. The debate keeps its own budget
            inside either.
        store: record the run in a run store: a store file, an open
            :class:`~moot.runs.RunStore`, True for ``$MOOT_STORE`` / ``./.moot/runs.db``, or None
            (the default) for nothing.
        cache: answer model requests from a response cache (:mod:`moot.models.cache`): a cache
            file, a ``ResponseCache``, or True for ``$MOOT_CACHE`` / ``./.moot/cache.db``; None
            (the default) sends every request.

    Returns:
        The final result; failed calls are recorded in ``errors`` (never filled in).

    Raises:
        UsageError: empty sentence, bad config (``ConfigError``) or unresolvable model spec.
    """
    if not sentence or not sentence.strip():
        raise UsageError("the sentence is empty")
    with cache_scope(cache):
        return await _run_absa(sentence, model, config, on_progress, on_event, timeout_s, deadline, store)


async def _run_absa(
    sentence: str,
    model: str | Model | None,
    config: ConfigLike,
    on_progress: ProgressFn | None,
    on_event: EventFn | None,
    timeout_s: float | None,
    deadline: Deadline | None,
    store: Any,
) -> FinalResult:
    cfg = load_config(config)
    mdl = resolve_model(model)
    spec = _spec(model)
    config_json = {"config": cfg.model_dump(mode="json"), "model": spec, "sentence": sentence}
    start = RunStart(kind="absa", title=sentence, model=spec or default_model_spec(), config=config_json)
    with observed(start, store=store) as run:

        def forward(event: StageEvent | Event) -> None:
            if not isinstance(event, Event):  # a debate's events reach the run by themselves
                run.emit(event)
            if on_event is not None:
                on_event(event)

        rec = Recorder(on_progress=on_progress, on_event=forward)
        result = await _analyse(sentence, mdl, cfg, rec, timeout_s, deadline)
        run.end("fell_back" if result.failed else "complete", result, summary=_endpoints(mdl))
    return result


def _spec(model: str | Model | None) -> str | None:
    return model.name if isinstance(model, Model) else model


async def default_timeout_s(config: AbsaConfig, model: Model) -> float:
    """The default deadline in seconds of one sentence (:func:`run_absa` without ``timeout_s``).

    :func:`moot.deadline.pipeline_timeout_s` of the config's stage calls and its debate (if on),
    at the model's declared speed (``local`` measures its own when it loads; None: remote).
    """
    speed = await model.expected_speed()
    return pipeline_timeout_s(config.stage_calls(), config.protocol() if config.debate_on else None, speed)


async def _analyse(
    sentence: str,
    mdl: Model,
    cfg: AbsaConfig,
    rec: Recorder,
    timeout_s: float | None,
    given: Deadline | None,
) -> FinalResult:
    """:func:`run_absa` inside its observed run."""
    if given is not None and given.expired():  # e.g. queued in a batch past its deadline
        result = deadline_result(sentence, cfg)
        result.stage_requests = []
        return result
    own = timeout_s if timeout_s is not None else await default_timeout_s(cfg, mdl)
    deadline = Deadline.within(own, given)
    default = timeout_s is None and deadline is not given  # the default deadline is the one that counts
    try:
        result = await _pipeline(sentence, mdl, cfg, rec, deadline)
    except _DeadlinePassed:
        result = deadline_result(sentence, cfg, default_s=own if default else None)
        result.trace, result.usage = rec.trace, rec.usage
        result.errors = dict(rec.errors) | result.errors
    result.stage_requests = rec.requests
    return result


async def _bounded(step: Awaitable[_T], deadline: Deadline | None) -> _T:
    """Await one stage under ``deadline``; its passing raises :class:`_DeadlinePassed`."""
    try:
        async with timeout_scope(deadline) as scope:
            return await step
    except TimeoutError:
        if not scope.expired():  # a TimeoutError of the stage itself, not the deadline
            raise
        raise _DeadlinePassed from None


DEADLINE_ERROR = "not finished before the --timeout deadline"
"""``errors["deadline"]`` of a sentence a given deadline cut off (``--timeout``, a batch's)."""


def deadline_result(sentence: str, config: AbsaConfig, *, default_s: float | None = None) -> FinalResult:
    """The failed result of a sentence a deadline cut off (or never let start).

    Args:
        sentence: the sentence.
        config: its config.
        default_s: the default deadline's seconds when that one cut it (its ``errors`` say so),
            None for a given one (``--timeout``, a batch's).
    """
    result = FinalResult(sentence=sentence, label="neutral", confidence=0.0, mode=config.mode)
    result.debate_enabled, result.override_enabled = config.debate_on, config.enable_debate_override
    result.errors = {
        "deadline": DEADLINE_ERROR
        if default_s is None
        else f"not finished within the default deadline of {round(default_s, 1):g} s "
        "(--timeout S sets another)"
    }
    return result


async def _pipeline(
    sentence: str, mdl: Model, cfg: AbsaConfig, rec: Recorder, deadline: Deadline | None
) -> FinalResult:
    """The stages of :func:`run_absa`, recorded in ``rec`` as they end.

    Raises:
        _DeadlinePassed: ``deadline`` passed (the steps finished until then are in ``rec``).
    """
    stage1 = await _bounded(run_stage1(sentence, mdl, cfg, rec), deadline)
    rec.emit(StageEvent(kind="stage_output", name="stage1", stage1=stage1))

    debate: DebateResult | None = None
    context: ReviewContext | None = None
    if cfg.debate_on:
        rec.begin("debate")
        t0 = rec.now_ms()
        debate = await _debate(sentence, stage1, mdl, cfg, rec, deadline)
        rec.usage = rec.usage + debate.usage
        for turn in debate.turns(include_judge=True):
            if not turn.ok:
                rec.errors[f"debate:{turn.phase}:{turn.speaker}:r{turn.round}"] = turn.error or "failed"
        if debate.fallback:  # e.g. the judge failed: the engine keeps no verdict and says why here
            rec.errors["debate"] = debate.fallback
        verdict_ok = debate.verdict is not None and debate.verdict.ok
        verdict = "ok" if verdict_ok else "missing"
        detail = f"{len(debate.turns())} turns, {debate.failed_turns} failed, verdict {verdict}"
        rec.step("debate", t0, ok=verdict_ok, detail=detail)
        t0 = rec.now_ms()
        context = build_review_context(debate, stage1, mode=cfg.mode or "persona")
        rec.step("review_context", t0, detail=str(context.mapping_stats))
        rec.emit(StageEvent(kind="stage_output", name="review_context", review_context=context))
    else:
        rec.skip("debate", "enable_debate is false")

    final_patch = None
    if cfg.mode == "patch" and debate is not None and debate.verdict is not None and debate.verdict.ok:
        final_patch = list(debate.verdict.get("final_patch", []) or [])
    stage2 = await _bounded(run_stage2(sentence, stage1, context, final_patch, mdl, cfg, rec), deadline)
    rec.emit(StageEvent(kind="stage_output", name="stage2", stage2=stage2))

    result = FinalResult(
        sentence=sentence,
        label="neutral",
        confidence=0.0,
        mode=cfg.mode,
        debate_enabled=cfg.debate_on,
        override_enabled=cfg.enable_debate_override,
        stage1=stage1,
        stage2=stage2,
        debate=debate,
        review_context=context,
        override_stats=stage2.override_stats,
    )
    t0 = rec.now_ms()
    decision = moderate(_moderator_inputs(stage1, result, context), cfg.moderator)
    rec.step("moderator", t0, detail=" ".join(decision.applied_rules))
    result.moderator = decision
    result.label, result.confidence, result.aspects = (
        decision.final_label,
        decision.confidence,
        decision.final_aspects,
    )
    result.trace, result.usage, result.errors = rec.trace, rec.usage, dict(rec.errors)
    return result


def run_absa_sync(
    sentence: str, *, model: str | Model | None = None, config: ConfigLike = None
) -> FinalResult:
    """Blocking wrapper around :func:`run_absa` (same arguments)."""
    return run_with_model(model, lambda m: run_absa(sentence, model=m, config=config))


async def run_absa_batch(
    sentences: Sequence[str],
    *,
    model: str | Model | None = None,
    config: ConfigLike = None,
    concurrency: int = 1,
    on_result: Callable[[int, FinalResult], Awaitable[None] | None] | None = None,
    timeout_s: float | None = None,
    deadline: Deadline | None = None,
    store: Any = None,
    ids: Sequence[str] | None = None,
    cache: Any = None,
) -> list[FinalResult]:
    """Analyse many sentences, ``concurrency`` at a time, calling ``on_result`` as each finishes.

    The batch is one run (kind ``absa``, config ``batch: true``) for its observers
    (:mod:`moot.observe`): each sentence's result is a ``unit_completed`` event (the run store
    keeps it as a unit); the run ends ``fell_back`` when a sentence had failed calls.

    Args:
        sentences: the sentences.
        model: as for :func:`run_absa` (resolved once and shared).
        config: as for :func:`run_absa` (loaded once).
        concurrency: sentences in flight at once.
        on_result: ``on_result(index, result)``, sync or async, called in completion order.
        timeout_s: seconds for the whole batch, one deadline shared by every sentence: those
            not finished by then (running or still queued) end as failed ``deadline`` results.
            With or without it each sentence also ends at its own default deadline
            (:func:`run_absa`), counted from when it starts.
        deadline: a caller's deadline; the batch ends at the earlier of it and ``timeout_s``.
        store: record the batch as one run, as for :func:`run_absa`.
        ids: the sentences' ids, as their units are named (default: their line numbers, from 1);
            one per sentence, each once (a second would take the first's unit in the store).
        cache: answer model requests from a response cache (:mod:`moot.models.cache`): a cache
            file, a ``ResponseCache``, or True for ``$MOOT_CACHE`` / ``./.moot/cache.db``; None
            (the default) sends every request.

    Returns:
        The results in input order.

    Raises:
        UsageError: ``ids`` not one per sentence, or an id given twice (each named, with its
            positions from 1); bad config or model spec, as for :func:`run_absa`.
    """
    with cache_scope(cache):
        return await _run_absa_batch(
            sentences, model, config, concurrency, on_result, timeout_s, deadline, store, ids
        )


async def _run_absa_batch(
    sentences: Sequence[str],
    model: str | Model | None,
    config: ConfigLike,
    concurrency: int,
    on_result: Callable[[int, FinalResult], Awaitable[None] | None] | None,
    timeout_s: float | None,
    deadline: Deadline | None,
    store: Any,
    ids: Sequence[str] | None,
) -> list[FinalResult]:
    names = list(ids) if ids is not None else [str(i + 1) for i in range(len(sentences))]
    if len(names) != len(sentences):
        raise UsageError(f"{len(names)} ids for {len(sentences)} sentences: give one id per sentence")
    cfg = load_config(config)
    mdl = resolve_model(model)

    async def work(done: Callable[[int, FinalResult], Awaitable[None]]) -> BatchOutcome:
        results = await _batch(
            sentences, names, mdl, cfg, concurrency, done, Deadline.within(timeout_s, deadline)
        )
        return BatchOutcome(results, _endpoints(mdl) or {})

    return await observed_batch(
        names, work, model=_spec(model), config=cfg, concurrency=concurrency, on_result=on_result, store=store
    )


def _endpoints(model: Model) -> dict[str, Any] | None:
    """A run summary's ``endpoints`` (limit range, 429s, time-outs), as a bench records them."""
    stats = model.endpoint_stats()
    return {"endpoints": stats} if stats else None


@dataclass
class BatchOutcome:
    """What a batch's work returns to :func:`observed_batch`.

    The results in input order, and anything more for the run's summary (a Ray batch's
    per-worker counts).
    """

    results: list[FinalResult]
    summary: dict[str, Any] = field(default_factory=dict)


async def observed_batch(
    names: Sequence[str],
    work: Callable[[Callable[[int, FinalResult], Awaitable[None]]], Awaitable[BatchOutcome]],
    *,
    model: str | None,
    config: AbsaConfig,
    concurrency: int,
    on_result: Callable[[int, FinalResult], Awaitable[None] | None] | None = None,
    store: Any = None,
) -> list[FinalResult]:
    """An ABSA batch as one observed run (kind ``absa``, config ``batch: true``), wherever it runs.

    ``work(done)`` analyses the sentences (here, or on Ray workers) and calls ``done(index,
    result)`` as each finishes: the result becomes the run's unit named ``names[index]``
    (its record: :meth:`FinalResult.record_data`, stage requests included), then ``on_result``
    is told. The run ends ``fell_back`` when some sentences had failed calls, ``failed`` when all did.

    Raises:
        UsageError: a name given twice (``ids: duplicate item ids: a (items 1, 3); ...``, positions
            from 1), before anything is recorded: each name is one stored unit.
    """
    check_unique_ids(names, "ids", places=range(1, len(names) + 1), unit="item")
    recorded = {
        "config": config.model_dump(mode="json"),
        "model": model,
        "batch": True,
        "concurrency": concurrency,
    }
    start = RunStart(
        kind="absa", title=f"{len(names)} sentences", model=model or default_model_spec(), config=recorded
    )
    with observed(start, store=store) as run:

        async def done(i: int, res: FinalResult) -> None:
            if not run.nested:  # an evaluation records its own units
                data = {"index": i, "result": res.record_data()}
                run.emit(PipelineEvent(kind="unit_completed", unit=names[i], data=data))
            if on_result is not None:
                out = on_result(i, res)
                if asyncio.iscoroutine(out):
                    await out

        outcome = await work(done)
        results = outcome.results
        usage = Usage.sum_of(r.usage for r in results)
        failed = sum(r.failed for r in results)
        summary = {"sentences": len(results), "failed": failed} | outcome.summary
        run.end(degraded_status(failed, len(results)), usage=usage, summary=summary)
    return results


async def _batch(
    sentences: Sequence[str],
    names: Sequence[str],
    mdl: Model,
    cfg: AbsaConfig,
    concurrency: int,
    on_result: Callable[[int, FinalResult], Awaitable[None]],
    deadline: Deadline | None,
) -> list[FinalResult]:
    """:func:`run_absa_batch` inside its observed run."""
    gate = asyncio.Semaphore(max(1, concurrency))
    results: list[FinalResult | None] = [None] * len(sentences)

    async def one(i: int, sentence: str) -> None:
        async with gate:
            with unit_scope(names[i]):  # whose requests these are (a replay answers each unit its own)
                res = await run_absa(sentence, model=mdl, config=cfg, deadline=deadline)
        results[i] = res
        await on_result(i, res)

    await asyncio.gather(*(one(i, s) for i, s in enumerate(sentences)))
    return [r for r in results if r is not None]
