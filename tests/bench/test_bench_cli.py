from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from bench_helpers import oracle

from moot.cli import main
from moot.cli.bench import default_out
from moot.models import FunctionModel


def _provider(register: Callable[..., None], name: str) -> FunctionModel:
    model = oracle(lambda i, a, r: "right" if (i + a) % 2 else "wrong")
    register(name, lambda rest: model)
    return model


def test_bench_command_runs_reports_and_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_provider: Callable[..., None]
) -> None:
    model = _provider(fake_provider, "benchcli")
    out = tmp_path / "out"
    argv = ["bench", "--task", "arithmetic", "--methods", "single,society:3:2", "--matched"]
    argv += ["--model", "benchcli:a", "--n", "6", "--out", str(out), "--no-plots"]
    assert main(argv) == 0
    assert (out / "report.md").is_file()
    lines = (out / "results.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 18
    assert "vote:6" in capsys.readouterr().out
    calls = len(model.requests)
    assert calls == 6 * (1 + 6 + 6)

    assert main(argv) == 2  # results exist: refuse to overwrite
    assert "--resume" in capsys.readouterr().err
    assert main([*argv, "--resume", str(out)]) == 0
    assert len(model.requests) == calls  # nothing left to run

    assert main(["bench", "--out", str(out), "--report-only", "--no-plots"]) == 0
    assert len(model.requests) == calls
    meta = json.loads((out / "run.json").read_text(encoding="utf-8"))
    assert meta["expanded_methods"] == ["single", "society:3:2", "vote:6"]


def test_bench_flags_and_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_provider: Callable[..., None]
) -> None:
    _provider(fake_provider, "benchcli2")
    out = tmp_path / "out"
    argv = ["bench", "--methods", "society:3:3", "--early-stop", "--model", "benchcli2:a", "--n", "2"]
    assert main([*argv, "--out", str(out), "--no-plots"]) == 0
    assert json.loads((out / "run.json").read_text())["methods"] == ["society:3:3:early_stop"]
    assert main(["bench", "--methods", "vote:0", "--out", str(tmp_path / "x"), "--no-plots"]) == 2
    assert "positive integer" in capsys.readouterr().err
    assert main(["bench", "--task", "absa:x.jsonl", "--out", str(tmp_path / "y"), "--no-plots"]) == 2
    assert "absa data file not found" in capsys.readouterr().err
    assert main(["bench", "--early-stop", "--debate-if-disagree", "--no-plots"]) == 2


def test_default_out_has_no_n_so_a_resume_can_grow() -> None:
    assert default_out("gsm8k:data/test.jsonl", "openai:gpt-4o-mini", 3) == Path(
        "bench-out/gsm8k-test-openai_gpt-4o-mini-s3"
    )
