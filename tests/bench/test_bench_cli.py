from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
    # Round 0 is shared (single, the society's round 0 and vote:6 are agents 0-5's first samples):
    # six first samples per item, then the society's round 1.
    assert calls == 6 * (6 + 3)

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


def test_default_out_names_the_methods_and_n() -> None:
    # Another bench (other methods, another n) never lands in a folder that already holds results.
    assert default_out(
        "gsm8k:data/test.jsonl", "openai:gpt-4o-mini", 3, ["single", "vote:3"], 50, False
    ) == Path("bench-out/gsm8k-test-openai_gpt-4o-mini-single+vote_3-n50-s3")
    assert (
        default_out("arithmetic", "local", 0, ["single"], None, True).name
        == "arithmetic-local-single-matched-nall-s0"
    )
    many = ["single", "vote:3", "society:3:2", "answer", "adversarial", "panel"]
    long = default_out("arithmetic", "local", 0, many, 10, False).name
    assert long.startswith("arithmetic-local-single+vote_3+society_3_2") and long.endswith("-n10-s0")
    assert long != default_out("arithmetic", "local", 0, [*many, "patch"], 10, False).name


def test_another_bench_gets_its_own_default_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_provider: Callable[..., None]
) -> None:
    _provider(fake_provider, "benchout")
    monkeypatch.chdir(tmp_path)
    base = ["bench", "--task", "arithmetic", "--model", "benchout:a", "--no-plots", "--no-store"]
    assert main([*base, "--methods", "single", "--n", "2"]) == 0
    assert main([*base, "--methods", "single,vote:3", "--n", "2"]) == 0  # was "already holds results"
    assert main([*base, "--methods", "single", "--n", "3"]) == 0
    assert len(list((tmp_path / "bench-out").iterdir())) == 3


def test_timeout_ends_the_invocation_incomplete_with_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_provider: Callable[..., None]
) -> None:
    import time

    fake_provider("benchslow", lambda rest: oracle(lambda i, a, r: "right", delay=0.05))
    out = tmp_path / "out"
    argv = ["bench", "--methods", "single", "--model", "benchslow:a", "--n", "60", "--concurrency", "1"]
    started = time.perf_counter()
    assert main([*argv, "--out", str(out), "--no-plots", "--timeout", "0.5"]) == 1
    assert time.perf_counter() - started < 5
    err = capsys.readouterr().err
    assert "stopped after --timeout 0.5 s" in err and "--resume" in err
    assert "stopped at its `--timeout`" in (out / "report.md").read_text(encoding="utf-8")


_SIGTERM_SCRIPT = """
import sys
from moot import models
from moot.cli import main
sys.path.insert(0, {helpers!r})
from bench_helpers import oracle
model = oracle(lambda i, a, r: "right", delay=0.05)
models.register_provider("slowterm", lambda rest: model)
sys.exit(main(["bench", "--methods", "single", "--model", "slowterm:a", "--n", "400", "--concurrency", "1",
               "--out", {out!r}, "--no-plots", "--no-store"] + sys.argv[1:]))
"""


def test_sigterm_ends_a_bench_like_ctrl_c(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "out"
    script = tmp_path / "run.py"
    script.write_text(
        _SIGTERM_SCRIPT.format(helpers=str(Path(__file__).parent), out=str(out)), encoding="utf-8"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, str(script)], stderr=subprocess.PIPE, text=True, env=env)
    results = out / "results.jsonl"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (not results.is_file() or results.stat().st_size < 200):
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "interrupted: finished items are saved" in err
    lines = results.read_text(encoding="utf-8").splitlines()
    assert 0 < len(lines) < 400 and all(json.loads(line)["item_id"] for line in lines)
    assert not (out / ".lock").exists()


def test_missing_matplotlib_says_no_plots_works(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    from moot.bench.report import ensure_plotting
    from moot.errors import MissingDependencyError

    real_import = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.split(".")[0] == "matplotlib":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(MissingDependencyError) as info:
        ensure_plotting()
    assert "moot[bench]" in str(info.value) and "--no-plots" in str(info.value)


def test_a_bench_in_a_pipe_prints_progress_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_provider: Callable[..., None]
) -> None:
    # Piped to a file, a live bar shows nothing for minutes: a plain line every 5% of units instead.
    _provider(fake_provider, "benchpipe")
    argv = ["bench", "--task", "arithmetic", "--methods", "single", "--n", "40", "--model", "benchpipe:a"]
    assert main([*argv, "--out", str(tmp_path / "o"), "--no-plots", "--no-store"]) == 0
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("bench: ")]
    assert lines[0].startswith("bench: 2/40 units (5%), ") and lines[-1].startswith(
        "bench: 40/40 units (100%), "
    )
    assert len(lines) == 20


def test_blank_replies_are_counted_and_a_method_with_nothing_but_blanks_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_provider: Callable[..., None]
) -> None:
    from moot.runs import RunStore

    # Agent 0 answers blank on items 0 and 1 only: counted, scored wrong, the run is complete (exit 0).
    fake_provider("benchsome", lambda rest: oracle(lambda i, a, r: "blank" if a == 0 and i < 2 else "right"))
    argv = ["bench", "--methods", "single", "--n", "4", "--no-plots"]
    assert main([*argv, "--model", "benchsome:a", "--out", str(tmp_path / "some")]) == 0
    err = capsys.readouterr().err
    assert "blank: single: 2 of 4 replies were blank (no text), scored as parse failures" in err
    report = (tmp_path / "some" / "report.md").read_text(encoding="utf-8")
    assert "2 of 4 replies were blank (no text), scored as parse failures" in report

    # Every reply blank: nothing was measured; exit 1, said, and the stored run failed with the reason.
    fake_provider("benchblank", lambda rest: oracle(lambda i, a, r: "blank"))
    store = tmp_path / "runs.db"
    out = tmp_path / "blank"
    assert main([*argv, "--model", "benchblank:a", "--out", str(out), "--store", str(store)]) == 1
    err = capsys.readouterr().err
    assert "no text:" in err and "every reply of single (4 replies) was blank: nothing was measured" in err
    with RunStore(store, must_exist=True) as runs:
        (run,) = runs.list()
        assert run.status == "failed" and "was blank" in (run.error or "")
        assert run.summary["blank_replies"] == {"single": 4}
    lines = (out / "results.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["rounds"][0][0]["text"] for line in lines] == [" \n"] * 4  # raw text kept


def test_a_vote_whose_samples_are_all_the_same_text_is_said_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_provider: Any
) -> None:
    """``vote:3`` at a deterministic default temperature: three copies of one answer on every item.

    Said once on stderr and in report.md, with the way out (``--temperature``); samples that differ
    (the seed differs per agent) are not flagged.
    """
    fake_provider("greedy", lambda rest: FunctionModel(lambda request: "The answer is (7)."))
    fake_provider("sampled", lambda rest: FunctionModel(lambda request: f"I think ({request.seed})."))
    base = ["bench", "--task", "arithmetic", "--methods", "single,vote:3", "--n", "3"]
    base += ["--no-plots", "--no-store"]
    assert main([*base, "--model", "greedy:a", "--out", str(tmp_path / "g")]) == 0
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if line.startswith("moot: warning:")]
    assert len(warnings) == 1 and "same text for vote:3 (3 of 3 items)" in warnings[0]
    assert "default temperature" in warnings[0] and "--temperature 0.7" in warnings[0]
    assert "- same samples: " in (tmp_path / "g" / "report.md").read_text(encoding="utf-8")
    assert main([*base, "--model", "greedy:a", "--temperature", "0", "--out", str(tmp_path / "z")]) == 0
    assert "at temperature 0 this backend" in capsys.readouterr().err
    assert main([*base, "--model", "sampled:a", "--temperature", "0.7", "--out", str(tmp_path / "s")]) == 0
    assert "same text" not in capsys.readouterr().err
    assert "same samples" not in (tmp_path / "s" / "report.md").read_text(encoding="utf-8")


def test_an_edited_result_line_is_refused_unless_trusted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_provider: Callable[..., None]
) -> None:
    """Each results.jsonl line carries the sha256 of its record: a line edited after it was
    recorded (a wrong answer turned right) is refused by --resume, --report-only and --replay,
    one error and exit 2 before any work; --trust-edited uses it; a line without a digest (older
    runs) is read as before."""
    from moot.bench.records import ItemRecord
    from moot.bench.runner import load_records

    _provider(fake_provider, "sealed")
    out = tmp_path / "out"
    argv = ["bench", "--task", "arithmetic", "--methods", "single", "--model", "sealed:a"]
    argv += ["--n", "4", "--out", str(out), "--no-plots", "--store", str(tmp_path / "runs.db")]
    assert main(argv) == 0
    results = out / "results.jsonl"
    lines = results.read_text(encoding="utf-8").splitlines()
    records = [ItemRecord.model_validate_json(line) for line in lines]
    assert all(r.sha256 and not r.edited for r in records)
    wrong = next(i for i, r in enumerate(records) if not r.correct)
    data = json.loads(lines[wrong])
    data["correct"], data["final"] = True, data["gold"]
    lines[wrong] = json.dumps(data)
    results.write_text("\n".join(lines) + "\n", encoding="utf-8")
    capsys.readouterr()
    store = ["--store", str(tmp_path / "runs.db"), "--no-plots"]
    for given in (
        ["bench", "--resume", str(out), *store],
        ["bench", "--out", str(out), "--report-only", *store],
        ["bench", "--replay", str(out), "--out", str(tmp_path / "r"), *store],
    ):
        assert main(given) == 2, given
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"line {wrong + 1}" in err[0] and "--trust-edited" in err[0], err
    assert not (tmp_path / "r").exists()
    assert main(["bench", "--out", str(out), "--report-only", "--no-plots", "--trust-edited"]) == 0
    # An older run's lines carry no digest: read as they are.
    results.write_text("".join(json.dumps(json.loads(x) | {"sha256": None}) + "\n" for x in lines))
    assert len(load_records(results)) == 4
