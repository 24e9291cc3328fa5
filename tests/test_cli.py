from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from moot.cli import main
from moot.models import ModelRequest
from moot.models.testing import FunctionModel
from moot.transcript import DebateResult


def _reply(req: ModelRequest) -> dict[str, object]:
    if req.metadata["phase"] == "judge":
        return {"final_answer": "synthesised", "citations": []}
    return {"answer": f"{req.metadata['speaker']} r{req.metadata['round']}", "confidence": 0.6}


@pytest.fixture(autouse=True)
def _fake(fake_provider: Callable[..., None]) -> None:
    fake_provider("fake", lambda rest: FunctionModel(_reply, name=f"fake:{rest}"))


def test_json_prints_exactly_one_result_object(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "Why?", "--model", "fake:x", "--json"]) == 0
    out = capsys.readouterr().out
    result = DebateResult.model_validate_json(out)
    assert result.final_answer == "synthesised" and result.usage.calls == 5
    assert out.count("\n") == 1


def test_live_output_shows_speakers_rounds_and_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "Why?", "--model", "fake:x"]) == 0
    out = capsys.readouterr().out
    for needle in ("affirmative", "critical", "round 2", "synthesised", "5 calls"):
        assert needle in out


def test_out_writes_event_stream(tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    assert main(["run", "Why?", "--model", "fake:x", "--out", str(out), "--json"]) == 0
    kinds = [json.loads(line)["kind"] for line in out.read_text().splitlines()]
    assert kinds[0] == "debate_started" and kinds[-1] == "debate_completed"


def test_rounds_role_model_context_and_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ctx = tmp_path / "ctx.json"
    ctx.write_text(json.dumps({"docs": ["the sky scatters blue light"]}))
    cfg = tmp_path / "over.yaml"
    cfg.write_text("pipeline:\n  debate:\n    rounds: 3\n")
    argv = ["run", "Why?", "--protocol", "answer", "--config", str(cfg), "--model", "fake:a"]
    argv += ["--role-model", "synthesizer=fake:judge", "--context", str(ctx), "--json"]
    assert main(argv) == 0
    result = DebateResult.model_validate_json(capsys.readouterr().out)
    assert len(result.rounds) == 3 and result.verdict is not None and result.verdict.model == "fake:judge"
    assert main(["run", "Why?", "--model", "fake:a", "--rounds", "1", "--json"]) == 0
    assert len(DebateResult.model_validate_json(capsys.readouterr().out).rounds) == 1


def test_protocols_lists_presets(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["protocols"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") >= 6 and "panel" in out and "seed 004" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", ""], "the topic is empty"),
        (["run", "x", "--protocol", "nope"], "unknown protocol 'nope'"),
        (["run", "x", "--model", "nope:model"], "unknown model provider 'nope'"),
        (["run", "x", "--model", "fake:a", "--role-model", "ghost=fake:b"], "unknown persona 'ghost'"),
        (["run", "x", "--model", "fake:a", "--role-model", "broken"], "KEY=SPEC"),
        (["run", "x", "--model", "fake:a", "--context", "/no/such.json"], "context file not found"),
        (["run", "x", "--bogus-flag"], "No such option"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.startswith("moot: error:") and err.count("\n") == 1
    assert "Traceback" not in err


def test_malformed_yaml_and_unknown_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("rounds: [1,\n")
    assert main(["run", "x", "--config", str(bad), "--model", "fake:a"]) == 2
    assert "malformed YAML" in capsys.readouterr().err
    typo = tmp_path / "typo.yaml"
    typo.write_text("extends: answer\nroundz: 2\n")
    assert main(["run", "x", "--config", str(typo), "--model", "fake:a"]) == 2
    assert "unknown key 'roundz'" in capsys.readouterr().err


def test_missing_api_key(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert main(["run", "x", "--model", "openai:gpt-4o-mini-nokey"]) == 2
    assert "OPENAI_API_KEY" in capsys.readouterr().err


@pytest.mark.integration
def test_unreachable_endpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # port 9 on loopback: nothing listens, the connection is refused at once
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    cfg = tmp_path / "no-retry.yaml"
    cfg.write_text("retry: {max_retries: 0}\n")
    argv = ["run", "x", "--model", "openai:unreachable-test", "--protocol", "panel", "--config", str(cfg)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "cannot reach the model endpoint" in err and err.count("\n") == 1


def test_subcommands_load_when_asked_for() -> None:
    """Every module's register(app) adds exactly the commands moot.cli.COMMANDS names, and a
    command loads only its own module: ``moot bench`` starts without the absa pipeline, the
    viewer or the server (moot.cli imported ~0.2 s faster)."""
    import importlib
    import subprocess
    import sys

    import typer
    import typer.main

    from moot.cli import COMMANDS

    every = typer.Typer()
    every.callback()(lambda: None)
    for module in sorted(set(COMMANDS.values())):
        importlib.import_module(f"moot.cli.{module}").register(every)
    assert set(typer.main.get_group(every).commands) == set(COMMANDS)
    probe = (
        "import sys, contextlib, io\n"
        "from moot.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['bench', '--help']) == 0\n"
        "print(sorted(m for m in ('moot.absa.pipeline', 'moot.view', 'moot.serve', 'moot.cli.absa') "
        "if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
