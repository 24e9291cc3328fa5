"""One run of a debate, as steps: begin, speak, moderate, next_round, judge, finish.

:meth:`Debate.run` drives these steps in the protocol's order; an orchestrator
such as LangGraph can drive them one node at a time
(:mod:`moot.integrations.langgraph`) and gets the same calls, prompts, events,
budgets, timeout and fallback.

The run is observed (:mod:`moot.observe`): :meth:`DebateRun.begin` (or :meth:`DebateRun.skip`)
attaches the observers the debate's options ask for (``store=``: the recorder), every event reaches
them before ``on_event``, and :meth:`DebateRun.finish` tells them the end (``complete``,
``fell_back``, ``skipped``); :meth:`DebateRun.execute` tells them a failure or a cancellation.

Every step runs under the run's one deadline and never raises for run-time
failures: a timeout, an exhausted budget, a failed turn under
``on_turn_failure: fallback`` or an unreachable backend records the first
reason in :attr:`DebateRun.fallback`, and every later step passes through
without calling a model. :meth:`finish` then decides or falls back.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import moot.consensus as consensus
import moot.observe as observe

from ._ids import new_id
from .budget import Ledger, check_priced
from .deadline import Deadline, timeout_scope
from .errors import BudgetExceeded, ContextLengthExceeded, ModelError, UsageError
from .history import SMALLEST_WINDOW, Fitted, fit_turns, summary_task
from .judging import (
    DecisionKey,
    audit_order,
    audit_summary,
    blind_turns,
    candidate_of,
    candidates,
    decision_of,
    shown_order,
    unblind,
)
from .models import Model
from .models.base import CallStats, Message
from .models.pricing import CHARS_PER_TOKEN, estimate_tokens
from .prompting import blind_prompt, build_messages, render_context
from .protocol import JudgeSpec, Protocol
from .schemas import get_output
from .structured import OnRequest, Outcome, ask
from .transcript import (
    MAIN_TEXT_FIELDS,
    DebateResult,
    Event,
    EventKind,
    FailedModel,
    JudgingRecord,
    Persona,
    RequestRecord,
    Round,
    Timings,
    Turn,
)
from .turns import cancelled_turn, trim, turn_from

if TYPE_CHECKING:
    from .engine import Debate

__all__ = ["DebateRun", "EventCallback", "unreachable_error"]

EventCallback = Callable[[Event], Awaitable[None] | None]
"""Called with every event; may be sync or async. An exception it raises ends the run and
reaches the caller of :meth:`Debate.run` (turns in flight are cancelled and awaited first)."""

logger = logging.getLogger(__name__)


class _Stop(Exception):
    """Internal: end the debate now and fall back, for ``reason``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class DebateRun:
    """The state of one run of a Debate; create it with :meth:`Debate.start`."""

    def __init__(
        self,
        debate: Debate,
        topic: str,
        context: Any,
        initial_answer: str | None,
        on_event: EventCallback | None,
        *,
        deadline: Deadline | None = None,
    ) -> None:
        self.debate = debate
        self.protocol: Protocol = debate.protocol
        self.topic = topic
        self.context = context
        """The shared context as given (recorded in the run's config)."""
        self.context_json = render_context(context)
        self.initial_answer = initial_answer
        self.on_event = on_event
        self.id = new_id(12)
        """Unique across processes, so events and stores from many runs never collide."""
        self.fallback: str | None = None
        """The first reason the debate must fall back, or None."""
        self.result = DebateResult(
            topic=topic,
            id=self.id,
            protocol=self.protocol.name,
            personas=list(self.protocol.personas.values()),
            timings=Timings(started_at=time.time()),
        )
        self._calls_started = 0
        self.ledger = Ledger(self.protocol.budget, lambda: self.result.usage)
        """Tokens and US dollars spent, in flight and reserved (:mod:`moot.budget`)."""
        self._windows: dict[str, int] = {}  # model name -> window asked or learned (0: unknown)
        self._summary_lock = asyncio.Lock()  # one summary per round, made by whoever needs it first
        self._warned_window = False
        self._given = deadline  # the caller's; begin() nests the debate's own budget under it
        self.deadline: Deadline | None = None
        """The run's deadline once :meth:`begin` set it: the earlier of its budget and the caller's."""
        self._t0 = 0.0
        self._stage_of: dict[int, int] = {}  # id(turn) -> stage index within its round
        self._unreported: list[Turn] = []  # cancelled turns whose completion event is still due
        self.debate_mode = True
        """False when the run was asked to skip the debate (recorded in the run's config)."""
        self.observed: observe.RunHandle | None = None
        """The run's observers, attached by :meth:`begin` or :meth:`skip` (None before)."""
        self._late = False  # True while the swap audit runs after the decision (no deadline applies)
        self.decision_key: DecisionKey | None = None
        """Reads a deciding step's decisive value from its answer (a bench task's parser), for the
        swap audit's "same decision" (:mod:`moot.judging`); None compares normalised text."""

    # -- events and budget ------------------------------------------------------------------
    async def emit(self, kind: EventKind, **fields: Any) -> None:
        """Deliver one event to the run's observers, then to the callback, if any."""
        handle = self.observed
        listened = handle is not None and handle.listened
        if self.on_event is None and not listened:
            return
        event = Event(kind=kind, debate_id=self.id, time=time.time(), **fields)
        if listened:
            assert handle is not None
            handle.emit(event)  # observers first: an error in the caller's callback loses nothing
        if self.on_event is None:
            return
        out = self.on_event(event)
        if inspect.isawaitable(out):
            await out

    @property
    def listened(self) -> bool:
        """True when someone receives this run's events (an observer or the ``on_event`` callback)."""
        return self.on_event is not None or (self.observed is not None and self.observed.listened)

    def observe(self, *, resumed: bool = False) -> observe.RunHandle:
        """Attach the run's observers now (once; :meth:`begin` and :meth:`skip` do it).

        The run is told to them by its own id. ``resumed``: this run goes on with a run begun
        elsewhere under the same id (a LangGraph checkpoint resumed in another process), so a
        recorder reopens that run instead of starting another.
        """
        if self.observed is None:
            start = self.debate.run_start(
                self.topic,
                context=self.context,
                initial_answer=self.initial_answer,
                debate_mode=self.debate_mode,
            )
            start = dataclasses.replace(start, run_id=self.id, continues=self.id if resumed else None)
            self.observed = observe.open_run(start, **self.debate.observe_options)
        return self.observed

    def fail(self, exc: BaseException) -> None:
        """Tell the run's observers that ``exc`` ended the run (interrupted or failed)."""
        if self.observed is not None:
            self.observed.fail(exc)

    def _before_call(self) -> None:
        budget = self.protocol.budget
        if budget.max_calls is not None and self._calls_started >= budget.max_calls:
            raise BudgetExceeded("calls", budget.max_calls, self._calls_started)
        used = self.result.usage.total_tokens
        if budget.max_tokens is not None and used >= budget.max_tokens:
            raise BudgetExceeded("tokens", budget.max_tokens, used)
        self._calls_started += 1

    async def _guard(self, step: Awaitable[Any]) -> Any:
        """Run one step under the deadline; turn run-time failures into ``fallback``."""
        try:
            async with timeout_scope(self.deadline) as scope:
                return await step
        except TimeoutError:
            if not scope.expired():
                # Not our deadline: backends' errors are failed turns already (structured.ask), so
                # this came from elsewhere, e.g. an on_event callback, and belongs to the caller.
                raise
            self._stop(f"timeout: the debate exceeded {self.result.timings.deadline_s:g} s")
        except BudgetExceeded as exc:
            self._stop(f"budget: {exc}")
        except _Stop as exc:
            self._stop(exc.reason)
        return None

    def _stop(self, reason: str) -> None:
        if self.fallback is None:  # the first reason wins
            self.fallback = reason

    def _judging_summary(self) -> None:
        """The swap audit's figures over this run's deciding turns, and who shares the judge's model."""
        deciding = [t for t in self.result.turns(include_judge=True) if t.phase in ("judge", "moderator")]
        judging = self.protocol.judging
        if judging.audit or judging.swap_robust:
            self.result.metrics["judge_audit"] = audit_summary(t.judging for t in deciding)
        if any(t.judging is not None and t.judging.position_sensitive for t in deciding):
            self.result.metrics["undecided_reason"] = "position-sensitive"
        ruling = {t.judging.ruled_by for t in deciding if t.judging is not None and t.judging.ruled_by}
        speakers = {t.speaker for t in self.result.turns() if t.phase == "turn" and t.ok}
        shared = [k for k in speakers if self.debate.model_for(k).name in ruling]
        self.result.judge_shares_model_with = sorted(shared)

    # -- steps ------------------------------------------------------------------------------
    async def begin(self) -> None:
        """Attach the observers, emit ``debate_started``, start the deadline and open round 1."""
        self.observe()
        # A budget in US dollars with an unpriced model cannot be kept: a usage error, before any call.
        check_priced(self.protocol.budget, [self.debate.model_for(k) for k in self.protocol.personas])
        await self._check_window()
        self._t0 = time.perf_counter()
        own = await self.debate.timeout_s()
        self.deadline = deadline = Deadline.within(own, self._given)
        if deadline is not None and deadline is self._given:  # the caller's comes first
            self.result.timings.deadline_s = deadline.remaining_s()
        else:
            self.result.timings.deadline_s = own
        await self.emit("debate_started", message=self.topic)
        self.result.rounds.append(Round(number=1))

    def restore(
        self,
        turns: list[tuple[Turn, int]],
        *,
        rounds: int,
        fallback: str | None,
        stopped_early: bool,
        deadline_s: float | None,
        elapsed_s: float,
        started_at: float,
    ) -> None:
        """Continue a run begun elsewhere (another process, before a restart) from its finished turns.

        Instead of :meth:`begin`: no event, no model call. ``turns`` pairs each recorded turn with
        its stage index (moderator and judge turns: any), in the order they finished; ``rounds``
        is the round in progress. The deadline keeps the time already spent (``elapsed_s``):
        the time between the stop and the resume does not count.
        """
        self._t0 = time.perf_counter() - elapsed_s
        self.result.timings.started_at = started_at
        self.result.timings.deadline_s = deadline_s
        if deadline_s is not None:  # nested under a caller's deadline, as in begin()
            self.deadline = Deadline.within(max(0.0, deadline_s - elapsed_s), self._given)
        self.result.rounds = [Round(number=n) for n in range(1, rounds + 1)]
        for turn, stage in turns:
            if turn.phase == "judge":
                self.result.verdict = turn
            elif turn.phase == "moderator":
                self.result.rounds[turn.round - 1].moderator = turn
            elif turn.phase == "summary":  # a history summary (moot.history): made once, kept
                self.result.rounds[turn.round - 1].summary = turn
            else:
                self.result.rounds[turn.round - 1].turns.append(turn)
                self._stage_of[id(turn)] = stage
            self._account(turn)
            self._calls_started += turn.usage.attempts
            if turn.cancelled:
                self.result.cancelled_turns += 1
            elif not turn.ok:
                self.result.failed_turns += 1
        self.fallback = fallback
        self.result.stopped_early = stopped_early

    def elapsed_s(self) -> float:
        """Seconds since :meth:`begin` (restored runs count the time spent before the stop)."""
        return time.perf_counter() - self._t0 if self._t0 else 0.0

    def stage_of(self, turn: Turn) -> int:
        """The stage index (into ``protocol.stages()``) a speaker turn was played in (0 otherwise)."""
        return self._stage_of.get(id(turn), 0)

    def current_round(self) -> Round:
        """The round being played."""
        return self.result.rounds[-1]

    async def speak(self, key: str, number: int, stage: int) -> Turn | None:
        """One speaker's turn in round ``number``, stage ``stage`` (index into ``protocol.stages()``)."""
        if self.fallback is not None:
            return None
        turn: Turn | None = await self._guard(self._speak(key, number, stage))
        return turn

    async def _speak(self, key: str, number: int, stage: int) -> Turn:
        p = self.protocol
        rnd = self.current_round()
        seen = [t for t in rnd.turns if self._stage_of.get(id(t), stage) < stage]
        kwargs = {
            "phase": "turn",
            "rnd": number,
            "prompt": p.prompt_for(key),
            "section": "HISTORY",
            "visible": self.visible(key, number, seen),
            "task": p.task_for(key, number),
            "output": p.output_for(key),
            "max_tokens": p.max_tokens_per_turn,
        }
        turn, failed, ruler = await self._failover(p.personas[key], kwargs)
        if failed:  # the arbitrator (a speaker of its protocol) fails over too
            turn.judging = JudgingRecord(ruled_by=ruler if turn.ok else None, failed_models=failed)
        self._stage_of[id(turn)] = stage
        rnd.turns.append(turn)  # appended as it completes, so a timeout loses nothing finished
        await self.emit("turn_completed", round=number, speaker=key, turn=turn)
        self._check_failure(turn, f"turn failed: {key} in round {number}")
        return turn

    async def play_stage(self, number: int, stage: int) -> None:
        """All speakers of one stage, concurrently; siblings are cancelled once the run must stop.

        Every task is awaited. An exception that is not a run-time failure (an ``on_event``
        callback that raised, a usage error) cancels the siblings and is re-raised.
        """
        tasks = [asyncio.create_task(self.speak(k, number, stage)) for k in self.protocol.stages()[stage]]
        pending = set(tasks)
        try:
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    task.result()  # re-raise what a turn could not record as a failed turn
                if self.fallback is not None and not self.fallback.startswith("budget:"):
                    break  # (a budget stop lets the turns in flight finish: their cost is reserved)
        finally:
            for task in pending:
                task.cancel()
            # Cancelled turns record themselves (marked cancelled, usage kept) as they unwind.
            await asyncio.gather(*tasks, return_exceptions=True)

    async def moderate(self, number: int) -> Turn | None:
        """The moderator's evaluation of round ``number`` (if any), then ``round_completed``."""
        if self.fallback is not None:
            return None
        rnd = self.current_round()
        spec = self.protocol.moderator
        # No valid argument yet: nothing to evaluate, and the debate goes on (a later round may
        # argue); if none ever does, finish() falls back, saying so.
        if spec is not None and self._no_argument() is None:
            await self._guard(self._step(spec, "moderator", number, rnd.turns))
            if self.fallback is not None:
                return rnd.moderator
        await self.emit("round_completed", round=number)
        return rnd.moderator

    def next_round(self, number: int) -> bool:
        """After round ``number``, open the next round and return True, or return False.

        False means the last round was played, the early-stop rule fired (which sets
        ``stopped_early``), or the run must fall back.
        """
        if self.fallback is not None or number >= self.protocol.rounds:
            return False
        if self._should_stop(self.current_round()):
            self.result.stopped_early = True
            return False
        self.result.rounds.append(Round(number=number + 1))
        return True

    async def judge(self) -> Turn | None:
        """The judge's verdict over all turns (if the protocol has a judge)."""
        if self.fallback is not None or self.protocol.judge is None:
            return None
        last = self.result.rounds[-1].number if self.result.rounds else 0
        await self._guard(self._step(self.protocol.judge, "judge", last, self.result.turns()))
        return self.result.verdict

    async def finish(self) -> DebateResult:
        """Decide (or fall back), stamp the timings, emit ``debate_completed``.

        Turns cancelled when the run stopped get their ``turn_completed`` (or
        ``judge_completed``) event here, so an event log holds every turn of the result.
        """
        for turn in self._unreported:
            kind: EventKind = "turn_completed" if turn.phase == "turn" else "judge_completed"
            await self.emit(kind, round=turn.round, speaker=turn.speaker, turn=turn)
        self._unreported.clear()
        if self.fallback is None and self.protocol.aggregation != "none":
            reason = self._no_argument()
            if reason is not None:
                self._stop(reason)
        if self.fallback is None:
            self._decide()
            self._check_answer()
        await self._deferred_audits()
        self._judging_summary()
        if self.fallback is not None:
            self.result.fallback = self.fallback
            self.result.final_answer = (
                self.initial_answer
                if self.initial_answer is not None
                else consensus.best_answer(self.result, self.protocol.answer_field)
            )
        self.result.metrics.update(consensus.quality_metrics(self.result, self.protocol.decision_speakers))
        self.result.timings.wall_ms = (time.perf_counter() - self._t0) * 1000
        await self.emit("debate_completed", result=self.result)
        if self.observed is not None:
            unreachable = unreachable_error(self.result)
            # Each endpoint's concurrency limit range, 429s and time-outs, as a bench records them.
            endpoints = self.debate.endpoint_stats()
            summary: dict[str, Any] | None = {"endpoints": endpoints} if endpoints else None
            audit = self.result.metrics.get("judge_audit")
            if audit is not None:  # keyed by method, as a bench's (moot runs show, the viewer)
                summary = {**(summary or {}), "judge_audit": {self.protocol.name: audit}}
            if unreachable is not None and self.initial_answer is None:
                # No answer at all, for a run-time reason: the run failed (its fallback result is kept).
                error = f"cannot reach the model endpoint: {unreachable}"  # (which names its class)
                self.observed.end("failed", self.result, error=error, summary=summary)
            else:
                # A fallback or a failed turn: stored fell_back, as the CLI exits 1 (a degraded result).
                status: observe.EndStatus = "fell_back" if self.result.degraded else "complete"
                self.observed.end(status, self.result, summary=summary)
        return self.result

    async def skip(self) -> DebateResult:
        """Skip the debate (``debate_mode`` off): the result is the initial answer, unchanged.

        The run's observers are told it ended ``skipped``.
        """
        self.debate_mode = False
        handle = self.observe()
        try:
            self.result.skipped = True
            self.result.final_answer = self.initial_answer
            await self.emit("debate_completed", result=self.result)
        except BaseException as exc:
            handle.fail(exc)
            raise
        handle.end("skipped", self.result)
        return self.result

    async def execute(self) -> DebateResult:
        """All steps in the protocol's order (a failure or cancellation is told to the observers)."""
        try:
            await self.begin()
            number = 1
            while True:
                for stage in range(len(self.protocol.stages())):
                    await self.play_stage(number, stage)
                await self.moderate(number)
                if not self.next_round(number):
                    break
                number += 1
            await self.judge()
            return await self.finish()
        except BaseException as exc:
            self.fail(exc)
            raise

    # -- one model call -------------------------------------------------------------------------
    async def _call(
        self,
        persona: Persona,
        *,
        phase: str,
        rnd: int,
        prompt: str,
        section: str,
        visible: list[Turn],
        task: str,
        output: str,
        max_tokens: int,
        shown_as: Persona | None = None,
        model: Model | None = None,
        decisive: tuple[str, ...] = (),
        last_try: bool = True,
    ) -> Turn:
        """One structured call and its turn.

        ``shown_as``: the persona the prompt names (a blind judge's neutral one); ``model``: the
        model to ask (a deciding role's failover model); ``decisive``: fields a cut reply may not
        hold (:func:`moot.structured.ask`); ``last_try`` False: a failure is not counted as a failed
        turn (another model will rule).
        """
        output_type = get_output(output)
        model = model or self.debate.model_for(persona.key)
        spec = self.protocol.history
        if spec is not None and spec.strategy == "summarize" and phase != "summary":
            # Speakers read the latest finished round whole; moderator and judge, the current one.
            visible = await self._summarized(visible, rnd - 2 if phase == "turn" else rnd - 1)

        def build(turns: list[Turn], note: str) -> list[Message]:
            return build_messages(
                prompt=prompt,
                topic=self.topic,
                context=self.context_json,
                persona=shown_as or persona,
                section=section,
                turns=turns,
                task=task + note,
                output_type=output_type,
                max_tokens=max_tokens,
            )

        fitted = await self._fit(model, visible, build, max_tokens)
        messages = fitted.messages
        await self.emit("turn_started", round=rnd, speaker=persona.key, phase=phase)
        retries: list[str] = []

        def on_retry(attempt: int, err: ModelError, wait: float) -> None:
            retries.append(f"{persona.key}: retry {attempt + 1} in {wait:.2f}s after {err}")

        stats = CallStats()
        started = time.perf_counter()
        attempt = 0

        def before_call() -> None:
            # Reserve this request's most before it starts (a round's turns run together).
            nonlocal attempt
            self.ledger.reserve(stats, model, messages, max_tokens, attempt)
            attempt += 1
            self._before_call()

        def asking() -> Awaitable[Outcome]:
            return ask(
                model,
                messages,
                output_type,
                max_tokens=max_tokens,
                temperature=self.protocol.temperature,
                metadata={"speaker": persona.key, "round": rnd, "phase": phase, "debate": self.id},
                retry=self.protocol.retry,
                before_call=before_call,
                on_retry=on_retry,
                stats=stats,
                validation_context={"topic": self.topic},
                on_request=self._request_events(persona.key, rnd, phase) if self.listened else None,
                deadline=self.deadline,
                decisive=decisive,
            )

        try:
            outcome = await asking()
            too_long = outcome.exception
            if isinstance(too_long, ContextLengthExceeded):
                # Not sent again as it was: once more with a history that fits what the server said.
                tokens = fitted.tokens or estimate_tokens(model, messages)
                limit = self._learn_window(model, too_long, max_tokens, tokens)
                fitted = await self._fit(model, visible, build, max_tokens, tighter=limit)
                messages, attempt = fitted.messages, 0
                logger.warning(
                    "%s refused a prompt as longer than its context window: %s's turn was sent again "
                    "with %d earlier turns left out",
                    model.name,
                    persona.key,
                    fitted.left_out,
                )
                outcome = await asking()
        except asyncio.CancelledError:
            # The run stopped (deadline, a sibling's fallback) with this call in flight: keep the
            # turn, marked cancelled, with the requests it already sent in the usage.
            self._record_cancelled(persona, phase, rnd, output, model, stats, started, messages)
            raise
        except BudgetExceeded:
            if stats.usage.attempts or stats.usage.calls:  # a repair refused: its first request counts
                self._record_cancelled(persona, phase, rnd, output, model, stats, started, messages)
            else:
                self.ledger.release(stats)
            raise
        for msg in retries:
            await self.emit("retry", round=rnd, speaker=persona.key, message=msg)
        turn = turn_from(outcome, persona, phase, rnd, output, model.name)
        turn.sent = messages
        if turn.ok:
            trim(turn, model, max_tokens)
        self._account(turn, stats)
        if not turn.ok and last_try:
            self.result.failed_turns += 1
            # INFO: the result, its events and every interface show a failed turn; what the CLI
            # says as a warning is the degradation behind it (retries exhausted, a mode refused).
            logger.info(
                "debate %s: %s %s (round %s) failed: %s", self.id, phase, persona.key, rnd, turn.error
            )
            await self.emit("error", round=rnd, speaker=persona.key, message=turn.error)
        return turn

    # -- history that fits the window (moot.history) ------------------------------------------------
    async def _check_window(self) -> None:
        """A topic and context that alone pass a speaker's window: one usage error, before any call.

        Raises:
            UsageError: a speaker's first prompt, with no history, does not fit its model's window.
        """
        p = self.protocol
        for key in p.speakers():
            model = self.debate.model_for(key)
            messages = build_messages(
                prompt=p.prompt_for(key),
                topic=self.topic,
                context=self.context_json,
                persona=p.personas[key],
                section="HISTORY",
                turns=[],
                task=p.task_for(key, 1),
                output_type=get_output(p.output_for(key)),
                max_tokens=p.max_tokens_per_turn,
            )
            window = await self._window_for(model, messages, p.max_tokens_per_turn)
            if window is None:
                continue
            tokens = estimate_tokens(None, messages)  # characters: no model is loaded before the run
            if tokens + p.max_tokens_per_turn > window:
                raise UsageError(
                    f"the topic and context alone take ~{tokens} tokens: with {p.max_tokens_per_turn} "
                    f"for the reply they pass {model.name}'s {window}-token context window "
                    "(shorten them, or use a model with a larger window)"
                )

    async def _window_for(self, model: Model, messages: list[Message], max_tokens: int) -> int | None:
        """The window a prompt must fit in, or None (unknown, or the prompt is far below any window)."""
        if model.name in self._windows:
            return self._windows[model.name] or None
        known = model.known_window()
        if known is not None:
            return known
        rough = sum(len(m.content) for m in messages) / CHARS_PER_TOKEN
        if rough + max_tokens < SMALLEST_WINDOW:
            return None  # any window in use holds it: no need to ask the server yet
        window = await model.window()
        self._windows[model.name] = window or 0
        return window

    def _learn_window(self, model: Model, err: ContextLengthExceeded, max_tokens: int, tokens: int) -> int:
        """A tighter prompt limit after the server refused a prompt of ~``tokens`` tokens as too long."""
        if err.window:
            self._windows[model.name] = err.window
            return int(min(err.window - max_tokens, tokens) * 0.75)
        return tokens // 2

    async def _fit(
        self,
        model: Model,
        visible: list[Turn],
        build: Callable[[list[Turn], str], list[Message]],
        max_tokens: int,
        *,
        tighter: int | None = None,
    ) -> Fitted:
        """The call's messages with a history that fits the window and the ``history`` option."""
        spec = self.protocol.history
        whole = build(visible, "")
        window = await self._window_for(model, whole, max_tokens)
        limit = None if window is None else window - max_tokens
        if tighter is not None:
            limit = tighter if limit is None else min(limit, tighter)
        if limit is None and (spec is None or spec.max_tokens is None):
            return Fitted(whole, 0, 0)  # nothing bounds it: sent as built
        fitted = fit_turns(model, visible, build, prompt_limit=limit, spec=spec)
        if fitted.left_out:
            shortened = self.result.metrics.setdefault(
                "history", {"strategy": spec.strategy if spec is not None else "window", "calls": 0}
            )
            shortened["calls"] = shortened.get("calls", 0) + 1
            shortened["turns_left_out"] = shortened.get("turns_left_out", 0) + fitted.left_out
            if spec is None and not self._warned_window:
                self._warned_window = True
                logger.warning(
                    "debate %s: prompts would pass %s's %s-token context window: their earliest turns "
                    "are left out (the window strategy; set history: {max_tokens: N, strategy: "
                    "window|summarize} to choose)",
                    self.id,
                    model.name,
                    window if window is not None else "(learned)",
                )
        return fitted

    async def _summarized(self, visible: list[Turn], upto: int) -> list[Turn]:
        """``visible`` with the turns of rounds 1 to ``upto`` replaced by their summary (if it was made)."""
        if upto < 1 or not any(t.round <= upto and t.phase != "summary" for t in visible):
            return visible
        summary = await self._summary(upto)
        if summary is None or not summary.ok:
            return visible  # a failed summary: the window strategy will shorten the turns instead
        return [summary, *(t for t in visible if t.round > upto)]

    async def _summary(self, upto: int) -> Turn | None:
        """The summary of rounds 1 to ``upto``, made once (each round's from the one before)."""
        async with self._summary_lock:
            made: Turn | None = None
            for number in range(1, upto + 1):
                rnd = self.result.rounds[number - 1]
                if rnd.summary is None:
                    if self.fallback is not None:
                        return None
                    rnd.summary = await self._summarize(number, made)
                made = rnd.summary
            return made

    async def _summarize(self, number: int, before: Turn | None) -> Turn:
        """One summary call: the summary so far and round ``number``'s turns, recorded as a turn."""
        p = self.protocol
        spec = p.history
        assert spec is not None
        key = spec.summarizer or next(
            (s.persona for s in (p.judge, p.moderator) if s is not None), p.speakers()[0]
        )
        rnd = self.result.rounds[number - 1]
        earlier = (
            [before]
            if before is not None and before.ok
            else [t for r in self.result.rounds[: number - 1] for t in _round_turns(r)]
        )
        turn = await self._call(
            p.personas[key],
            phase="summary",
            rnd=number,
            prompt="history_summarizer.md",
            section="ALL_TURNS",
            visible=[*earlier, *_round_turns(rnd)],
            task=summary_task(number),
            output="message",
            max_tokens=spec.summary_max_tokens,
        )
        history = self.result.metrics.setdefault("history", {"strategy": "summarize", "calls": 0})
        history["summaries"] = history.get("summaries", 0) + 1
        await self.emit("turn_completed", round=number, speaker=key, turn=turn)
        return turn

    def _request_events(self, speaker: str, rnd: int, phase: str) -> OnRequest:
        """``model_request`` events for one turn's requests (only built when someone listens)."""

        async def on_request(record: RequestRecord) -> None:
            await self.emit("model_request", round=rnd, speaker=speaker, phase=phase, request=record)

        return on_request

    def _account(self, turn: Turn, stats: CallStats | None = None) -> None:
        self.result.usage = self.result.usage + turn.usage
        if stats is not None:  # counted now: its reservation goes back, in the same step
            self.ledger.release(stats)
        self.result.timings.model_ms += turn.latency_ms
        self.result.timings.queue_ms += turn.queue_ms

    def _record_cancelled(
        self,
        persona: Persona,
        phase: str,
        rnd: int,
        output: str,
        model: Model,
        stats: CallStats,
        started: float,
        messages: list[Message],
    ) -> None:
        reason = self.fallback or "cancelled"
        turn = cancelled_turn(persona, phase, rnd, output, model.name, stats, started, reason)
        turn.sent = messages
        self._account(turn, stats)
        self.result.cancelled_turns += 1
        self._unreported.append(turn)  # its event goes out from finish(): no awaiting while cancelled
        if phase == "judge":
            self.result.verdict = turn
        elif phase == "moderator":
            self.current_round().moderator = turn
        else:
            self.current_round().turns.append(turn)

    def _no_argument(self) -> str | None:
        """The fallback reason when the debate has speakers and every speaking turn failed, else None."""
        spoken = [t for t in self.result.turns() if t.phase == "turn"]
        if not self.protocol.speakers() or any(t.ok for t in spoken):
            return None
        # No argument to rule on: a decision now would be the judge's (or the rule's) own invention.
        return f"no argument: every speaking turn failed ({len(spoken)} turns)"

    async def _step(self, spec: JudgeSpec, phase: str, number: int, visible: list[Turn]) -> Turn:
        reason = self._no_argument()
        if reason is not None:
            raise _Stop(reason)
        judging = self.protocol.judging
        spoken = candidates(visible)  # in the persona order, not the order concurrent turns finished
        cands = [k for k in self.protocol.speakers() if k in spoken] + [
            k for k in spoken if k not in self.protocol.speakers()
        ]
        order = shown_order(
            cands, shuffle=judging.shuffle, seed=judging.seed, topic=self.topic, step=f"{phase}:{number}"
        )
        turn, labels = await self._ruling(spec, phase, number, visible, order, blind=judging.blind)
        record = turn.judging = turn.judging or JudgingRecord()
        record.order, record.blind, record.labels = order, judging.blind, labels
        record.shuffled = judging.shuffle and len(order) > 1
        if turn.ok:
            await self._audit(spec, phase, number, visible, turn, record)
        # Recorded before any stop decision, so a failed judge or moderator stays in the transcript.
        if phase == "judge":
            if turn.ok:
                self._check_spans(turn)
            self.result.verdict = turn
        else:
            self.current_round().moderator = turn
        await self.emit("judge_completed", round=number, speaker=turn.speaker, turn=turn)
        if not turn.ok and phase == "judge" and self.protocol.aggregation == "judge":
            raise _Stop(f"judge failed: {turn.error}")
        self._check_failure(turn, f"{phase} failed")
        if record.position_sensitive and phase == "judge" and spec.output not in _UNDECIDABLE:
            # No undecided label in this protocol's answer (a synthesis): it is not the debate's answer.
            raise _Stop("position-sensitive: the judge's decision changed with the candidates' order")
        return turn

    def _decisive(self, spec: JudgeSpec, phase: str) -> tuple[str, ...]:
        if phase == "moderator":
            return ("leaning", "confidence")
        if spec.answer_field:
            return (spec.answer_field,)
        return tuple(k for k in MAIN_TEXT_FIELDS if k in get_output(spec.output).model_fields)[:1]

    async def _ruling(
        self,
        spec: JudgeSpec,
        phase: str,
        number: int,
        visible: list[Turn],
        order: list[str],
        *,
        blind: bool,
        audit: bool = False,
        ruler: str | None = None,
    ) -> tuple[Turn, dict[str, str]]:
        """One deciding call over ``visible`` shown in ``order``, blind or not, with judge failover.

        Tried on each of the role's models in turn; returns the turn (content mapped back to
        persona keys) and the labels used.

        ``audit``: an audit call, asked of the model that ruled (``ruler``), outside the budget
        and the cost.
        """
        personas = self.protocol.personas
        persona = personas[spec.persona]
        rank = {k: i for i, k in enumerate(order)}
        shown = sorted(
            visible,
            key=lambda t: (t.round, rank.get(t.speaker, len(rank)) if t.phase == "turn" else len(rank)),
        )
        labels: dict[str, str] = {}
        prompt, shown_as = spec.prompt, None
        if blind:
            shown, labels = blind_turns(shown, order, personas)
            prompt = blind_prompt(spec.prompt)
            if persona.key in order:  # the judge also spoke (patch's CJ): its name would say which
                shown_as = Persona(key="judge", name="Judge", role="Judge", goal=spec.task)
        kwargs: dict[str, Any] = {
            "phase": phase,
            "rnd": number,
            "prompt": prompt,
            "section": "ALL_TURNS",
            "visible": shown,
            "task": spec.task,
            "output": spec.output,
            "max_tokens": spec.max_tokens or self.protocol.max_tokens_per_turn,
            "shown_as": shown_as,
            "decisive": self._decisive(spec, phase),
        }
        if audit:
            return await self._audit_call(persona, {**kwargs, "ruler": ruler}), labels
        turn, failed, ruler = await self._failover(persona, kwargs)
        if turn.ok and turn.content is not None and labels:
            turn.content = unblind(turn.content, labels)
        turn.judging = JudgingRecord(ruled_by=ruler if turn.ok else None, failed_models=failed)
        return turn, labels

    async def _failover(
        self, persona: Persona, kwargs: dict[str, Any]
    ) -> tuple[Turn, list[FailedModel], str]:
        """The call on each of the persona's models in turn until one succeeds (judge failover).

        A model that failed (after its retries, or its repair) is not a failed turn while another
        may still rule; the last one's failure is. Returns the turn, the models that failed and
        the spec name of the model that answered (the last tried).
        """
        models = self.debate.models_for(persona.key)
        failed: list[FailedModel] = []
        for i, model in enumerate(models):
            last = i == len(models) - 1
            turn = await self._call(persona, model=model, last_try=last, **kwargs)
            if turn.ok or last or turn.cancelled:
                return turn, failed, model.name
            failed.append(FailedModel(model=model.name, error=turn.error or "failed"))
            message = f"{model.name} failed, {models[i + 1].name} rules next: {turn.error}"
            await self.emit("retry", round=kwargs["rnd"], speaker=persona.key, message=message)
        raise AssertionError("unreachable: a persona has at least one model")

    async def _audit_call(self, persona: Persona, kwargs: dict[str, Any]) -> Turn:
        """An audit's call: no events, no budget, its usage kept apart from the run's."""
        output_type = get_output(kwargs["output"])
        messages = build_messages(
            prompt=kwargs["prompt"],
            topic=self.topic,
            context=self.context_json,
            persona=kwargs["shown_as"] or persona,
            section="ALL_TURNS",
            turns=kwargs["visible"],
            task=kwargs["task"],
            output_type=output_type,
            max_tokens=kwargs["max_tokens"],
        )
        models = self.debate.models_for(persona.key)
        model = next((m for m in models if m.name == kwargs["ruler"]), models[0])  # ask who ruled
        outcome = await ask(
            model,
            messages,
            output_type,
            max_tokens=kwargs["max_tokens"],
            temperature=self.protocol.temperature,
            metadata={
                "speaker": persona.key,
                "round": kwargs["rnd"],
                "phase": kwargs["phase"],
                "audit": True,
            },
            retry=self.protocol.retry,
            validation_context={"topic": self.topic},
            deadline=None if self._late else self.deadline,
            decisive=kwargs["decisive"],
        )
        turn = turn_from(outcome, persona, kwargs["phase"], kwargs["rnd"], kwargs["output"], model.name)
        turn.sent = messages
        return turn

    def _decided(self, spec: JudgeSpec, record: JudgingRecord, turn: Turn) -> str | None:
        return decision_of(
            turn,
            answer_field=spec.answer_field,
            personas=self.protocol.personas,
            cands=record.order,
            key=self.decision_key,
        )

    async def _audit(
        self, spec: JudgeSpec, phase: str, number: int, visible: list[Turn], turn: Turn, record: JudgingRecord
    ) -> None:
        """What a deciding turn decided, and the swap-robust check.

        The swap-robust second order is part of the decision: in its cost, under its deadline.
        The swap audit's calls wait for :meth:`finish` (:meth:`_deferred_audits`), so measuring
        never changes the run.
        """
        judging = self.protocol.judging
        cands = record.order
        record.decision = self._decided(spec, record, turn)
        side = candidate_of(
            record.decision,
            turn,
            personas=self.protocol.personas,
            cands=cands,
            seen=visible,
            answer_field=self.protocol.answer_field,
            key=self.decision_key,
        )
        record.sided_with = side
        if side is not None and cands:
            record.first_slot = side == cands[0]
        if len(cands) < 2 or not judging.swap_robust:
            return
        await self._second_opinions(spec, phase, number, visible, turn, record, reversed_=True, blind=False)
        if record.position_flip:
            record.position_sensitive = True
            _undecide(turn)

    async def _second_opinions(
        self,
        spec: JudgeSpec,
        phase: str,
        number: int,
        visible: list[Turn],
        turn: Turn,
        record: JudgingRecord,
        *,
        reversed_: bool,
        blind: bool,
    ) -> None:
        """Ask the deciding call again reversed and/or blind; record the decisions and flips.

        The reversed call of a swap-robust step is part of the decision (its cost); every other
        is the audit's, counted apart (``extra_calls``).
        """
        judging = self.protocol.judging
        cands = record.order
        asks, kinds = [], []
        if reversed_:
            record.reversed_order = audit_order(cands)
            asks.append(
                self._ruling(
                    spec,
                    phase,
                    number,
                    visible,
                    record.reversed_order,
                    blind=judging.blind,
                    audit=True,
                    ruler=record.ruled_by,
                )
            )
            kinds.append("reversed")
        if blind:
            asks.append(
                self._ruling(
                    spec, phase, number, visible, cands, blind=True, audit=True, ruler=record.ruled_by
                )
            )
            kinds.append("blind")
        for kind, (other, labels) in zip(kinds, await asyncio.gather(*asks), strict=True):
            if other.ok and other.content is not None and labels:
                other.content = unblind(other.content, labels)
            if kind == "reversed" and judging.swap_robust:
                self._account(other)
            else:
                record.extra_calls += other.usage.attempts
                record.extra_usage = record.extra_usage + other.usage
            if not other.ok:
                record.audit_errors.append(f"{kind}: {other.error}")
                continue
            value = self._decided(spec, record, other)
            flip = None if value is None or record.decision is None else value != record.decision
            if kind == "reversed":
                record.reversed_decision, record.position_flip = value, flip
            else:
                record.blind_decision, record.identity_flip = value, flip

    async def _deferred_audits(self) -> None:
        """The swap audit of every deciding turn (``judging.audit``), once the run has decided.

        Outside the run's deadline and budget: the audit measures the decision, it never changes
        it. The turns each step saw are read back from the result (a run resumed elsewhere too).
        """
        p = self.protocol
        if not p.judging.audit:
            return
        self._late = True  # past the decision: no deadline to keep
        steps: list[tuple[JudgeSpec, str, Turn, list[Turn]]] = []
        for rnd in self.result.rounds:
            if p.moderator is not None and rnd.moderator is not None:
                steps.append((p.moderator, "moderator", rnd.moderator, list(rnd.turns)))
        if p.judge is not None and self.result.verdict is not None:
            steps.append((p.judge, "judge", self.result.verdict, self.result.turns()))
        for spec, phase, turn, visible in steps:
            record = turn.judging
            if record is None or not turn.ok or len(record.order) < 2 or record.decision is None:
                continue
            if record.reversed_order is not None and (p.judging.blind or record.blind_decision is not None):
                continue  # audited already (a run resumed after its audit)
            await self._second_opinions(
                spec,
                phase,
                turn.round,
                visible,
                turn,
                record,
                reversed_=record.reversed_order is None,
                blind=not p.judging.blind,
            )

    def _check_failure(self, turn: Turn, what: str) -> None:
        if turn.ok:
            return
        if turn.error_kind in ("ModelConnectionError", "ModelTimeoutError"):
            # Retries are exhausted: every later call would fail the same way, slowly.
            raise _Stop(f"backend unreachable: {turn.error}")
        if self.protocol.on_turn_failure == "fallback":
            raise _Stop(f"{what}: {turn.error}")

    # -- rules ------------------------------------------------------------------------------------
    def visible(self, key: str, number: int, this_round: list[Turn]) -> list[Turn]:
        """The turns speaker ``key`` is shown in round ``number`` (the protocol's visibility rule).

        ``this_round``: the turns of round ``number`` finished before this speaker's stage.
        """
        earlier = [t for r in self.result.rounds if r.number < number for t in _round_turns(r)]
        mode = self.protocol.visibility
        if mode == "all":
            return earlier + this_round
        if mode == "previous_round":
            return [t for t in earlier if t.round == number - 1] + this_round
        if mode == "none":
            return [t for t in earlier + this_round if t.speaker == key]
        speakers = self.protocol.speakers()
        i = speakers.index(key)
        ring = {key, speakers[i - 1], speakers[(i + 1) % len(speakers)]}
        return [t for t in earlier + this_round if t.speaker in ring]

    def _should_stop(self, rnd: Round) -> bool:
        rule = self.protocol.early_stop
        if rule.rule == "moderator_confidence":
            mod = rnd.moderator
            conf = mod.get("confidence") if mod is not None and mod.ok else None
            return isinstance(conf, int | float) and conf > rule.threshold
        if rule.rule == "unanimous":
            answers = [consensus.normalise(t.get(self.protocol.answer_field)) for t in rnd.turns]
            return bool(answers) and all(a and a == answers[0] for a in answers)
        return False

    def _check_spans(self, verdict: Turn) -> None:
        field = self.protocol.evidence_spans_field
        if not field or verdict.content is None:
            return
        spans = verdict.content.get(field) or []
        kept = [s for s in spans if isinstance(s, str) and s and s in self.topic]
        verdict.content[field] = kept
        self.result.metrics["dropped_evidence_spans"] = len(spans) - len(kept)

    def _check_answer(self) -> None:
        """A decided answer that is blank is no answer: the run falls back, saying why.

        The shipped schemas already refuse blank content (:data:`moot.schemas.Content`); this
        catches what they cannot: a user's schema, a non-text answer field, a rule that decided
        nothing. A judge's blank verdict becomes a failed turn, its content kept as raw text.
        """
        p = self.protocol
        answer = self.result.final_answer
        if p.aggregation == "none" or (answer is not None and answer.strip()):
            return
        verdict = self.result.verdict
        if p.aggregation == "judge" and verdict is not None and verdict.ok:
            assert p.judge is not None
            field = p.judge.answer_field or "main text"
            verdict.error = f"blank answer: the judge's {field} is blank"
            verdict.error_kind = "blank_answer"
            verdict.raw = json.dumps(verdict.content, ensure_ascii=False)
            verdict.content = None
            self.result.failed_turns += 1
            logger.info("debate %s: judge %s failed: %s", self.id, verdict.speaker, verdict.error)
            self._stop(f"judge failed: {verdict.error}")
        else:
            self._stop(f"no answer: the {p.aggregation} rule decided no answer")

    def _decide(self) -> None:
        p = self.protocol
        if p.aggregation == "judge":
            verdict = self.result.verdict
            assert p.judge is not None and verdict is not None
            value = verdict.get(p.judge.answer_field) if p.judge.answer_field else verdict.text
            self.result.final_answer = value if isinstance(value, str) else verdict.text
        elif p.aggregation != "none":
            decision = consensus.decide(
                p.aggregation, self.result, answer_field=p.answer_field, speakers=p.decision_speakers
            )
            self.result.decision = decision
            self.result.final_answer = decision.label


_UNDECIDABLE = ("summary", "moderation", "patch_judgement")
"""Deciding outputs with an undecided outcome of their own (a tie, uncertain, no accepted edit)."""


def _undecide(turn: Turn) -> None:
    """A position-sensitive decision made undecided: no winner, leaning uncertain, no accepted edit."""
    content = turn.content
    if content is None:
        return
    if turn.output == "summary":
        content["winner"] = None
    elif turn.output == "moderation":
        content["leaning"] = "uncertain"
        content["pro_logic"] = content["con_logic"] = None  # the side scores were as order-bound
        content["consensus_reached"] = False
    elif turn.output == "patch_judgement":
        content["final_patch"] = []


def _round_turns(rnd: Round) -> list[Turn]:
    return rnd.turns + ([rnd.moderator] if rnd.moderator is not None else [])


def unreachable_error(result: DebateResult) -> str | None:
    """The first turn's error when every turn that ran found the endpoint unreachable, else None."""
    # Turns cancelled when the debate stopped never reached the endpoint: they prove nothing.
    turns = [t for t in result.turns(include_judge=True) if not t.cancelled]
    if turns and all(t.error_kind == "ModelConnectionError" for t in turns):
        return turns[0].error
    return None
