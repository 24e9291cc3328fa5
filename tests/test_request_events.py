"""``model_request`` events: one per request a turn sends, with what it cost and how it ended."""

from __future__ import annotations

import json

from engine_helpers import ans
from moot import Debate, FunctionModel, ModelRequest, ScriptedModel
from moot.errors import ModelHTTPError
from moot.transcript import Event


def _synth(text: str) -> dict[str, object]:
    return {"final_answer": text, "citations": [], "confidence": 0.7}


def test_one_event_per_request_with_usage_model_and_params() -> None:
    events: list[Event] = []
    result = Debate("answer", model="test", overrides={"temperature": 0.3}).run_sync(
        "Why is the sky blue?", on_event=events.append
    )
    requests = [e for e in events if e.kind == "model_request"]
    assert len(requests) == result.usage.calls == 5
    for e in requests:
        assert e.request is not None and e.phase in ("turn", "judge")
        assert e.request.model == "test:schema" and e.request.response_model == "test:schema"
        assert e.request.temperature == 0.3 and e.request.max_tokens in (500, 800)
        assert e.request.usage.calls == 1 and e.request.usage.prompt_tokens > 0
        assert e.request.finish_reason == "stop" and e.request.error_kind is None
        assert e.request.started <= e.request.ended and e.request.messages
    total = sum(e.request.usage.prompt_tokens for e in requests if e.request)
    assert total == result.usage.prompt_tokens
    # turn_started says the phase too, so a subscriber knows a judge's turn from a speaker's
    assert {e.phase for e in events if e.kind == "turn_started"} == {"turn", "judge"}


def test_repair_is_a_second_request_and_retries_are_inside_one() -> None:
    failures = {"n": 0}

    def fn(req: ModelRequest) -> object:
        who = req.metadata["speaker"]
        if who == "affirmative" and req.metadata["round"] == 1 and failures["n"] < 2:
            failures["n"] += 1
            raise ModelHTTPError(503, "busy", model="test:function", retry_after=0)
        if who == "critical" and req.metadata["round"] == 1 and req.metadata["attempt"] == 0:
            return "not json at all"
        if who == "synthesizer":
            return _synth("blue")
        return ans("Rayleigh scattering")

    events: list[Event] = []
    Debate("answer", model=FunctionModel(fn)).run_sync("Why is the sky blue?", on_event=events.append)
    reqs = [e for e in events if e.kind == "model_request" and e.round == 1]
    aff = [e.request for e in reqs if e.speaker == "affirmative" and e.request]
    assert len(aff) == 1 and aff[0].usage.attempts == 3 and aff[0].usage.calls == 1
    assert [(r.error_kind, r.status) for r in aff[0].retries] == [("ModelHTTPError", 503)] * 2
    crit = [e.request for e in reqs if e.speaker == "critical" and e.request]
    assert [(r.attempt, r.error_kind) for r in crit] == [(0, "invalid_output"), (1, None)]


def test_a_failed_request_says_why_and_text_is_never_serialised() -> None:
    model = ScriptedModel(
        {"affirmative": [ModelHTTPError(400, "bad request", model="m")], "*": [ans("x")] * 3 + [_synth("y")]}
    )
    events: list[Event] = []
    Debate("answer", model=model, overrides={"on_turn_failure": "continue"}).run_sync(
        "SECRET-TOPIC-TEXT", on_event=events.append
    )
    failed = [e.request for e in events if e.kind == "model_request" and e.request and e.request.error_kind]
    assert [r.error_kind for r in failed] == ["ModelHTTPError"] and failed[0].usage.calls == 0
    for e in events:
        if e.kind == "model_request":
            dumped = json.loads(e.model_dump_json())
            assert "messages" not in dumped["request"] and "reply" not in dumped["request"]
            assert "SECRET-TOPIC-TEXT" not in e.model_dump_json()


def test_no_listener_no_records() -> None:
    # Without on_event the engine builds no request record at all (the hook is not even passed).
    model = ScriptedModel([ans("a"), ans("b"), ans("c"), ans("d"), _synth("e")])
    result = Debate("answer", model=model).run_sync("q")
    assert result.usage.calls == 5 and model.remaining == 0
