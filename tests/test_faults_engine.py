"""Nothing fails silently: backend bugs, raising callbacks, failed judges, cancelled turns, usage."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from engine_helpers import ans, critical_fails_others_wait
from moot import Debate, DebateResult, Event, FunctionModel, ModelRequest, ScriptedModel
from moot.errors import ConfigError, ModelHTTPError, ModelRequestsBlocked
from moot.models.testing import SchemaModel


@pytest.fixture
def loop_errors() -> Iterator[list[dict[str, Any]]]:
    """Collect what asyncio reports to its exception handler ("Task exception was never retrieved")."""
    seen: list[dict[str, Any]] = []
    policy = asyncio.get_event_loop_policy()
    original = policy.new_event_loop

    def new_loop() -> asyncio.AbstractEventLoop:
        loop = original()
        loop.set_debug(True)
        loop.set_exception_handler(lambda _loop, ctx: seen.append(ctx))
        return loop

    policy.new_event_loop = new_loop  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        policy.new_event_loop = original  # type: ignore[method-assign]


def run_debate(debate: Debate, topic: str = "Q?", **kwargs: Any) -> DebateResult:
    """run_sync, then collect garbage so an unretrieved task exception would be reported now."""
    import gc

    result = debate.run_sync(topic, **kwargs)
    gc.collect()
    return result


class TestBackendBugs:
    def test_unexpected_exception_becomes_a_failed_turn(
        self, loop_errors: list[dict[str, Any]], caplog: pytest.LogCaptureFixture
    ) -> None:
        def fn(req: ModelRequest) -> object:
            if req.metadata["speaker"] == "critical":
                raise KeyError("choices")  # a backend bug, not a ModelError
            return ans("A") if req.metadata["phase"] == "turn" else {"final_answer": "m"}

        protocol = {"extends": "answer", "on_turn_failure": "continue", "timeout": None}
        with caplog.at_level(logging.INFO, logger="moot"):
            result = run_debate(Debate(protocol, model=FunctionModel(fn, name="t:buggy")))
        failed = [t for t in result.turns() if not t.ok]
        assert [t.speaker for t in failed] == ["critical", "critical"]
        assert failed[0].error_kind == "KeyError"
        assert failed[0].error is not None and "unexpected KeyError from t:buggy" in failed[0].error
        assert result.failed_turns == 2
        assert result.verdict is not None and result.verdict.ok
        assert loop_errors == []
        # The bug is logged with its traceback under the "moot" logger, and the failed turn at INFO.
        assert any(r.exc_info and r.name.startswith("moot") for r in caplog.records)
        assert any("critical (round 1) failed" in r.getMessage() for r in caplog.records)

    def test_usage_errors_reach_the_caller_after_siblings_are_awaited(
        self, loop_errors: list[dict[str, Any]]
    ) -> None:
        cancelled: list[str] = []
        model = critical_fails_others_wait(ModelRequestsBlocked("blocked"), cancelled)
        with pytest.raises(ModelRequestsBlocked):
            run_debate(Debate("answer", model=model))
        assert cancelled == ["affirmative"]
        assert loop_errors == []


class TestCallbacks:
    @pytest.mark.parametrize("when", ["turn_started", "turn_completed", "debate_completed"])
    def test_a_raising_on_event_reaches_the_caller(
        self, when: str, loop_errors: list[dict[str, Any]]
    ) -> None:
        class Boom(Exception):
            pass

        def on_event(event: Event) -> None:
            if event.kind == when:
                raise Boom(when)

        model = SchemaModel(delay=0.01)
        with pytest.raises(Boom, match=when):
            run_debate(Debate("answer", model=model), on_event=on_event)
        assert loop_errors == []


def test_missing_prompt_file_fails_at_load_time() -> None:
    model = ScriptedModel([])
    with pytest.raises(ConfigError, match="no-such-prompt.md"):
        Debate(
            {"extends": "panel", "judge": {"persona": "judge", "prompt": "no-such-prompt.md"}}, model=model
        )
    with pytest.raises(ConfigError, match="missing.md"):
        Debate({"extends": "answer", "speaker_prompt": "missing.md"}, model=model)
    assert model.requests == []


class TestFailedDecidersStayInTheTranscript:
    def test_failed_judge_is_the_verdict_with_its_raw_text(self) -> None:
        script: dict[str, list[object]] = {
            "affirmative": [ans("A1"), ans("A2")],
            "critical": [ans("C1"), ans("C2")],
            "synthesizer": ["not json at all", "still not json"],
        }
        events: list[Event] = []
        result = run_debate(
            Debate("answer", model=ScriptedModel(script)), initial_answer="init", on_event=events.append
        )
        verdict = result.verdict
        assert verdict is not None and not verdict.ok
        assert verdict.raw == "still not json" and verdict.error_kind == "invalid_output"
        assert result.fallback is not None and result.fallback.startswith("judge failed")
        assert result.final_answer == "init"
        assert result.failed_turns == 1
        assert any(e.kind == "judge_completed" and e.turn == verdict for e in events)

    def test_failed_moderator_is_kept_in_its_round(self) -> None:
        def fn(req: ModelRequest) -> object:
            if req.metadata["phase"] == "moderator":
                return "garbage"
            return {"content": "arg", "confidence": 0.6, "supporting_evidence": ["e"]}

        protocol = {"extends": "adversarial", "on_turn_failure": "fallback"}
        result = run_debate(Debate(protocol, model=FunctionModel(fn)))
        moderator = result.rounds[0].moderator
        assert moderator is not None and not moderator.ok and moderator.raw == "garbage"
        assert result.fallback is not None and "moderator failed" in result.fallback
        assert moderator in result.turns()


class TestCancelledTurnsAndUsage:
    def test_cancelled_sibling_is_marked_and_its_request_counted(self) -> None:
        sent: list[str] = []

        async def fn(req: ModelRequest) -> object:
            sent.append(req.metadata["speaker"])
            if req.metadata["speaker"] == "critical":
                raise ModelHTTPError(400, "bad")
            await asyncio.sleep(5)
            return ans("never")

        events: list[Event] = []
        debate = Debate("answer", model=FunctionModel(fn))
        result = run_debate(debate, initial_answer="init", on_event=events.append)
        (cancelled,) = [t for t in result.turns() if t.cancelled]
        # The event log holds it too, before debate_completed.
        kinds = [(e.kind, e.turn.cancelled if e.turn else None) for e in events]
        assert kinds.index(("turn_completed", True)) < kinds.index(("debate_completed", None))
        assert cancelled.speaker == "affirmative" and cancelled.error_kind == "cancelled"
        assert cancelled.usage.attempts == 1 and cancelled.usage.calls == 0
        assert result.cancelled_turns == 1 and result.failed_turns == 1
        assert result.usage.attempts == len(sent) == 2
        assert result.usage.calls == 0

    def test_deadline_cancels_turns_in_flight_and_keeps_them(self) -> None:
        async def fn(req: ModelRequest) -> object:
            if req.metadata["round"] == 2:
                await asyncio.sleep(5)
            return ans(f"{req.metadata['speaker']}{req.metadata['round']}")

        model = FunctionModel(fn)
        protocol = {"extends": "answer", "timeout": 0.3}
        result = run_debate(Debate(protocol, model=model))
        assert result.fallback is not None and result.fallback.startswith("timeout")
        assert [t.speaker for t in result.rounds[1].turns if t.cancelled] != []
        assert all(t.cancelled for t in result.rounds[1].turns)
        assert result.usage.attempts == len(model.requests) == 4
        assert result.usage.calls == 2

    def test_a_turn_cut_off_during_its_repair_keeps_the_rejected_answer(self) -> None:
        async def fn(req: ModelRequest) -> object:
            if req.metadata["attempt"] == 1:
                await asyncio.sleep(5)  # the repair is still running when the deadline passes
            return "not json at all"

        model = FunctionModel(fn)
        result = run_debate(Debate({"extends": "answer", "timeout": 0.3}, model=model))
        assert result.fallback is not None and result.fallback.startswith("timeout")
        cut = result.rounds[0].turns
        assert len(cut) == 2 and all(t.cancelled for t in cut)
        for turn in cut:
            assert turn.raw == "not json at all"
            assert turn.error is not None and "its last answer was rejected: invalid output" in turn.error
            assert (turn.usage.calls, turn.usage.attempts) == (1, 2)

    def test_retries_are_counted_as_attempts(self) -> None:
        failures = {"n": 0}

        def fn(req: ModelRequest) -> object:
            if req.metadata["speaker"] == "affirmative" and failures["n"] < 2:
                failures["n"] += 1
                raise ModelHTTPError(503, "busy", retry_after=0)
            return ans("x") if req.metadata["phase"] == "turn" else {"final_answer": "m"}

        model = FunctionModel(fn)
        result = run_debate(Debate("answer", model=model))
        assert result.failed_turns == 0
        first = next(t for t in result.turns() if t.speaker == "affirmative")
        assert (first.usage.calls, first.usage.attempts) == (1, 3)
        assert result.usage.calls == 5
        assert result.usage.attempts == len(model.requests) == 7

    def test_latency_excludes_the_wait_for_the_model_gate(self) -> None:
        model = FunctionModel(lambda req: ans("x"), delay=0.2)
        model.max_concurrency = 1  # the two simultaneous speakers queue for one slot
        protocol = {"extends": "answer", "rounds": 1, "timeout": None}
        result = run_debate(Debate(protocol, model=model))
        turns = result.rounds[0].turns
        waited = max(turns, key=lambda t: t.queue_ms)
        assert waited.queue_ms >= 150
        assert waited.latency_ms < 350  # its own 0.2 s, not the 0.2 s it queued behind the other
        assert result.timings.queue_ms >= 150


def test_run_ids_are_unique_uuids() -> None:
    debate = Debate("answer", model=SchemaModel())
    ids = {run_debate(debate).id for _ in range(3)}
    assert len(ids) == 3 and all(len(i) == 12 for i in ids)


def test_leaving_a_stream_early_cancels_and_awaits_the_run(loop_errors: list[dict[str, Any]]) -> None:
    model = SchemaModel(delay=0.05)
    debate = Debate("answer", model=model)

    async def first_two() -> list[str]:
        kinds = []
        stream = debate.stream("Q?")
        async for event in stream:
            kinds.append(event.kind)
            if len(kinds) == 2:
                break
        await stream.aclose()  # type: ignore[attr-defined]
        # The run was cancelled and awaited: no task but this one is left.
        assert asyncio.all_tasks() == {asyncio.current_task()}
        return kinds

    assert asyncio.run(first_two()) == ["debate_started", "turn_started"]
    calls = len(model.requests)
    assert calls <= 2
    import gc

    gc.collect()
    assert loop_errors == []


def test_a_callback_timeout_error_is_not_mistaken_for_the_deadline() -> None:
    def on_event(event: Event) -> None:
        if event.kind == "turn_completed":
            raise TimeoutError("the callback's own")

    with pytest.raises(TimeoutError, match="the callback's own"):
        run_debate(Debate("answer", model=SchemaModel()), on_event=on_event)
