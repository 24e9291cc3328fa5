"""Blank is failed: a real HTTP server answers a seam's decisive text with blanks.

For each seam (a speaker's answer, the synthesizer's merge, a judge's consensus, a
moderator's evaluation) the server answers that schema with whitespace where the
content belongs. The turn must be a failed turn with its raw text kept, the run must
fall back saying why, keep ``--initial-answer``, exit 1 and be stored ``fell_back``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fault_server import Fate, FaultServer, schema_reply
from moot import Debate, models
from moot.cli import main
from moot.models.testing import ScriptedModel
from moot.runs import open_store

BLANK = "  \n "
KEEP = "KEEP: the pipeline's own answer"


def _blanking(title: str, field: str) -> Any:
    """A handler: valid replies, except ``field`` is blank in replies to schema ``title``."""

    def handler(n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
        data = json.loads(schema_reply(body))
        fmt = body.get("response_format") or {}
        schema = (fmt.get("json_schema") or {}).get("schema") or {}
        if schema.get("title") == title:
            data[field] = BLANK
        return Fate(content=json.dumps(data))

    return handler


@pytest.fixture
def allow(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(models.base, "ALLOW_MODEL_REQUESTS", True)
    yield


def _run(server: FaultServer, name: str, *args: str) -> int:
    spec = f"openai:{name}?base_url={server.url}&api_key_env=BLANK_TEST_KEY"
    try:
        return main(
            ["run", "Is tea better than coffee?", "--model", spec, "--initial-answer", KEEP, "--json", *args]
        )
    finally:
        models._CACHE.pop(spec, None)  # resolved specs are cached per process


SEAMS = [
    # (case, preset args, schema title, blank field, phase of the failed turn, reason start)
    ("speaker", ["--protocol", "answer"], "AnswerTurn", "answer", "turn", "turn failed: affirmative"),
    ("synthesis", ["--protocol", "answer"], "Synthesis", "final_answer", "judge", "judge failed"),
    (
        "judge",
        ["--protocol", "panel", "--rounds", "1"],
        "DebateSummary",
        "consensus",
        "judge",
        "judge failed",
    ),
    (
        "moderator",
        ["--protocol", "adversarial", "--rounds", "1"],
        "Moderation",
        "evaluation",
        "moderator",
        "moderator failed",
    ),
]


@pytest.mark.usefixtures("allow")
@pytest.mark.parametrize(
    ("case", "args", "title", "field", "phase", "reason"), SEAMS, ids=[s[0] for s in SEAMS]
)
def test_a_blank_decisive_text_is_a_failed_turn_and_the_run_falls_back(
    case: str,
    args: list[str],
    title: str,
    field: str,
    phase: str,
    reason: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("BLANK_TEST_KEY", "k")
    if case == "moderator":  # seed 002 goes on after a failed turn; this run asks it to fall back
        cfg = tmp_path / "strict.yaml"
        cfg.write_text("on_turn_failure: fallback\n", encoding="utf-8")
        args = [*args, "--config", str(cfg)]
    with FaultServer(_blanking(title, field)) as server:
        code = _run(server, f"blank-{case}", *args)
        sent = server.requests
    result = json.loads(capsys.readouterr().out)
    assert code == 1
    assert result["final_answer"] == KEEP
    assert result["fallback"].startswith(reason), result["fallback"]
    assert "blank" in result["fallback"] and "Value error" not in result["fallback"]
    failed = [t for t in _all_turns(result) if t["error"] is not None and not t["cancelled"]]
    assert failed and all(t["phase"] == phase for t in failed)
    assert result["failed_turns"] == len(failed)
    for turn in failed:
        assert turn["content"] is None
        assert json.loads(turn["raw"])[field] == BLANK  # the raw text is kept for audit
    assert result["usage"]["attempts"] == sent
    store = open_store()
    assert store is not None
    with store:
        (record,) = store.list(kind="run", limit=1)
    assert record.status == "fell_back"


@pytest.mark.usefixtures("allow")
def test_a_blank_moderator_in_a_debate_that_goes_on_is_a_failed_turn(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # on_turn_failure: continue (seed 002): the decision is made without the evaluation, and says so.
    monkeypatch.setenv("BLANK_TEST_KEY", "k")
    with FaultServer(_blanking("Moderation", "evaluation")) as server:
        code = _run(server, "blank-moderator-continue", "--protocol", "adversarial", "--rounds", "1")
    result = json.loads(capsys.readouterr().out)
    assert code == 1
    (moderator,) = [t for t in _all_turns(result) if t["phase"] == "moderator"]
    assert moderator["content"] is None and json.loads(moderator["raw"])["evaluation"] == BLANK
    assert result["failed_turns"] == 1


def test_a_blank_answer_in_a_users_schema_still_falls_back() -> None:
    # A judge whose answer field is free text in a schema that does not refuse blanks.
    from pydantic import BaseModel

    from moot.schemas import register_output

    class LooseVerdict(BaseModel):
        verdict: str

    register_output("loose_verdict_test", LooseVerdict)
    model = ScriptedModel({"*": [{"answer": "a", "confidence": 0.5}] * 4, "synthesizer": [{"verdict": " "}]})
    debate = Debate(
        "answer",
        model=model,
        overrides={
            "judge": {
                "persona": "synthesizer",
                "output": "loose_verdict_test",
                "answer_field": "verdict",
                "prompt": "synthesizer.md",
            }
        },
    )
    result = debate.run_sync("Q?", initial_answer=KEEP)
    assert result.final_answer == KEEP
    assert result.fallback == "judge failed: blank answer: the judge's verdict is blank"
    assert result.verdict is not None and result.verdict.error_kind == "blank_answer"
    assert json.loads(result.verdict.raw or "") == {"verdict": " "}
    assert result.failed_turns == 1


def test_without_an_initial_answer_the_fallback_is_never_blank() -> None:
    # Every speaker's answer was valid but the synthesis blank: the best speaker answer is kept.
    model = ScriptedModel(
        {"*": [{"answer": "tea", "confidence": 0.9}] * 4, "synthesizer": [{"final_answer": " "}] * 2}
    )
    result = Debate("answer", model=model).run_sync("Q?")
    assert result.fallback is not None and result.fallback.startswith("judge failed")
    assert result.final_answer == "tea"


def _all_turns(result: dict[str, Any]) -> list[dict[str, Any]]:
    turns = [t for r in result["rounds"] for t in r["turns"]]
    turns += [r["moderator"] for r in result["rounds"] if r.get("moderator")]
    return turns + ([result["verdict"]] if result.get("verdict") else [])
