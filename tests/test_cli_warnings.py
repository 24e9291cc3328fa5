"""Every degradation is said once: the ``moot`` logger's warnings as ``moot: warning:`` lines.

A real local server refuses ``json_schema`` with HTTP 400 (as llama.cpp's servers do);
the client steps down to ``json_object``. The CLI says so once, naming the endpoint and
the mode it fell back to; ``--quiet`` silences it; a library user sees nothing.
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
from moot.cli._warnings import lift_quiet


def _no_json_schema(n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        return Fate(
            "status", status=400, body='{"error": {"message": "response_format json_schema unsupported"}}'
        )
    return Fate(content=schema_reply(body))


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultServer]:
    monkeypatch.setattr(models.base, "ALLOW_MODEL_REQUESTS", True)
    with FaultServer(_no_json_schema) as srv:
        yield srv


def _spec(server: FaultServer, name: str) -> str:
    # Priced, so the only warnings are the ones under test (an unlisted model says it has no price).
    return f"openai:{name}?base_url={server.url}&price=0/0"


@pytest.mark.parametrize("quiet", [[], ["--quiet"]], ids=["says", "quiet"])
def test_a_refused_structured_mode_is_one_warning_line(
    server: FaultServer, quiet: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _spec(server, f"refuses-schema{len(quiet)}")
    try:
        # Both speakers of round 1 are refused at once; only the downgrade is said, once.
        code = main(["run", "Is tea better than coffee?", "--model", spec, "--json", "--no-store", *quiet])
    finally:
        models._CACHE.pop(spec, None)
    captured = capsys.readouterr()
    assert code == 0
    assert json.loads(captured.out)["fallback"] is None
    warnings = [line for line in captured.err.splitlines() if line.startswith("moot: warning:")]
    if quiet:
        assert warnings == []
        return
    assert warnings == [
        f"moot: warning: openai:refuses-schema0 at {server.url}: the server rejected structured mode "
        "json_schema (HTTP 400); using json_object from now on"
    ]
    assert captured.err.count("moot: warning:") == 1


def test_a_library_user_keeps_the_silent_default(
    server: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _spec(server, "refuses-schema-lib")
    try:
        result = Debate("answer", model=spec).run_sync("Is tea better than coffee?")
    finally:
        models._CACHE.pop(spec, None)
    assert result.fallback is None
    assert capsys.readouterr().err == ""


def test_a_fallback_in_a_batch_is_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topics = tmp_path / "topics.jsonl"
    topics.write_text('{"id": "a", "topic": "Q?", "initial_answer": "kept"}\n', encoding="utf-8")
    code = main(["run", "--input", str(topics), "--output", str(tmp_path / "out.jsonl"), "--model", "test",
                 "--no-store", "--config", str(_tight_config(tmp_path))])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1
    lines = [line for line in err.splitlines() if line.startswith("moot: warning:")]
    assert len(lines) == 1 and lines[0].startswith('moot: warning: topic "a" fell back: budget: ')


def _tight_config(tmp_path: Path) -> Path:
    # A budget of one call: the second speaker's call exceeds it and the debate falls back.
    cfg = tmp_path / "tight.yaml"
    cfg.write_text("extends: answer\nbudget: {max_calls: 1}\n", encoding="utf-8")
    return cfg


def test_quiet_is_lifted_from_anywhere_before_a_double_dash() -> None:
    assert lift_quiet(["run", "x", "--quiet"]) == (["run", "x"], True)
    assert lift_quiet(["--quiet", "runs", "list"]) == (["runs", "list"], True)
    assert lift_quiet(["run", "--", "--quiet"]) == (["run", "--", "--quiet"], False)


def test_run_from_restores_the_recorded_endpoint_never_the_key(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue 20: a run against $OPENAI_BASE_URL re-run with --from went to OpenAI's API ("no API key").
    monkeypatch.setattr(models.base, "ALLOW_MODEL_REQUESTS", True)
    with FaultServer(lambda n, body, headers: Fate(content=schema_reply(body))) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-from-env")
        assert main(["run", "Q?", "--model", "openai:from-test", "--json", "--quiet"]) == 0
        first = json.loads(capsys.readouterr().out)
        monkeypatch.delenv("OPENAI_BASE_URL")
        monkeypatch.delenv("OPENAI_API_KEY")
        models._CACHE.clear()
        before = srv.requests
        assert main(["run", "--from", _last_run_id(), "--json"]) == 0, capsys.readouterr().err
        assert srv.requests == before + 5  # the same server, the whole answer debate
    again = json.loads(capsys.readouterr().out)
    assert again["final_answer"] == first["final_answer"]
    record = _last_run()
    assert "sk-secret" not in json.dumps(record.config)
    assert record.config["role_models"]["synthesizer"] == f"openai:from-test?base_url={srv.url}"


def _last_run() -> Any:
    from moot.runs import open_store

    store = open_store()
    assert store is not None
    with store:
        (record,) = store.list(kind="run", limit=1)
    return record


def _last_run_id() -> str:
    return str(_last_run().id)
