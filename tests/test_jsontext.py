"""Reading model replies: lenient control characters, precise errors, replies cut at the cap."""

from __future__ import annotations

import pytest

from moot import Debate, FunctionModel, ModelRequest
from moot.jsontext import JSONTextError, escape_controls, extract_json, parse_partial
from moot.models.base import ModelResponse, Usage
from moot.schemas import AnswerTurn
from moot.structured import _validate


class TestLenient:
    def test_literal_newlines_and_tabs_inside_strings(self) -> None:
        assert extract_json('{"answer": "line one\nline two\tend"}') == {"answer": "line one\nline two\tend"}

    def test_escape_controls_touches_only_strings(self) -> None:
        text = '{\n  "a": "x\ny",\n  "b": "tab\there \\"q\\" "\n}'
        assert escape_controls(text) == '{\n  "a": "x\\ny",\n  "b": "tab\\there \\"q\\" "\n}'


class TestPreciseErrors:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("no json here", "no JSON object in the reply"),
            ('{"answer": "the sky is blu', "truncated JSON: the object opened at character 0"),
            ('Sure: {"answer": "x", "confidence": 0.', "truncated JSON: the object opened at character 6"),
            ('{"answer": "x" "confidence": 1}', "invalid JSON at character 15: Expecting ',' delimiter"),
            ("{'answer': 'x'}", "invalid JSON at character 1: Expecting property name"),
        ],
    )
    def test_messages(self, text: str, expected: str) -> None:
        with pytest.raises(JSONTextError) as info:
            extract_json(text)
        assert str(info.value).startswith(expected)

    def test_wrong_field_is_named(self) -> None:
        value, error, _ = _validate(AnswerTurn, '{"answr": "x"}')
        assert value is None and error == "answer: Field required"


class TestPartial:
    def test_cut_reply_keeps_the_string_being_written(self) -> None:
        readings = parse_partial('{"answer": "Because of Rayleigh scat')
        assert readings[0] == {"answer": "Because of Rayleigh scat"}

    def test_cut_reply_with_required_fields_is_kept_trimmed(self) -> None:
        text = '{"answer": "Because of Rayleigh scattering", "confidence": 0.8, "citations": ["doc1", "do'
        value, error, trimmed = _validate(AnswerTurn, text, "length")
        assert error is None and trimmed
        assert isinstance(value, AnswerTurn) and value.answer == "Because of Rayleigh scattering"
        assert value.citations == ["doc1", "do"]

    def test_cut_reply_is_not_salvaged_without_finish_reason_length(self) -> None:
        value, error, _ = _validate(AnswerTurn, '{"answer": "Because of', "stop")
        assert value is None and error is not None and error.startswith("truncated JSON")

    def test_cut_reply_missing_a_required_field_is_repaired(self) -> None:
        replies = [
            ModelResponse(text='{"confid', usage=Usage(calls=1), finish_reason="length"),
            {"answer": "short", "confidence": 0.5},
        ]
        calls: list[ModelRequest] = []

        def fn(req: ModelRequest) -> object:
            calls.append(req)
            if req.metadata["phase"] == "judge":
                return {"final_answer": "f"}
            if req.metadata["speaker"] == "affirmative" and req.metadata["round"] == 1:
                return replies.pop(0)
            return {"answer": "a", "confidence": 0.5}

        result = Debate("answer", model=FunctionModel(fn)).run_sync("Q?")
        first = result.rounds[0].turns
        affirmative = next(t for t in first if t.speaker == "affirmative")
        assert affirmative.repaired and affirmative.get("answer") == "short"
        repair = next(r for r in calls if r.metadata["attempt"] == 1)
        assert "truncated JSON" in repair.messages[-1].content
        assert "cut off at the token limit" in repair.messages[-1].content

    def test_debate_turn_cut_at_the_cap_is_kept_and_marked_trimmed(self) -> None:
        def fn(req: ModelRequest) -> object:
            if req.metadata["phase"] == "judge":
                return {"final_answer": "f"}
            return ModelResponse(
                text='{"answer": "a long answer that ran ', usage=Usage(calls=1), finish_reason="length"
            )

        result = Debate("answer", model=FunctionModel(fn)).run_sync("Q?")
        turns = result.rounds[0].turns
        assert all(t.ok and t.trimmed and not t.repaired for t in turns)
        assert turns[0].get("answer") == "a long answer that ran "
        assert result.usage.calls == 5
