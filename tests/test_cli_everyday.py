"""The everyday ``moot run``: the demo-model notice and runs that end with no debate answer."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from moot.cli import main
from moot.cli.run import DEMO_NOTICE
from moot.errors import ModelHTTPError
from moot.models import ModelRequest
from moot.models.testing import FunctionModel


def _reply(req: ModelRequest) -> dict[str, object]:
    if req.metadata["phase"] == "judge":
        return {"final_answer": "synthesised", "citations": []}
    return {"answer": f"{req.metadata['speaker']} r{req.metadata['round']}", "confidence": 0.6}


def _refuse(req: ModelRequest) -> dict[str, object]:
    raise ModelHTTPError(400, body="bad request", model="fake:broken")


def _demo(rest: str) -> FunctionModel:
    model = FunctionModel(_reply, name=f"demo:{rest}")
    model.embedded = True  # type: ignore[attr-defined]  # what LocalModel sets for the bundled model
    return model


@pytest.fixture(autouse=True)
def _fake(fake_provider: Callable[..., None]) -> None:
    fake_provider("fake", lambda rest: FunctionModel(_reply, name=f"fake:{rest}"))
    fake_provider("demo", _demo)
    fake_provider("broken", lambda rest: FunctionModel(_refuse, name=f"broken:{rest}"))


def test_demo_notice_once_and_dim(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "Why?", "--model", "demo:x"]) == 0
    out = capsys.readouterr().out
    assert out.count("SmolLM2-135M demo model") == 1
    for needle in ("--model openai:", "OPENAI_BASE_URL", "MOOT_MODEL", "not reasoning quality"):
        assert needle in DEMO_NOTICE
    # The notice is one line of its own, without rich markup leaking into it.
    assert DEMO_NOTICE.replace("\n", " ") in out.replace("\n", " ")


def test_demo_notice_also_when_one_persona_is_the_demo_model(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "Why?", "--model", "fake:x", "--role-model", "critical=demo:y"]
    assert main(argv) == 0
    assert "demo model" in capsys.readouterr().out


def test_no_notice_for_other_models_or_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "Why?", "--model", "fake:x"]) == 0
    assert "demo model" not in capsys.readouterr().out
    assert main(["run", "Why?", "--model", "demo:x", "--json"]) == 0
    captured = capsys.readouterr()
    assert "demo model" not in captured.out + captured.err


def test_only_a_fallback_exits_1_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "Why?", "--model", "broken:x", "--initial-answer", "Because."]
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert "Because." in captured.out  # the summary still shows what the caller gets
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("moot: the answer is a fallback")


def test_no_answer_at_all_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "Why?", "--model", "broken:x", "--json"]) == 1
    captured = capsys.readouterr()
    assert captured.out.count("\n") == 1  # the result is still printed
    assert captured.err.startswith("moot: the debate produced no answer (turn failed: affirmative")
    assert captured.err.count("\n") == 1


def test_skipped_debate_is_not_a_failure(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "Why?", "--model", "broken:x", "--no-debate-mode", "--initial-answer", "Kept."]
    assert main(argv) == 0
    assert "Kept." in capsys.readouterr().out
