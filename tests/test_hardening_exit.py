"""Exit codes tell the truth, and the stored status says the same (docs/failures.md).

0 complete · 1 degraded (every unit failed: stored ``failed``) · 2 usage error, nothing run,
a malformed file named with its field · 3 a bug.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine_helpers import write_gold
from fault_server import free_port
from moot import models
from moot.cli import main
from moot.models import base
from moot.runs import RunStore


@pytest.fixture
def unreachable(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An endpoint nothing listens on (connection refused at once)."""
    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{free_port()}/v1")
    yield "openai:M"
    for spec in [s for s in models._CACHE if s.startswith("openai:")]:
        models._CACHE.pop(spec, None)


def _last_run(store: Path) -> tuple[str, str]:
    with RunStore(store, must_exist=True) as runs:
        record = runs.list(limit=1)[0]
    return record.kind, record.status


def _reports(tmp: Path) -> Path:
    finding = {"metric": "unemployment_rate", "citation": "[GCC-STAT]", "confidence": 0.9}
    path = tmp / "reports.json"
    path.write_text(
        json.dumps(
            {
                "reports": [
                    {"agent": "A", "findings": [finding | {"value": 0.10}]},
                    {"agent": "B", "findings": [finding | {"value": 0.12, "citation": "[World Bank]"}]},
                ]
            }
        )
    )
    return path


def test_arbitrate_against_an_unreachable_endpoint_exits_1_and_is_stored_failed(
    unreachable: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "runs.db"
    monkeypatch.setenv("MOOT_STORE", str(store))
    assert main(["arbitrate", str(_reports(tmp_path)), "--model", unreachable]) == 1
    assert _last_run(store) == ("arbitrate", "failed")


def test_absa_eval_with_every_sentence_failed_exits_1_and_is_stored_failed(
    unreachable: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "runs.db"
    monkeypatch.setenv("MOOT_STORE", str(store))
    gold = write_gold(tmp_path / "gold.jsonl")
    assert main(["absa-eval", str(gold), "--model", unreachable, "--no-ablations"]) == 1
    err = capsys.readouterr().err
    assert "1 of 1 sentence runs failed" in err and "ModelConnectionError" in err
    assert _last_run(store) == ("absa-eval", "failed")


RUN_JSON_VARIANTS = [
    ("{}", "field 'task' is missing"),
    ('{"task": "arithmetic", "model": "test", "n": 2}', "field 'methods' is missing"),
    ('{"task": "arithmetic", "methods": ["single"], "model": "test", "n": "x"}', "field 'n'"),
    ('{"task": "arithmetic", "methods": "single", "model": "test"}', "field 'methods'"),
    ("[1]", "must hold a JSON object"),
    ('{"task": "arithmetic",', "is not valid JSON"),
]


@pytest.mark.parametrize(("text", "named"), RUN_JSON_VARIANTS)
@pytest.mark.parametrize("mode", ["--report-only", "--resume"])
def test_a_malformed_run_json_is_a_usage_error_naming_file_and_field(
    text: str, named: str, mode: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "b"
    out.mkdir()
    (out / "run.json").write_text(text)
    args = ["bench", "--no-plots", *(["--report-only", "--out", str(out)] if mode == "--report-only" else [])]
    if mode == "--resume":
        args += ["--resume", str(out)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("moot: error:") and str(out / "run.json") in err and named in err, err
    assert "internal error" not in err


def test_a_resume_keeps_the_recorded_concurrency_and_refuses_options_it_cannot_apply(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "b"
    base_args = ["bench", "--model", "test", "--methods", "single", "--no-plots", "--out", str(out)]
    assert main([*base_args, "--n", "2", "--concurrency", "9"]) == 0
    assert main(["bench", "--resume", str(out), "--n", "3", "--no-plots"]) == 0
    assert json.loads((out / "run.json").read_text())["concurrency"] == 9
    assert main(["bench", "--resume", str(out), "--n", "4", "--no-plots", "--concurrency", "2"]) == 0
    assert json.loads((out / "run.json").read_text())["concurrency"] == 2
    capsys.readouterr()
    assert main(["bench", "--resume", str(out), "--no-plots", "--exclude-conflict"]) == 2
    assert "--exclude-conflict" in capsys.readouterr().err


def test_a_bench_stopped_by_max_errors_says_so_with_the_count(
    unreachable: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["bench", "--model", unreachable, "--methods", "single", "--n", "6", "--no-plots"]
    assert main([*args, "--max-errors", "2", "--concurrency", "1", "--out", str(tmp_path / "b")]) == 1
    err = capsys.readouterr().err
    assert "stopped: 2 units failed in a row (--max-errors 2)" in err and "ModelConnectionError" in err


def _units(out: Path) -> dict[tuple[str, str], tuple[object, ...]]:
    units = {}
    for line in (out / "results.jsonl").read_text().splitlines():
        r = json.loads(line)
        units[(r["item_id"], r["method"])] = (r["final"], r["correct"], r["calls"], r["prompt_tokens"])
    return units


def test_a_full_disk_mid_bench_exits_1_naming_the_file_and_resume_completes_identically(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real full disk: a 48 kB tmpfs (needs root); the resume runs after it is grown to 4 MB."""
    import os
    import subprocess

    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48k", "tmpfs", str(disk)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        args = ["bench", "--model", "test", "--methods", "single,vote:3", "--n", "60", "--no-plots"]
        out = disk / "b"
        assert main([*args, "--out", str(out)]) == 1
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err.startswith(f"moot: error: cannot write {out / 'results.jsonl'}: No space left on device;")
        assert f"units are written to {out}: free space and continue with --resume {out}" in err
        written = int(err.split("; ")[1].split()[0])
        assert 0 < written < 120
        subprocess.run(["mount", "-o", "remount,size=4m", str(disk)], check=True)
        assert main(["bench", "--resume", str(out), "--no-plots"]) == 0
        assert main([*args, "--out", str(tmp_path / "clean")]) == 0
        assert _units(out) == _units(tmp_path / "clean")  # the same 120 units as a run never interrupted
        assert len(_units(out)) == 120
    finally:
        subprocess.run(["umount", str(disk)], check=False)
