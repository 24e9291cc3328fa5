from __future__ import annotations

import asyncio
import json

import pytest

from engine_helpers import ans, critical_fails_others_wait
from moot import Debate, DebateResult, Event, FunctionModel, ModelRequest, ScriptedModel, UsageError
from moot.errors import ModelConnectionError, ModelHTTPError
from moot.models.retry import RetryPolicy


def answer_script() -> dict[str, list[object]]:
    return {
        "affirmative": [ans("A1", 0.6), ans("A2", 0.7)],
        "critical": [ans("C1", 0.5), ans("C2", 0.9)],
        "synthesizer": [{"final_answer": "merged", "citations": ["doc1"]}],
    }


def simple_protocol(**over: object) -> dict[str, object]:
    base: dict[str, object] = {
        "name": "t",
        "personas": {"a": {"stance": "pro"}, "b": {"stance": "con"}, "c": {}, "j": {}},
        "order": ["a", "b", "c"],
        "rounds": 2,
        "turn_output": "answer",
        "judge": {"persona": "j", "output": "synthesis", "answer_field": "final_answer"},
    }
    base.update(over)
    return base


def test_answer_preset_call_count_order_and_result() -> None:
    model = ScriptedModel(answer_script())
    result = Debate("answer", model=model).run_sync("Q?", context={"docs": ["d1"]})
    assert result.final_answer == "merged"
    assert result.fallback is None
    assert result.usage.calls == 5
    phases = [(r.metadata["speaker"], r.metadata["round"]) for r in model.requests]
    assert set(phases[:2]) == {("affirmative", 1), ("critical", 1)}
    assert set(phases[2:4]) == {("affirmative", 2), ("critical", 2)}
    assert phases[4] == ("synthesizer", 2)
    assert [len(r.turns) for r in result.rounds] == [2, 2]
    # usage is the sum of the per-turn usage the backend reported
    assert result.usage.prompt_tokens == sum(t.usage.prompt_tokens for t in result.turns(include_judge=True))


def test_simultaneous_turns_overlap_and_see_only_earlier_rounds() -> None:
    model = ScriptedModel(answer_script(), delay=0.05)
    Debate("answer", model=model).run_sync("Q?")
    assert model.max_in_flight == 2  # measured overlap, not inferred from timing
    r1 = [r for r in model.requests if r.metadata["round"] == 1]
    for req in r1:
        assert "(none yet)" in req.messages[1].content  # round 1 sees no one
    crit_r2 = next(
        r for r in model.requests if r.metadata == {**r.metadata, "speaker": "critical", "round": 2}
    )
    text = crit_r2.messages[1].content
    assert "A1" in text and "C1" in text and "A2" not in text


def test_sequential_each_sees_turns_before_it() -> None:
    seen: dict[tuple[str, int], str] = {}

    def fn(req: ModelRequest) -> dict[str, object]:
        key = (req.metadata["speaker"], req.metadata["round"])
        seen[key] = req.messages[1].content
        if req.metadata["phase"] == "judge":
            return {"final_answer": "F"}
        return ans(f"{key[0]}{key[1]}")

    model = FunctionModel(fn)
    Debate(simple_protocol(), model=model).run_sync("T")
    assert "a1" not in seen[("a", 1)]
    assert "a1" in seen[("b", 1)] and "b1" not in seen[("b", 1)]
    assert "a1" in seen[("c", 1)] and "b1" in seen[("c", 1)]
    assert all(x in seen[("a", 2)] for x in ("a1", "b1", "c1"))
    assert model.max_in_flight == 1


@pytest.mark.parametrize(
    ("visibility", "speaker", "expected", "hidden"),
    [
        ("previous_round", "a", {"a2", "b2", "c2"}, {"a1", "b1", "c1"}),
        ("none", "b", {"b1", "b2"}, {"a1", "a2", "c1", "c2", "a3"}),
        ("ring", "a", {"a1", "b1", "c1", "a2", "b2", "c2"}, set()),
    ],
)
def test_visibility_rules(visibility: str, speaker: str, expected: set[str], hidden: set[str]) -> None:
    seen: dict[tuple[str, int], str] = {}
    personas = {"a": {}, "b": {}, "c": {}, "d": {}, "j": {}}
    order = ["a", "b", "c", "d"] if visibility == "ring" else ["a", "b", "c"]

    def fn(req: ModelRequest) -> dict[str, object]:
        key = (req.metadata["speaker"], req.metadata["round"])
        seen[key] = req.messages[1].content
        return {"final_answer": "F"} if req.metadata["phase"] == "judge" else ans(f"{key[0]}{key[1]}")

    proto = simple_protocol(visibility=visibility, rounds=3, personas=personas, order=order)
    Debate(proto, model=FunctionModel(fn)).run_sync("T")
    text = seen[(speaker, 3)]
    if visibility == "ring":
        # a's neighbours on the ring a-b-c-d are d and b: c is not visible
        assert "d2" in text and "b2" in text and "c1" not in text and "c2" not in text
        return
    for label in expected:
        assert label in text
    for label in hidden:
        assert label not in text


def test_invalid_output_is_repaired_once_with_the_error() -> None:
    script = answer_script()
    script["critical"] = ["not json at all", ans("C1"), ans("C2")]
    model = ScriptedModel(script)
    result = Debate("answer", model=model).run_sync("Q?")
    crit = [t for t in result.turns() if t.speaker == "critical"]
    assert crit[0].repaired and crit[0].ok and crit[0].usage.calls == 2
    repair = next(r for r in model.requests if r.metadata["attempt"] == 1)
    assert "did not match the required JSON schema" in repair.messages[-1].content
    assert repair.messages[-2].content == "not json at all"
    assert result.usage.calls == 6


def test_failed_turn_is_recorded_not_invented_and_debate_continues() -> None:
    proto = simple_protocol(rounds=1)
    model = ScriptedModel(
        {"a": [ans("x")], "b": ["bad", {"confidence": 2}], "c": [ans("z")], "j": [{"final_answer": "F"}]}
    )
    result = Debate(proto, model=model).run_sync("T")
    b = next(t for t in result.turns() if t.speaker == "b")
    assert not b.ok and b.content is None and b.raw == '{"confidence": 2}'
    assert "answer" in (b.error or "")
    assert result.failed_turns == 1 and result.final_answer == "F" and result.fallback is None


def test_failed_turn_with_fallback_policy_uses_initial_answer() -> None:
    script = answer_script()
    script["critical"] = ["bad", "still bad"]
    result = Debate("answer", model=ScriptedModel(script)).run_sync("Q?", initial_answer="initial")
    assert result.final_answer == "initial"
    assert result.fallback is not None and result.fallback.startswith("turn failed: critical")


def test_backend_failure_falls_back_to_best_answer_so_far() -> None:
    script = answer_script()
    script["synthesizer"] = [ModelHTTPError(400, "bad request")]
    result = Debate("answer", model=ScriptedModel(script)).run_sync("Q?")
    assert result.fallback is not None and "judge failed" in result.fallback
    assert result.final_answer == "C2"  # the most confident answer of the last round
    assert len(result.rounds) == 2  # nothing lost


def test_timeout_falls_back_and_keeps_finished_turns() -> None:
    async def fn(req: ModelRequest) -> dict[str, object]:
        if req.metadata["round"] == 2:
            await asyncio.sleep(5)
        return ans(f"{req.metadata['speaker']}-r1", 0.8 if req.metadata["speaker"] == "critical" else 0.4)

    result = Debate("answer", model=FunctionModel(fn), overrides={"timeout": 0.2}).run_sync("Q?")
    assert result.fallback == "timeout: the debate exceeded 0.2 s"
    assert result.final_answer == "critical-r1"
    assert len(result.rounds[0].turns) == 2
    assert result.timings.wall_ms < 2000


def test_timeout_with_initial_answer() -> None:
    async def slow(req: ModelRequest) -> str:
        await asyncio.sleep(5)
        return "{}"

    result = Debate("answer", model=FunctionModel(slow), overrides={"timeout": 0.1}).run_sync(
        "Q?", initial_answer="from step5"
    )
    assert result.final_answer == "from step5" and result.fallback is not None


def test_debate_mode_off_skips_everything() -> None:
    model = ScriptedModel([])
    result = Debate("answer", model=model).run_sync("Q?", initial_answer="keep me", debate_mode=False)
    assert result.skipped and result.final_answer == "keep me" and result.usage.calls == 0
    assert model.requests == []


def test_call_budget_stops_with_fallback() -> None:
    model = ScriptedModel(answer_script())
    result = Debate("answer", model=model, overrides={"budget": {"max_calls": 3}}).run_sync("Q?")
    assert result.usage.calls == 3
    assert result.fallback is not None and result.fallback.startswith("budget: calls budget exhausted")


def test_token_budget_stops_with_fallback() -> None:
    model = ScriptedModel(answer_script())
    result = Debate("answer", model=model, overrides={"budget": {"max_tokens": 50}}).run_sync("Q?")
    assert result.fallback is not None and "tokens budget" in result.fallback
    assert result.usage.calls < 5


def test_per_turn_cap_is_sent_and_answers_trimmed() -> None:
    long = " ".join(f"w{i}" for i in range(40))
    script = answer_script()
    script["affirmative"] = [ans(long), ans("short")]
    model = ScriptedModel(script)
    result = Debate("answer", model=model, overrides={"max_tokens_per_turn": 10}).run_sync("Q?")
    first = result.rounds[0].turns
    aff = next(t for t in first if t.speaker == "affirmative")
    assert aff.trimmed and len(aff.get("answer").split()) == 10
    caps = {r.metadata["speaker"]: r.max_tokens for r in model.requests}
    assert caps["affirmative"] == 10 and caps["synthesizer"] == 800


def test_retries_transient_errors_honouring_retry_after() -> None:
    script = answer_script()
    script["affirmative"] = [ModelHTTPError(429, "slow down", retry_after=0.01), ans("A1"), ans("A2")]
    script["critical"] = [ModelConnectionError("reset"), ans("C1"), ans("C2")]
    events: list[Event] = []
    proto = {"extends": "answer", "retry": {"base_delay": 0.001, "max_retries": 2}}
    result = Debate(proto, model=ScriptedModel(script)).run_sync("Q?", on_event=events.append)
    assert result.fallback is None and result.usage.calls == 5
    retries = [e.message for e in events if e.kind == "retry"]
    assert any("in 0.01s" in (m or "") for m in retries)
    assert len(retries) == 2


def test_non_retryable_error_is_not_retried() -> None:
    script = answer_script()
    script["affirmative"] = [ModelHTTPError(401, "bad key")]
    model = ScriptedModel(script)
    result = Debate("answer", model=model).run_sync("Q?")
    assert sum(1 for r in model.requests if r.metadata["speaker"] == "affirmative") == 1
    assert result.fallback is not None


def test_events_sequence_and_stream() -> None:
    events: list[Event] = []
    Debate("answer", model=ScriptedModel(answer_script())).run_sync("Q?", on_event=events.append)
    kinds = [e.kind for e in events]
    assert kinds[0] == "debate_started" and kinds[-1] == "debate_completed"
    assert kinds.count("turn_started") == 5 and kinds.count("turn_completed") == 4
    assert kinds.count("round_completed") == 2 and kinds.count("judge_completed") == 1
    assert events[-1].result is not None and events[-1].result.final_answer == "merged"

    async def collect() -> list[str]:
        debate = Debate("answer", model=ScriptedModel(answer_script()))
        return [e.kind async for e in debate.stream("Q?")]

    assert asyncio.run(collect()) == kinds


def test_async_event_callback_is_awaited() -> None:
    seen: list[str] = []

    async def cb(event: Event) -> None:
        await asyncio.sleep(0)
        seen.append(event.kind)

    Debate("answer", model=ScriptedModel(answer_script())).run_sync("Q?", on_event=cb)
    assert seen[-1] == "debate_completed"


def test_result_round_trips_through_json() -> None:
    result = Debate("answer", model=ScriptedModel(answer_script())).run_sync("Q?")
    again = DebateResult.model_validate_json(result.model_dump_json())
    assert again == result
    assert json.loads(result.model_dump_json())["usage"]["calls"] == 5


def test_role_models_route_per_persona() -> None:
    main = ScriptedModel({"affirmative": [ans("A1"), ans("A2")], "critical": [ans("C1"), ans("C2")]})
    judge = ScriptedModel([{"final_answer": "by judge model"}], name="test:judge")
    result = Debate("answer", model=main, role_models={"synthesizer": judge}).run_sync("Q?")
    assert result.final_answer == "by judge model"
    assert result.verdict is not None and result.verdict.model == "test:judge"
    assert len(judge.requests) == 1 and len(main.requests) == 4


def test_empty_topic_is_a_usage_error() -> None:
    with pytest.raises(UsageError):
        Debate("answer", model=ScriptedModel([])).run_sync("   ")


def test_concurrent_debates_share_one_model_gate() -> None:
    model = ScriptedModel({"*": [ans("x")] * 40}, delay=0.02)
    model.max_concurrency = 3
    proto = simple_protocol(turn_mode="simultaneous", rounds=1, judge=None, aggregation="majority")

    async def many() -> list[DebateResult]:
        debate = Debate(proto, model=model)
        return await asyncio.gather(*(debate.run(f"T{i}") for i in range(5)))

    results = asyncio.run(many())
    assert all(r.final_answer == "x" for r in results)
    assert model.max_in_flight == 3


def test_retry_policy_delay_uses_retry_after_and_caps() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=4.0)
    assert policy.delay(0, ModelHTTPError(429, retry_after=2.5)) == 2.5
    assert policy.delay(0, ModelHTTPError(429, retry_after=100)) == 4.0
    for attempt in range(6):
        assert 0 <= policy.delay(attempt, ModelConnectionError("x")) <= min(4.0, 2**attempt)


def test_unreachable_backend_ends_the_debate_at_once() -> None:
    model = ScriptedModel({"*": [ModelConnectionError("refused")] * 10})
    proto = {"extends": "panel", "retry": {"max_retries": 0}}
    result = Debate(proto, model=model).run_sync("T")
    assert len(model.requests) == 1  # not seven slow failures
    assert result.fallback is not None and result.fallback.startswith("backend unreachable")
    assert result.rounds[0].turns[0].error_kind == "ModelConnectionError"


def test_unanimous_early_stop_and_majority_vote() -> None:
    proto = simple_protocol(
        turn_mode="simultaneous",
        rounds=3,
        judge=None,
        aggregation="majority",
        early_stop={"rule": "unanimous"},
    )
    model = ScriptedModel(
        {"a": [ans("7"), ans("42")], "b": [ans("42"), ans("42.")], "c": [ans("9"), ans(" 42")]}
    )
    result = Debate(proto, model=model).run_sync("T")
    assert result.stopped_early and len(result.rounds) == 2 and result.usage.calls == 6
    assert result.decision is not None and result.decision.label == "42" and result.decision.confidence == 1.0


def test_majority_tie_goes_to_first_given_answer() -> None:
    proto = simple_protocol(turn_mode="sequential", rounds=1, judge=None, aggregation="majority")
    proto["personas"] = {"a": {}, "b": {}, "c": {}, "d": {}}
    proto["order"] = ["a", "b", "c", "d"]
    model = ScriptedModel({"a": [ans("x")], "b": [ans("y")], "c": [ans("y")], "d": [ans("x")]})
    result = Debate(proto, model=model).run_sync("T")
    assert result.decision is not None and result.decision.label == "x" and result.decision.confidence == 0.5


def test_a_failed_sibling_cancels_the_rest_of_its_group() -> None:
    cancelled: list[str] = []
    model = critical_fails_others_wait(ModelHTTPError(400, "bad"), cancelled)
    result = Debate("answer", model=model).run_sync("Q?", initial_answer="init")
    assert cancelled == ["affirmative"]
    assert result.final_answer == "init" and result.fallback is not None
    assert result.timings.wall_ms < 2000


def test_skipped_run_resolves_no_model() -> None:
    debate = Debate("answer", model="no-such-provider:x")
    result = debate.run_sync("Q?", initial_answer="as is", debate_mode=False)
    assert result.skipped and result.final_answer == "as is"


def test_backend_timeout_error_without_protocol_timeout() -> None:
    def fn(req: ModelRequest) -> object:
        raise TimeoutError("socket timed out")

    result = Debate("answer", model=FunctionModel(fn)).run_sync("Q?")
    # A backend's own TimeoutError is a failed turn like any other backend bug, not our deadline.
    assert result.fallback is not None and "unexpected TimeoutError" in result.fallback
    failed = [t for t in result.turns() if not t.ok and not t.cancelled]
    assert failed and failed[0].error_kind == "TimeoutError"


def test_start_and_steps_equal_run() -> None:
    async def stepwise() -> DebateResult:
        run = Debate("answer", model=ScriptedModel(answer_script())).start("Q?")
        return await run.execute()

    a = asyncio.run(stepwise())
    b = Debate("answer", model=ScriptedModel(answer_script())).run_sync("Q?")
    assert a.final_answer == b.final_answer == "merged" and a.usage == b.usage


def test_speakers_who_see_the_same_turns_share_the_prompt_up_to_their_persona() -> None:
    # A concurrent group in round 2 sees exactly round 1: with the transcript before [PERSONA] (and
    # no per-viewer mark in it), a prefix cache reads the whole shared transcript only once.
    seen: dict[tuple[str, int], list[str]] = {}

    def fn(req: ModelRequest) -> dict[str, object]:
        key = (str(req.metadata["speaker"]), int(req.metadata["round"]))
        seen[key] = [m.content for m in req.messages]
        return {"final_answer": "F"} if req.metadata["phase"] == "judge" else ans(f"{key[0]}{key[1]}")

    proto = simple_protocol(order=[["a", "b", "c"]], visibility="previous_round")
    Debate(proto, model=FunctionModel(fn)).run_sync("T")
    prompts = [seen[(s, 2)] for s in ("a", "b", "c")]
    assert prompts[0][0] == prompts[1][0] == prompts[2][0]  # the system message
    shared = [p[1].split("[PERSONA]")[0] for p in prompts]
    assert shared[0] == shared[1] == shared[2]
    assert all(x in shared[0] for x in ("a1", "b1", "c1")) and "(you)" not in shared[0]
    assert '"key": "a"' in prompts[0][1].split("[PERSONA]")[1]  # the speaker still knows who it is


def test_print_of_a_result_says_why_it_fell_back() -> None:
    """A FunctionModel that answers only what the speakers need: the synthesizer's turn fails.

    The answer handed on is a speaker's and reads like any other; ``print(result)`` puts the
    reason beside it (issue 33: the README's example fell back under ``answer`` silently).
    """
    model = FunctionModel(lambda req: {"answer": req.metadata["speaker"], "confidence": 0.5})
    result = Debate("answer", model=model).run_sync("Q?")
    assert result.fallback == "judge failed: invalid output: final_answer: Field required"
    shown = str(result)
    assert f"answer debate {result.id}: final answer 'affirmative'" in shown
    assert "FALLBACK, because judge failed: invalid output: final_answer: Field required" in shown
    assert "1 failed turn(s)" in shown

    def both(req: ModelRequest) -> dict[str, object]:
        if req.metadata["phase"] == "judge":
            return {"final_answer": "merged"}
        return {"answer": "a", "confidence": 0.5}

    clean = Debate("answer", model=FunctionModel(both)).run_sync("Q?")
    assert clean.fallback is None and "FALLBACK" not in str(clean) and "final answer 'merged'" in str(clean)
