"""Issue 37, item 7: JSON on stdout drives no terminal; exit 2 writes no run; a full disk warns once.

* ``--json`` (and every other JSON the CLI prints) writes the C1 controls (``U+009B``, an 8-bit
  CSI) and the bidi overrides (``U+202E``) of model text as ``\\uXXXX`` escapes: the same data
  once parsed, no raw control on the terminal.
* ``moot arbitrate`` with ``user:pass@`` in the endpoint and ``moot run`` against an endpoint
  where nothing listens (no ``--initial-answer``) exit 2 and leave no run in the store.
* A store on a full disk (a real 200 kB tmpfs; needs root) says so once, not twice.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fault_server import Fate, FaultServer, free_port, schema_reply
from moot import models
from moot.cli import main
from moot.models import base
from moot.runs import RunStore

RAW = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
EVIL = "yes \x9b31m red \u202eevil\u202c \u2066iso\u2069"


def _evil(n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
    """A valid reply whose free-text fields (not the enums, not the ids) end in ``EVIL``."""
    data = json.loads(schema_reply(body))
    fmt = body.get("response_format") or {}
    props = ((fmt.get("json_schema") or {}).get("schema") or fmt.get("schema") or {}).get("properties", {})
    for key, value in data.items():
        free = not any(k in (props.get(key) or {}) for k in ("enum", "const", "$ref", "pattern"))
        if isinstance(value, str) and free and not key.endswith(("id", "_ids")):
            data[key] = f"{value} {EVIL}"
    return Fate("ok", content=json.dumps(data))


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultServer]:
    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with FaultServer(_evil) as srv:
        yield srv
    for spec in [s for s in models._CACHE if s.startswith("openai:")]:
        models._CACHE.pop(spec, None)


def _reports(path: Path) -> Path:
    finding = {"metric": "unemployment_rate", "citation": "[GCC-STAT]", "confidence": 0.9}
    agents = [
        {"agent": "A", "findings": [finding | {"value": 0.10}]},
        {"agent": "B", "findings": [finding | {"value": 0.12, "citation": "[World Bank]"}]},
    ]
    path.write_text(json.dumps({"reports": agents}))
    return path


def _strings(data: Any) -> Iterator[str]:
    if isinstance(data, str):
        yield data
    elif isinstance(data, dict):
        for v in data.values():
            yield from _strings(v)
    elif isinstance(data, list):
        for v in data:
            yield from _strings(v)


def test_json_on_stdout_escapes_c1_controls_and_bidi_overrides(
    server: FaultServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = f"openai:M@{server.url}"
    reports = _reports(tmp_path / "reports.json")
    commands = [
        ["run", "Is x?", "--model", spec, "--json"],
        ["run", f"Is x {EVIL}?", "--model", spec, "--json", "--dry-run"],
        ["absa", "The food was great.", "--model", spec, "--json"],
        ["arbitrate", str(reports), "--model", spec, "--json"],
    ]
    for args in commands:
        assert main(args) == 0, args
        out = capsys.readouterr().out
        assert not RAW.search(out), (args, RAW.findall(out))
        assert "\\u009b" in out and "\\u202e" in out, args
        # The same data once parsed: the model's text as it wrote it.
        assert any(EVIL in s for s in _strings(json.loads(out))), args
    assert main(["runs", "list", "--json"]) == 0
    listed = capsys.readouterr().out
    assert not RAW.search(listed)
    for run in json.loads(listed)["runs"]:
        for args in (
            ["runs", "show", "--json", run["id"]],
            ["runs", "export", run["id"]],
            ["runs", "export", "--format", "jsonl", run["id"]],
        ):
            assert main(args) == 0, args
            out = capsys.readouterr().out
            assert not RAW.search(out), (args, RAW.findall(out))
            for line in out.splitlines() if "jsonl" in args else [out]:
                json.loads(line)


def _no_runs(store: Path) -> None:
    if store.exists():
        with RunStore(store) as opened:
            assert opened.list() == []


def test_exit_2_leaves_no_run_in_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("MOOT_REQUEST_TIMEOUT", "2")
    store = tmp_path / "runs.db"
    monkeypatch.setenv("MOOT_STORE", str(store))
    dead = f"http://127.0.0.1:{free_port()}/v1"
    try:
        with_password = f"openai:M?base_url={dead.replace('//', '//user:pw@')}"
        assert main(["arbitrate", str(_reports(tmp_path / "r.json")), "--model", with_password]) == 2
        assert "user name and password" in capsys.readouterr().err
        _no_runs(store)
        assert main(["run", "Is x?", "--model", f"openai:M@{dead}", "--out", "ev.jsonl"]) == 2
        err = capsys.readouterr().err
        assert "cannot reach the model endpoint" in err and err.count("moot: error:") == 1
        _no_runs(store)
        assert not Path("ev.jsonl").exists()
        # With --initial-answer the run falls back to it: exit 1, and it is recorded.
        assert main(["run", "Is x?", "--model", f"openai:M@{dead}", "--initial-answer", "kept"]) == 1
        with RunStore(store) as opened:
            assert [r.status for r in opened.list()] == ["fell_back"]
    finally:
        for spec in [s for s in models._CACHE if s.startswith("openai:")]:
            models._CACHE.pop(spec, None)


def test_a_full_disk_under_the_store_warns_once(tmp_path: Path) -> None:
    """A real full disk: a 200 kB tmpfs for the store (needs root), a bench that outgrows it."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(disk)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        args = ["bench", "--model", "test", "--methods", "single,vote:3", "--n", "300", "--no-plots"]
        args += ["--out", str(tmp_path / "b")]
        env = {**os.environ, "MOOT_STORE": str(disk / "runs.db")}
        code = "import sys; from moot.cli import main; sys.exit(main(sys.argv[1:]))"
        done = subprocess.run(
            [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=300
        )
    finally:
        subprocess.run(["umount", str(disk)], check=False)
    assert done.returncode == 0, done.stderr[-2000:]  # the results are written; the store is not
    warnings = [line for line in done.stderr.splitlines() if "cannot write the run store" in line]
    assert len(warnings) == 1, warnings
    assert "disk is full" in warnings[0] and "no longer recorded" in warnings[0]
