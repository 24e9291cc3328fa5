"""Contradiction detection over agent reports and arbitration into a consensus (seed 004).

Flow: reports -> :func:`detect_contradictions` (rules, no LLM) -> one arbitrator
call per contradiction (the ``arbitration`` preset, run concurrently under a
bound) -> :func:`build_consensus` (confidence-weighted, no LLM) -> adjusted
reports. With no contradiction there is no LLM call at all and the status is
``skipped``.

Detection: :mod:`moot.contradictions` (rules, no LLM call). The arbitrator's
prompt lists ``source_authority``, most authoritative first, then "other"
(seed 004: GCC-STAT > World Bank > other).

Overall timeout: ``arbitrate(timeout_s=60)`` bounds the whole arbitration (the
seed's target: 3 contradictions in under 60 s), as one
:class:`~moot.deadline.Deadline` (nested under a caller's ``deadline=``, if
given): each arbitration run ends at it by itself, keeping its cut-off turn,
and one still waiting for a slot is never sent. A contradiction whose ruling
has not arrived by then keeps a ruling without a decision, its error saying
so, and its metric is flagged for review: nothing is lost.

Consensus (per metric): each ruling gives its confidence to the claim(s) it
upholds (``agent1_correct``/``agent2_correct``: that agent; ``both_valid``:
both, each keeping its value with context). A metric is *resolved* when one
claim's score beats the runner-up by more than 10% (or all rulings say
``both_valid``); it is a *split decision*, flagged for review, when the top
two are within 10%, when any ruling says ``neither_valid`` or
``flag_for_review``, or when an arbitration call failed.
"""

from __future__ import annotations

import asyncio
import inspect
import random
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

from pydantic import BaseModel, Field

import moot.aio as aio
import moot.graph_stream as graph_stream

from .contradictions import (
    SOURCE_AUTHORITY,
    AgentReport,
    Claim,
    Contradiction,
    Finding,
    detect_contradictions,
    norm_metric,
)
from .deadline import Deadline, timeout_scope
from .engine import Debate, DebateRun, EventCallback
from .errors import UsageError
from .human_review import HumanDecision, ReviewMode, ask_human, check_mode, require_checkpointer, run_once
from .judging import audit_summary, given_options, label, unblind
from .models import ModelLike, default_model_spec, resolve_model
from .models.base import Usage
from .models.cache import cache_scope
from .observe import PipelineEvent, RunHandle, RunStart, degraded_status, observed
from .protocol import Judging
from .schemas import Arbitration
from .transcript import DebateResult, JudgingRecord, Turn

__all__ = [
    "DEFAULT_TIMEOUT",
    "SOURCE_AUTHORITY",
    "AgentReport",
    "ArbitrationResult",
    "Claim",
    "Contradiction",
    "Finding",
    "MetricConsensus",
    "Ruling",
    "apply_human_review",
    "arbitrate",
    "arbitrate_sync",
    "arbitration_node",
    "build_consensus",
    "detect_contradictions",
]

SPLIT_MARGIN = 0.10
DEFAULT_TIMEOUT = 60.0
"""Seconds for a whole arbitration (seed 004: 3 contradictions in under 60 s)."""

ProgressCallback = Callable[..., Awaitable[None] | None]
"""Seed 004's ``event_callback(stage, status, data=None, latency_ms=None)``; sync or async."""


class Ruling(BaseModel):
    """The arbitrator's decision on one contradiction (None fields when the call failed)."""

    contradiction_id: int
    decision: Arbitration | None = None
    """The validated ruling, or None if the call failed."""
    turn: Turn | None = None
    """The full turn (usage, latency, raw output on failure)."""
    error: str | None = None


class MetricConsensus(BaseModel):
    """The settled view of one metric."""

    metric_name: str
    status: Literal["resolved", "both_valid", "flagged"]
    value: float | None = None
    """The accepted value (resolved), else None."""
    citation: str | None = None
    agents: list[str] = Field(default_factory=list)
    """Agents whose claims were upheld."""
    scores: dict[str, float] = Field(default_factory=dict)
    """Confidence-weighted support per agent."""
    reason: str = ""


class ArbitrationResult(BaseModel):
    """Everything the debate node produced."""

    status: Literal["skipped", "complete", "timed_out"]
    """``timed_out``: the overall timeout left contradictions without a ruling (flagged for review)."""
    contradictions_found: int
    contradictions: list[Contradiction] = Field(default_factory=list)
    rulings: list[Ruling] = Field(default_factory=list)
    metrics: list[MetricConsensus] = Field(default_factory=list)
    resolved: int = 0
    """Contradictions whose metric was settled (resolved or both valid)."""
    flagged_for_review: int = 0
    """Contradictions whose metric needs a human."""
    consensus_narrative: str = ""
    adjusted_reports: list[AgentReport] = Field(default_factory=list)
    latency_ms: float = 0.0
    usage: Usage = Field(default_factory=Usage)
    human_review: Turn | None = None
    """The human reviewer's turn (phase ``human``), when :func:`arbitration_node` paused for one."""
    judge_audit: dict[str, Any] | None = None
    """The swap audit over the rulings (:func:`moot.judging.audit_summary`), when asked."""


_SWAPPED = {
    "agent1_correct": "agent2_correct",
    "agent2_correct": "agent1_correct",
    "use_agent1": "use_agent2",
    "use_agent2": "use_agent1",
}


def _presented(c: Contradiction, *, swap: bool, blind: bool) -> Contradiction:
    """The contradiction as one arbitration call sees it: its agents swapped, named blind, or both."""
    first, second = (c.agent2, c.agent1) if swap else (c.agent1, c.agent2)
    if blind:
        first = first.model_copy(update={"agent": label(0)})
        second = second.model_copy(update={"agent": label(1)})
    return c.model_copy(update={"agent1": first, "agent2": second})


def _map_back(content: dict[str, Any], *, swap: bool, labels: dict[str, str]) -> dict[str, Any]:
    """A ruling on a swapped or blind presentation, told in the contradiction's own terms."""
    out = unblind(content, labels)
    if swap:
        for key in ("resolution", "action"):
            value = out.get(key)
            out[key] = _SWAPPED.get(value, value) if isinstance(value, str) else value
    return out


def _ruling_key(content: dict[str, Any] | None) -> str | None:
    """The same decision of an arbitration (docs/judging.md): the agent chosen, the action, the value."""
    if content is None:
        return None
    return f"{content.get('resolution')}/{content.get('action')}/{content.get('recommended_value')}"


def _settle(metric: str, pairs: list[tuple[Contradiction, Ruling]]) -> MetricConsensus:
    scores: dict[str, float] = {}
    claims: dict[str, Claim] = {}
    all_both = True
    for c, r in pairs:
        claims.setdefault(c.agent1.agent, c.agent1)
        claims.setdefault(c.agent2.agent, c.agent2)
        d = r.decision
        if d is None:
            reason = f"no ruling: {r.error}" if r.error else "an arbitration call failed"
            return MetricConsensus(metric_name=metric, status="flagged", reason=reason)
        if d.resolution == "neither_valid" or d.action == "flag_for_review":
            return MetricConsensus(
                metric_name=metric, status="flagged", reason=f"arbitrator: {d.explanation}"
            )
        all_both &= d.resolution == "both_valid"
        upheld = {
            "agent1_correct": [c.agent1.agent],
            "agent2_correct": [c.agent2.agent],
            "both_valid": [c.agent1.agent, c.agent2.agent],
        }[d.resolution]
        for agent in upheld:
            scores[agent] = scores.get(agent, 0.0) + d.confidence
    scores = {k: round(v, 4) for k, v in scores.items()}
    if all_both:
        return MetricConsensus(
            metric_name=metric,
            status="both_valid",
            agents=sorted(claims),
            scores=scores,
            reason="all values valid",
        )
    ranked = sorted(scores.items(), key=lambda kv: kv[1], reverse=True)
    top, top_score = ranked[0]
    runner = ranked[1][1] if len(ranked) > 1 else 0.0
    if top_score - runner <= SPLIT_MARGIN * top_score:
        return MetricConsensus(metric_name=metric, status="flagged", scores=scores, reason="split decision")
    winner = claims[top]
    value = next(
        (r.decision.recommended_value for _, r in pairs if r.decision and r.decision.recommended_value), None
    )
    return MetricConsensus(
        metric_name=metric,
        status="resolved",
        value=winner.value if winner.value is not None else value,
        citation=winner.citation,
        agents=[top],
        scores=scores,
        reason=f"confidence-weighted support {top_score:g} vs {runner:g}",
    )


def build_consensus(
    reports: Sequence[AgentReport], contradictions: Sequence[Contradiction], rulings: Sequence[Ruling]
) -> tuple[list[MetricConsensus], list[AgentReport], str]:
    """Settle each metric, annotate the reports, and write the narrative (no LLM)."""
    by_id = {r.contradiction_id: r for r in rulings}
    grouped: dict[str, list[tuple[Contradiction, Ruling]]] = {}
    for c in contradictions:
        grouped.setdefault(c.metric_name, []).append((c, by_id.get(c.id, Ruling(contradiction_id=c.id))))
    metrics = [_settle(m, pairs) for m, pairs in grouped.items()]
    settled = {m.metric_name: m for m in metrics}
    adjusted = [r.model_copy(deep=True) for r in reports]
    for report in adjusted:
        for f in report.findings:
            m = settled.get(norm_metric(f.metric))
            if m is None:
                continue
            outcome = (
                "confirmed"
                if report.agent in m.agents and m.status == "resolved"
                else "superseded"
                if m.status == "resolved"
                else m.status
            )
            f.debate = {
                "outcome": outcome,
                "accepted_value": m.value,
                "accepted_citation": m.citation,
                "why": m.reason,
            }
    lines = []
    for m in metrics:
        explanations = [
            r.decision.explanation
            for c, r in grouped[m.metric_name]
            if r.decision is not None and r.decision.explanation
        ]
        detail = f" {explanations[0]}" if explanations else ""
        if m.status == "resolved":
            lines.append(f"{m.metric_name}: {m.value} ({', '.join(m.agents)}; {m.citation}).{detail}")
        elif m.status == "both_valid":
            claims = {f"{c.agent1.agent}={c.agent1.value}" for c, _ in grouped[m.metric_name]} | {
                f"{c.agent2.agent}={c.agent2.value}" for c, _ in grouped[m.metric_name]
            }
            lines.append(
                f"{m.metric_name}: values differ but are all valid ({', '.join(sorted(claims))}).{detail}"
            )
        else:
            lines.append(f"{m.metric_name}: flagged for review ({m.reason}).")
    return metrics, adjusted, "\n".join(lines)


async def _notify(cb: ProgressCallback | None, *args: Any) -> None:
    if cb is None:
        return
    out = cb(*args)
    if inspect.isawaitable(out):
        await out


async def arbitrate(
    reports: Sequence[AgentReport | dict[str, Any]],
    *,
    model: ModelLike | None = None,
    concurrency: int = 4,
    on_progress: ProgressCallback | None = None,
    debate: Debate | None = None,
    source_authority: Sequence[str] = SOURCE_AUTHORITY,
    timeout_s: float | None = DEFAULT_TIMEOUT,
    deadline: Deadline | None = None,
    on_event: EventCallback | None = None,
    store: Any = None,
    cache: Any = None,
    budget_usd: float | None = None,
    judge_blind: bool | None = None,
    judge_shuffle: bool | None = None,
    judge_audit: bool | None = None,
    judge_swap_robust: bool | None = None,
) -> ArbitrationResult:
    """Detect contradictions, arbitrate each with one call, and build the consensus.

    The arbitration is one run (kind ``arbitrate``) for its observers (:mod:`moot.observe`):
    with ``store=`` (or a ``debate`` given a store) it is recorded as one run, its progress as
    ``progress`` events and each contradiction's debate as that run's events; it ends
    ``fell_back`` when a contradiction has no ruling.

    Args:
        reports: agent reports (models or dicts).
        model: model spec or instance for the arbitrator.
        concurrency: arbitration calls in flight at once (10+ contradictions are batched).
        on_progress: seed 004's ``event_callback(stage, status, data=None, latency_ms=None)``:
            ``("debate", "running")``, ``("debate", "progress", {"done", "total"})`` and
            ``("debate", "complete", {...}, latency_ms)``.
        debate: a preconfigured Debate on an arbitration-shaped protocol (default: the preset).
        source_authority: source names, most authoritative first (others rank after them); used
            for source conflicts and given to the arbitrator in its prompt.
        timeout_s: seconds for the whole arbitration (None: no limit of its own); contradictions
            without a ruling by then are flagged for review and the status is ``timed_out``.
        deadline: a caller's deadline; the arbitration ends at the earlier of it and ``timeout_s``.
        on_event: called with every engine event of every arbitration call.
        store: record the arbitration in a run store: a store file, an open
            :class:`~moot.runs.RunStore`, True for ``$MOOT_STORE`` / ``./.moot/runs.db``, or None
            (the default: ``debate``'s store, if any).
        cache: answer model requests from a response cache (:mod:`moot.models.cache`): a cache
            file, a ``ResponseCache``, or True for ``$MOOT_CACHE`` / ``./.moot/cache.db``; None
            (the default: ``debate``'s cache, if any).
        judge_blind: name the two agents ``Speaker A`` and ``Speaker B`` in the arbitrator's
            prompt (None: the arbitration protocol's ``judging.blind``); rulings are mapped back.
        judge_shuffle: show the two agents in a seeded random order per contradiction.
        judge_audit: ask each arbitration again with the agents swapped (and, not blind, once
            more blind): ``judge_audit`` in the result, the extra calls counted apart.
        judge_swap_robust: a ruling that changes when the agents are swapped is flagged for
            review (``flag_for_review``, reason ``position-sensitive``).
        budget_usd: US dollars each contradiction's arbitration may cost (its call reserves its
            most first, :mod:`moot.budget`); one that could pass it gets no ruling (flagged for
            review). Not with ``debate``, which keeps its own.

    Raises:
        UsageError: ``budget_usd`` together with ``debate``.
    """
    if budget_usd is not None:
        if debate is not None:
            raise UsageError("pass budget_usd= to the Debate, not to arbitrate(), when giving a Debate")
        debate = Debate("arbitration", model=model, budget_usd=budget_usd)
    if cache is None and debate is not None:
        cache = debate.cache
    parsed = [r if isinstance(r, AgentReport) else AgentReport.model_validate(r) for r in reports]
    spec = (
        model
        if model is None or isinstance(model, str)
        else str(getattr(model, "name", type(model).__name__))
    )
    if spec is None and debate is not None:
        spec = debate.model_spec
    config: dict[str, Any] = {
        "reports": [r.model_dump(mode="json") for r in parsed],
        "model": spec,
        "concurrency": concurrency,
        "source_authority": list(source_authority),
        "timeout_s": timeout_s,
    }
    given = given_options(judge_blind, judge_shuffle, judge_audit, judge_swap_robust)
    if given:
        config["judging"] = dict(given)
    start = RunStart(
        kind="arbitrate", title=f"{len(parsed)} reports", model=spec or default_model_spec(), config=config
    )
    if store is None and debate is not None:
        store = debate.store
    with cache_scope(cache), _observed_after_models(start, store, debate, model) as run:

        async def progress(*args: Any) -> None:  # seed 004's callback, as it was called
            stage, status, data, latency = (*args, None, None)[:4]
            payload = {"stage": stage, "status": status, "data": data, "latency_ms": latency}
            run.emit(PipelineEvent(kind="progress", data=payload))
            await _notify(on_progress, *args)

        result = await _arbitrate(
            parsed,
            model=model,
            concurrency=concurrency,
            on_progress=progress,
            debate=debate,
            source_authority=source_authority,
            timeout_s=timeout_s,
            deadline=deadline,
            on_event=on_event,
            judging=given,
        )
        failed = sum(1 for r in result.rulings if r.decision is None)
        summary: dict[str, Any] = {"failed": failed}
        if result.judge_audit is not None:
            summary["judge_audit"] = {"arbitration": result.judge_audit}
        run.end(degraded_status(failed, len(result.rulings)), result, summary=summary)
    return result


@contextmanager
def _observed_after_models(
    start: RunStart, store: Any, debate: Debate | None, model: ModelLike | None
) -> Iterator[RunHandle]:
    """The arbitration's observed run, opened once its models resolve (inside the cache scope).

    A model spec that cannot work (``user:pass@`` in a URL, an unknown option) is a usage error
    raised before anything is recorded: exit 2 writes nothing.
    """
    if debate is not None:
        for key in debate.protocol.personas:
            debate.model_for(key)
    elif model is not None:
        resolve_model(model)
    with observed(start, store=store) as run:
        yield run


class _Judged:
    """The arbitrator's calls on one arbitration: presented (swapped, blind), mapped back, audited."""

    def __init__(
        self,
        arbiter: Debate,
        options: Judging,
        source_authority: Sequence[str],
        deadline: Deadline | None,
        on_event: EventCallback | None,
        runs: dict[int, DebateRun],
    ) -> None:
        self.arbiter, self.options, self.source_authority = arbiter, options, source_authority
        self.deadline, self.on_event, self.runs = deadline, on_event, runs
        self.records: list[JudgingRecord] = []
        self.costed = Usage()
        """The swap-robust second orders' usage: part of the arbitration's cost (the audit's is not)."""

    async def ask(
        self, c: Contradiction, *, swap: bool, blind: bool, quiet: bool
    ) -> tuple[DebateResult, dict[str, Any] | None]:
        """One arbitration call on ``c`` presented so; its ruling told in ``c``'s own terms.

        ``quiet``: an audit's call (no events, not the run kept for a time-out's accounting).
        """
        shown = _presented(c, swap=swap, blind=blind)
        context = {**shown.model_dump(mode="json"), "source_authority": [*self.source_authority, "other"]}
        run = self.arbiter.start(
            shown.describe(self.source_authority),
            context=context,
            deadline=self.deadline,
            on_event=None if quiet else self.on_event,
        )
        if not quiet:
            self.runs[c.id] = run
        res = await run.execute()  # ends at the deadline by itself, its cut-off turn kept
        turn = res.rounds[0].turns[0] if res.rounds and res.rounds[0].turns else None
        if turn is None or not turn.ok or turn.content is None:
            return res, None
        first, second = (c.agent2, c.agent1) if swap else (c.agent1, c.agent2)
        labels = {label(0): first.agent, label(1): second.agent} if blind else {}
        turn.content = _map_back(turn.content, swap=swap, labels=labels)
        return res, turn.content

    async def audit(self, c: Contradiction, turn: Turn, content: dict[str, Any], swap: bool) -> None:
        """Record how the ruling was asked; the swap audit (and swap-robust check) when asked."""
        options = self.options
        order = [c.agent2.agent, c.agent1.agent] if swap else [c.agent1.agent, c.agent2.agent]
        record = JudgingRecord(
            order=order, blind=options.blind, shuffled=options.shuffle, ruled_by=turn.model
        )
        record.decision = _ruling_key(content)
        chosen = {"agent1_correct": c.agent1.agent, "agent2_correct": c.agent2.agent}.get(
            str(content.get("resolution"))
        )
        record.sided_with = chosen
        record.first_slot = None if chosen is None else chosen == order[0]
        turn.judging = record
        self.records.append(record)
        if not (options.audit or options.swap_robust):
            return
        record.reversed_order = order[::-1]
        asks = [self.ask(c, swap=not swap, blind=options.blind, quiet=True)]
        if options.audit and not options.blind:
            asks.append(self.ask(c, swap=swap, blind=True, quiet=True))
        for i, (res, other) in enumerate(await asyncio.gather(*asks)):
            if i == 0 and options.swap_robust:  # the second order is part of a swap-robust ruling
                self.costed = self.costed + res.usage
            else:
                record.extra_calls += res.usage.attempts  # never in the arbitration's usage
                record.extra_usage = record.extra_usage + res.usage
            value = _ruling_key(other)
            if value is None:
                record.audit_errors.append(f"{'reversed' if i == 0 else 'blind'}: {res.fallback or 'failed'}")
            elif i == 0:
                record.reversed_decision = value
                record.position_flip = value != record.decision
            else:
                record.blind_decision = value
                record.identity_flip = value != record.decision
        if options.swap_robust and record.position_flip:
            record.position_sensitive = True
            content["action"] = "flag_for_review"  # a ruling the order decided is no ruling: review it


async def _arbitrate(
    parsed: list[AgentReport],
    *,
    model: ModelLike | None,
    concurrency: int,
    on_progress: ProgressCallback,
    debate: Debate | None,
    source_authority: Sequence[str],
    timeout_s: float | None,
    deadline: Deadline | None,
    on_event: EventCallback | None,
    judging: dict[str, bool],
) -> ArbitrationResult:
    """:func:`arbitrate` inside its observed run (same arguments, the reports parsed)."""
    started = time.perf_counter()
    parent, deadline = deadline, Deadline.within(timeout_s, deadline)
    budget_s = parent.remaining_s() if parent is not None and deadline is parent else timeout_s
    await _notify(on_progress, "debate", "running")
    contradictions = detect_contradictions(parsed, source_authority)
    if not contradictions:
        result = ArbitrationResult(status="skipped", contradictions_found=0, adjusted_reports=parsed)
        await _notify(
            on_progress, "debate", "complete", {"contradictions": 0, "resolved": 0, "flagged": 0}, 0.0
        )
        return result
    arbiter = debate or Debate("arbitration", model=model)
    options = arbiter.protocol.judging.model_copy(update=judging)
    runs: dict[int, DebateRun] = {}  # kept so a timed-out run still reports the calls it made
    gate = asyncio.Semaphore(max(1, concurrency))
    done = 0
    judge = _Judged(arbiter, options, source_authority, deadline, on_event, runs)

    async def one(c: Contradiction) -> tuple[Ruling, DebateResult] | None:
        """The ruling, or None when the deadline passed first (waiting for a slot, or running)."""
        nonlocal done
        try:
            async with timeout_scope(deadline):
                await gate.acquire()
        except TimeoutError:
            return None  # never sent
        swap = (
            options.shuffle
            and random.Random(f"{options.seed}|arbitration|{c.id}|{c.metric_name}").random() < 0.5
        )
        try:
            res, content = await judge.ask(c, swap=swap, blind=options.blind, quiet=False)
            turn = res.rounds[0].turns[0] if res.rounds and res.rounds[0].turns else None
            if turn is not None and content is not None:
                await judge.audit(c, turn, content, swap)
        finally:
            gate.release()
        if res.fallback and deadline is not None and deadline.expired():
            return None
        decision = Arbitration.model_validate(content) if content is not None else None
        error = None if decision is not None else (turn.error if turn is not None else res.fallback)
        done += 1
        await _notify(on_progress, "debate", "progress", {"done": done, "total": len(contradictions)})
        return Ruling(contradiction_id=c.id, decision=decision, turn=turn, error=error), res

    rulings, usage, timed_out = await _run_all(contradictions, one, budget_s, runs)
    metrics, adjusted, narrative = build_consensus(parsed, contradictions, rulings)
    status_of = {m.metric_name: m.status for m in metrics}
    flagged = sum(1 for c in contradictions if status_of[c.metric_name] == "flagged")
    latency = (time.perf_counter() - started) * 1000
    result = ArbitrationResult(
        status="timed_out" if timed_out else "complete",
        contradictions_found=len(contradictions),
        contradictions=contradictions,
        rulings=rulings,
        metrics=metrics,
        resolved=len(contradictions) - flagged,
        flagged_for_review=flagged,
        consensus_narrative=narrative,
        adjusted_reports=adjusted,
        latency_ms=latency,
        usage=usage + judge.costed,
        judge_audit=audit_summary(judge.records) if options.audit or options.swap_robust else None,
    )
    summary = {"contradictions": len(contradictions), "resolved": result.resolved, "flagged": flagged}
    await _notify(on_progress, "debate", "complete", summary, latency)
    return result


async def _run_all(
    contradictions: Sequence[Contradiction],
    one: Callable[[Contradiction], Awaitable[tuple[Ruling, DebateResult] | None]],
    budget_s: float | None,
    runs: dict[int, DebateRun],
) -> tuple[list[Ruling], Usage, bool]:
    """Every arbitration; one the deadline cut off (``one`` gave None) keeps a ruling saying so.

    A run cut off by the deadline still counts the requests it sent (its cancelled turn is kept).
    """
    outcomes = await asyncio.gather(*(one(c) for c in contradictions), return_exceptions=True)
    rulings, usage, timed_out = [], Usage(), False
    for c, outcome in zip(contradictions, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            raise outcome
        if outcome is None:
            timed_out = True
            error = f"no ruling within the overall timeout of {budget_s or 0:g} s; flagged for review"
            run = runs.get(c.id)  # None: it was still waiting for a free slot
            turns = run.result.turns(include_judge=True) if run is not None else []
            rulings.append(Ruling(contradiction_id=c.id, error=error, turn=turns[0] if turns else None))
            usage = usage + (run.result.usage if run is not None else Usage())
            continue
        ruling, res = outcome
        rulings.append(ruling)
        usage = usage + res.usage
    return rulings, usage, timed_out


def arbitrate_sync(reports: Sequence[AgentReport | dict[str, Any]], **kwargs: Any) -> ArbitrationResult:
    """Blocking wrapper around :func:`arbitrate` (same arguments)."""
    budget_usd, given = kwargs.pop("budget_usd", None), kwargs.pop("debate", None)
    if given is not None and budget_usd is not None:
        raise UsageError("pass budget_usd= to the Debate, not to arbitrate_sync(), when giving a Debate")
    debate = given or Debate("arbitration", model=kwargs.pop("model", None), budget_usd=budget_usd)

    async def main() -> ArbitrationResult:
        try:
            return await arbitrate(reports, debate=debate, **kwargs)
        finally:
            await debate.aclose()  # connection pools must not outlive this event loop

    return aio.run(main())


# -- LangGraph: the arbitration as a node, with human review of flagged metrics ---------------------
def _review_summary(result: ArbitrationResult, reason: str) -> dict[str, Any]:
    """The interrupt's JSON value: each metric needing a human, with the claims on it."""
    status = {m.metric_name: m for m in result.metrics}
    metrics: dict[str, dict[str, Any]] = {}
    for c in result.contradictions:
        m = status[c.metric_name]
        entry = metrics.setdefault(
            c.metric_name, {"metric": c.metric_name, "status": m.status, "reason": m.reason, "claims": []}
        )
        for claim in (c.agent1, c.agent2):
            if all(x["agent"] != claim.agent for x in entry["claims"]):
                entry["claims"].append(claim.model_dump(mode="json", exclude={"interpretation"}))
    return {
        "status": result.status,
        "reason": reason,
        "metrics": list(metrics.values()),
        "consensus_narrative": result.consensus_narrative,
        "resume_with": "{'accept': true}, or {'decisions': {'<metric>': {'agent': '<name>'} | "
        "{'value': 0.1}}, 'note': '...'}",
    }


def apply_human_review(result: ArbitrationResult, decision: HumanDecision, reason: str) -> ArbitrationResult:
    """Record a reviewer's decision: a human turn, and each metric they settled marked resolved.

    ``decision.decisions`` maps a metric to ``{"agent": name}`` (that agent's claim wins) or
    ``{"value": number}`` (with an optional ``citation``); metrics not named keep their status.

    Raises:
        UsageError: a metric or an agent that the arbitration does not know.
    """
    from .errors import UsageError

    out = result.model_copy(deep=True)
    claims = {
        (c.metric_name, claim.agent): claim for c in out.contradictions for claim in (c.agent1, c.agent2)
    }
    by_metric = {m.metric_name: m for m in out.metrics}
    lines = []
    for metric, choice in (decision.decisions or {}).items():
        m = by_metric.get(norm_metric(metric))
        if m is None or not isinstance(choice, dict):
            raise UsageError(
                f"human review: no contradiction on metric {metric!r} (or its choice is not a dict)"
            )
        if "agent" in choice:
            claim = claims.get((m.metric_name, choice["agent"]))
            if claim is None:
                raise UsageError(f"human review: no claim by {choice['agent']!r} on {m.metric_name}")
            m.value, m.citation, m.agents = claim.value, claim.citation, [claim.agent]
        else:
            m.value, m.citation, m.agents = choice.get("value"), choice.get("citation"), []
        m.status, m.reason = "resolved", f"human review{': ' + decision.note if decision.note else ''}"
        lines.append(f"{m.metric_name}: {m.value} (human review).")
        for report in out.adjusted_reports:
            for f in report.findings:
                if norm_metric(f.metric) == m.metric_name:
                    outcome = "confirmed" if report.agent in m.agents else "superseded"
                    f.debate = {
                        "outcome": outcome,
                        "accepted_value": m.value,
                        "accepted_citation": m.citation,
                        "why": m.reason,
                    }
    status_of = {m.metric_name: m.status for m in out.metrics}
    out.flagged_for_review = sum(1 for c in out.contradictions if status_of[c.metric_name] == "flagged")
    out.resolved = out.contradictions_found - out.flagged_for_review
    if lines:
        out.consensus_narrative = "\n".join([out.consensus_narrative, *lines]).strip()
    out.human_review = Turn(
        speaker="human",
        round=1,
        phase="human",
        output="human_review",
        content=decision.content(reason),
        model="human",
    )
    return out


def arbitration_node(
    *,
    model: ModelLike | None = None,
    reports_key: str = "agent_reports",
    output_key: str = "debate_results",
    human_review: ReviewMode | None = None,
    debate: Debate | None = None,
    source_authority: Sequence[str] = SOURCE_AUTHORITY,
    timeout_s: float | None = DEFAULT_TIMEOUT,
    concurrency: int = 4,
    store: Any = None,
    budget_usd: float | None = None,
    judge_blind: bool | None = None,
    judge_shuffle: bool | None = None,
    judge_audit: bool | None = None,
    judge_swap_robust: bool | None = None,
) -> Callable[[Any], Awaitable[dict[str, Any]]]:
    """Seed 004's debate node for a LangGraph graph: arbitrate the reports in the state.

    Reads the reports (dicts) under ``reports_key``; writes the adjusted reports back there and
    the whole :class:`ArbitrationResult` as JSON data under ``output_key``. Every arbitration
    call's engine events, and seed 004's progress events (``{"type": "arbitration", "status",
    ...}``), go to LangGraph's custom stream.

    ``human_review="split"`` pauses the graph with ``interrupt()`` when a metric is flagged for
    review (a split decision, a failed or missing ruling); ``"always"`` whenever there was a
    contradiction. Resume with ``Command(resume={"decisions": {...}, "note": ...})`` or
    ``{"accept": True}`` (:func:`apply_human_review`, :mod:`moot.human_review`). The
    arbitration runs as a LangGraph task, so resuming does not call the arbitrator again. Needs
    a checkpointer.

    Each arbitration is recorded as one ``arbitrate`` run when given ``store=`` (a path, an open
    ``RunStore``, True for the default store) or a ``debate`` with a store.

    ``judge_blind``, ``judge_shuffle``, ``judge_audit``, ``judge_swap_robust``: as for
    :func:`arbitrate` (docs/judging.md).

    Raises:
        UsageError: an unknown ``human_review``; (when the node runs) ``human_review`` without a
            checkpointer.
    """
    mode = check_mode(human_review)
    arbiter = debate or Debate("arbitration", model=model, store=store, budget_usd=budget_usd)

    def progress(stage: str, status: str, data: Any = None, latency_ms: float | None = None) -> None:
        graph_stream.write(
            {
                "type": "arbitration",
                "source": "moot",
                "status": status,
                "data": data,
                "latency_ms": latency_ms,
            }
        )

    async def node(state: Any) -> dict[str, Any]:
        if mode is not None:
            require_checkpointer("arbitration node")

        async def run() -> dict[str, Any]:
            result = await arbitrate(
                state.get(reports_key) or [],
                debate=arbiter,
                on_progress=progress,
                on_event=graph_stream.stream_event,
                source_authority=source_authority,
                timeout_s=timeout_s,
                concurrency=concurrency,
                judge_blind=judge_blind,
                judge_shuffle=judge_shuffle,
                judge_audit=judge_audit,
                judge_swap_robust=judge_swap_robust,
            )
            return result.model_dump(mode="json")

        if mode is None:
            result = ArbitrationResult.model_validate(await run())
        else:
            result = ArbitrationResult.model_validate(await run_once("arbitration_run", run))
            reason = None
            if result.contradictions_found and mode == "always":
                reason = "every arbitration is reviewed (human_review='always')"
            elif result.flagged_for_review:
                reason = f"{result.flagged_for_review} contradiction(s) flagged for review"
            if reason is not None:
                decision = HumanDecision.parse(ask_human(_review_summary(result, reason)))
                result = apply_human_review(result, decision, reason)
                graph_stream.write(
                    {
                        "type": "human_review",
                        "source": "moot",
                        "reason": reason,
                        "decision": decision.content(reason),
                    }
                )
        return {
            reports_key: [r.model_dump(mode="json") for r in result.adjusted_reports],
            output_key: result.model_dump(mode="json"),
        }

    node.__name__ = node.__qualname__ = "arbitration"
    return node
