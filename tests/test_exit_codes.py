"""The exit-code contract (moot.cli._exit): 0 complete, 1 degraded result written, 2 usage error."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from moot.absa import FinalResult
from moot.arbitration import ArbitrationResult
from moot.cli import main
from moot.errors import ModelConnectionError, ModelHTTPError
from moot.models import ModelRequest
from moot.models.testing import FunctionModel
from moot.runs import RunStore
from moot.transcript import DebateResult


def unreachable(request: ModelRequest) -> Any:
    err = ModelConnectionError("connection refused: http://127.0.0.1:9/v1", model="down:x")
    err.retryable = False  # as after the retries ran out, without the tests waiting for them
    raise err


def adversarial_brain(request: ModelRequest) -> dict[str, Any]:
    """The opponent's turns are invalid even after the repair; everything else answers."""
    speaker, phase = request.metadata["speaker"], request.metadata["phase"]
    if speaker == "opponent":
        return {"nonsense": True}
    if phase == "moderator":
        return {"evaluation": "e", "leaning": "support", "confidence": 0.5}
    return {"content": "a", "confidence": 0.9, "supporting_evidence": ["fact"]}


@pytest.fixture(autouse=True)
def _fakes(fake_provider: Callable[..., None]) -> None:
    fake_provider("down", lambda rest: FunctionModel(unreachable, name=f"down:{rest}"))
    fake_provider("half", lambda rest: FunctionModel(adversarial_brain, name=f"half:{rest}"))


def test_run_unreachable_with_initial_answer_falls_back_to_it_and_exits_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["run", "Why?", "--model", "down:x", "--initial-answer", "the pipeline's answer", "--json"]
    assert main(argv) == 1
    res = DebateResult.model_validate_json(capsys.readouterr().out)
    assert res.final_answer == "the pipeline's answer"
    assert res.fallback is not None and "connection refused" in res.fallback


def failing(request: ModelRequest) -> Any:
    err = ModelHTTPError(500, "internal error", model="fail:x")
    err.retryable = False  # as after the retries ran out
    raise err


def test_run_failing_endpoint_with_initial_answer_falls_back_to_it(
    fake_provider: Callable[..., None], capsys: pytest.CaptureFixture[str]
) -> None:
    fake_provider("fail", lambda rest: FunctionModel(failing, name=f"fail:{rest}"))
    assert main(["run", "Why?", "--model", "fail:x", "--initial-answer", "kept", "--json"]) == 1
    res = DebateResult.model_validate_json(capsys.readouterr().out)
    assert res.final_answer == "kept" and res.fallback is not None and "HTTP 500" in res.fallback


def test_run_unreachable_without_initial_answer_is_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "Why?", "--model", "down:x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("moot: error: cannot reach the model endpoint")


def test_run_with_failed_turns_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "Tabs are better", "--protocol", "adversarial", "--model", "half:x", "--json"]
    assert main(argv) == 1
    res = DebateResult.model_validate_json(capsys.readouterr().out)
    assert res.fallback is None and res.failed_turns >= 2
    # The stored status says the same as the exit code: degraded, not complete.
    with RunStore(os.environ["MOOT_STORE"]) as store:
        assert store.list()[0].status == "fell_back"


def test_absa_unreachable_exits_1_with_the_result(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["absa", "The soup was cold.", "--model", "down:x", "--json"]) == 1
    res = FinalResult.model_validate_json(capsys.readouterr().out)
    assert res.errors and all("connection refused" in e for e in res.errors.values())


def test_absa_batch_unreachable_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text(json.dumps({"sentence": "The soup was cold."}) + "\n")
    assert main(["absa", "--input", str(inp), "--output", str(out), "--model", "down:x"]) == 1
    assert len(out.read_text().splitlines()) == 1
    # A batch shows no trace: the failed sentence is said once, as it happens.
    warnings = [x for x in capsys.readouterr().err.splitlines() if x.startswith("moot: warning:")]
    assert len(warnings) == 1 and "connection refused" in warnings[0]
    assert warnings[0].startswith('moot: warning: sentence "1": ate failed: ModelConnectionError: ')


def test_arbitrate_unreachable_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reports = [
        {
            "agent": "A",
            "findings": [{"metric": "rate", "value": 0.10, "citation": "[GCC-STAT]", "confidence": 0.9}],
        },
        {
            "agent": "B",
            "findings": [{"metric": "rate", "value": 0.12, "citation": "[World Bank]", "confidence": 0.8}],
        },
    ]
    path = tmp_path / "reports.json"
    path.write_text(json.dumps(reports))
    assert main(["arbitrate", str(path), "--model", "down:x", "--json"]) == 1
    res = ArbitrationResult.model_validate_json(capsys.readouterr().out)
    assert res.contradictions_found == 1 and res.rulings[0].decision is None
    assert main(["arbitrate", str(path), "--model", "down:x"]) == 1
