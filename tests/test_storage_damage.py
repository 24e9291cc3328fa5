"""Damaged data is never an internal error; an edited record is never replayed silently (issue 37, 4-5).

A run row whose ``config`` or ``result`` is not JSON is listed as damaged while the rest of the store
works (``moot runs list``, ``--json``, every viewer page and ``/api/runs``); showing it is one error
naming the damage (exit 2; HTTP 422 in the viewer, never 500). A damaged response-cache file is
refused before any work (exit 2 naming it and what to do); an unreadable entry is a miss, said once.
A stored verdict edited in the SQLite file is refused by ``--from ... --replay`` (exit 2, naming the
run and what changed) unless ``--trust-edited``; a record written before digests replays with a warning.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from moot.cli import main
from moot.models import ModelResponse
from moot.models.cache import ResponseCache

pytestmark = pytest.mark.integration

TOPIC = "Is tea better than coffee?"


def _debate(store: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    """A debate on the built-in test model, recorded in ``store``; its exit code and run id."""
    code = main(["run", TOPIC, "--model", "test", "--store", str(store), "--json", *extra])
    capsys.readouterr()
    with sqlite3.connect(store) as conn:
        run_id = conn.execute("SELECT id FROM runs ORDER BY started_at DESC, rowid DESC LIMIT 1").fetchone()[
            0
        ]
    return code, str(run_id)


def _sql(path: Path, statement: str, *params: object) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(statement, params)


def _errors(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("moot: error:")]


@pytest.fixture
def damaged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, str, str, str]:
    """A store with a good run, one whose config is not JSON and one whose result is not JSON."""
    store = tmp_path / "runs.db"
    good = _debate(store, capsys)[1]
    bad_config = _debate(store, capsys)[1]
    bad_result = _debate(store, capsys)[1]
    _sql(store, "UPDATE runs SET config = '{\"protocol\": ' WHERE id = ?", bad_config)
    # The search index's trigger reads a new result as JSON: written as another tool would, without it.
    with sqlite3.connect(store) as conn:
        trigger = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'search_prompts'").fetchone()[0]
        conn.execute("DROP TRIGGER search_prompts")
        conn.execute("UPDATE runs SET result = 'garbage{' WHERE id = ?", (bad_result,))
        conn.execute(trigger)
    return store, good, bad_config, bad_result


def test_a_non_json_row_is_listed_as_damaged_and_showing_it_is_one_error(
    damaged: tuple[Path, str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    store, good, bad_config, bad_result = damaged
    assert main(["runs", "list", "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert good[:8] in out and "damaged" in out
    assert f"run {bad_config[:8]} is damaged: its config is not JSON" in out
    assert f"run {bad_result[:8]} is damaged" not in out  # lists read no result
    assert main(["runs", "list", "--json", "--store", str(store)]) == 0
    rows = {r["id"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(rows) == {good, bad_config, bad_result}
    assert rows[good]["damage"] is None and "config is not JSON" in rows[bad_config]["damage"]
    for bad, what in ((bad_config, "config"), (bad_result, "result")):
        for command in (["runs", "show", bad], ["runs", "show", bad, "--json"], ["runs", "export", bad]):
            assert main([*command, "--store", str(store)]) == 2
            captured = capsys.readouterr()
            errors = _errors(captured.err)
            assert len(errors) == 1 and f"run {bad[:8]} is damaged: its {what} is not JSON" in errors[0]
            assert captured.out == ""
    assert main(["runs", "show", good, "--store", str(store)]) == 0  # the rest works
    assert main(["run", "--from", bad_result, "--replay", "--store", str(store)]) == 2
    assert "is damaged" in _errors(capsys.readouterr().err)[0]


def test_a_damaged_event_is_named_and_the_run_is_not_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "runs.db"
    run_id = _debate(store, capsys)[1]
    _sql(store, "UPDATE events SET data = 'not json' WHERE run_id = ? AND seq = 2", run_id)
    assert main(["runs", "show", run_id, "--store", str(store)]) == 2
    errors = _errors(capsys.readouterr().err)
    assert len(errors) == 1 and f"run {run_id[:8]} is damaged: event 2: its data is not JSON" in errors[0]


def test_no_viewer_page_answers_500_for_a_damaged_row(damaged: tuple[Path, str, str, str]) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from moot.view import create_app

    store, good, bad_config, bad_result = damaged
    client = TestClient(create_app(store), base_url="http://127.0.0.1", raise_server_exceptions=False)
    listed = client.get("/api/runs")
    assert listed.status_code == 200
    rows = {r["id"]: r for r in listed.json()["runs"]}
    assert set(rows) == {good, bad_config, bad_result} and "config is not JSON" in rows[bad_config]["damage"]
    page = client.get("/")
    assert page.status_code == 200 and "damaged" in page.text and good in page.text
    assert client.get(f"/runs/{good}").status_code == 200
    assert client.get(f"/api/runs/{good}/events").status_code == 200
    for bad, what in ((bad_config, "config"), (bad_result, "result")):
        for path in (
            f"/runs/{bad}",
            f"/api/runs/{bad}",
            f"/api/runs/{bad}/events",
            f"/runs/{bad}?fragment=1",
        ):
            got = client.get(path)
            assert got.status_code == 422, (path, got.status_code)
            assert f"its {what} is not JSON" in got.text
    _sql(store, "UPDATE events SET data = 'not json' WHERE run_id = ? AND seq = 1", good)
    for path in (f"/runs/{good}", f"/api/runs/{good}/events"):
        got = client.get(path)
        assert got.status_code == 422 and "event 1: its data is not JSON" in got.text
    assert client.get("/").status_code == 200


def _cache_file(path: Path, entries: int = 300) -> None:
    cache = ResponseCache(path)
    for i in range(entries):
        cache.put(f"k{i}", "m", ModelResponse(text="y" * 2000))
    cache.close()


def test_a_truncated_cache_file_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache.db"
    _cache_file(cache)
    with cache.open("r+b") as f:
        f.truncate(os.path.getsize(cache) // 2)
    before = cache.read_bytes()
    store = tmp_path / "runs.db"
    code = main(
        ["run", TOPIC, "--model", "test", "--cache-file", str(cache), "--store", str(store), "--json"]
    )
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    errors = _errors(captured.err)
    assert len(errors) == 1
    assert f"{cache} is a damaged response cache" in errors[0] and "delete it" in errors[0]
    assert cache.read_bytes() == before  # left as it was
    assert not store.exists() or main(["runs", "list", "--json", "--store", str(store)]) == 0
    assert json.loads(capsys.readouterr().out or "[]") == []  # nothing ran, nothing recorded


def test_a_cache_entry_with_garbage_is_a_miss_said_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache.db"
    store = tmp_path / "runs.db"
    args = ["run", TOPIC, "--model", "test", "--cache-file", str(cache), "--store", str(store), "--json"]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    _sql(cache, "UPDATE replies SET response = x'00ff7b6e6f74'")  # every entry: garbage
    assert main(args) == 0
    captured = capsys.readouterr()
    again = json.loads(captured.out)
    assert again["final_answer"] == first["final_answer"]
    assert again["usage"]["cached"] == 0 and again["usage"]["calls"] == first["usage"]["calls"]  # all misses
    said = [line for line in captured.err.splitlines() if "unreadable entry" in line]
    assert len(said) == 1 and str(cache) in said[0] and "counts as a miss" in said[0]
    assert main(args) == 0  # the misses stored good replies again: now all hits
    assert json.loads(capsys.readouterr().out)["usage"]["cached"] == first["usage"]["calls"]


def test_an_edited_verdict_is_refused_by_replay_unless_trusted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "runs.db"
    run_id = _debate(store, capsys)[1]
    base = ["--store", str(store), "--json"]
    assert main(["run", "--from", run_id, "--replay", *base]) == 0  # intact: replays, no warning
    captured = capsys.readouterr()
    assert json.loads(captured.out)["final_answer"] == "x" and "warning" not in captured.err
    _sql(
        store,
        "UPDATE runs SET result = json_set(result, '$.verdict.content.final_answer', 'EDITED') WHERE id = ?",
        run_id,
    )
    for argv in (["run", "--from", run_id, "--replay", *base], ["run", "--from", run_id[:6], *base]):
        assert main(argv) == 2
        captured = capsys.readouterr()
        errors = _errors(captured.err)
        assert len(errors) == 1 and captured.out == ""
        assert f"run {run_id[:8]} was edited after it was recorded (its result" in errors[0]
        assert "--trust-edited" in errors[0]
    assert main(["run", "--from", run_id, "--replay", "--trust-edited", *base]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["final_answer"] == "EDITED"
    assert "replayed an edited record" in captured.err
    with sqlite3.connect(store) as conn:
        config = conn.execute("SELECT config FROM runs ORDER BY rowid DESC LIMIT 1").fetchone()[0]
    assert json.loads(config)["edited_record"] == {"run": run_id, "edited": ["result"]}
    assert main(["runs", "show", run_id, "--store", str(store)]) == 0  # shown, saying it was edited
    assert "edited after it was recorded: result" in capsys.readouterr().out


def test_a_record_without_digests_replays_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "runs.db"
    run_id = _debate(store, capsys)[1]
    _sql(store, "UPDATE runs SET config_sha256 = NULL, result_sha256 = NULL WHERE id = ?", run_id)
    assert main(["run", "--from", run_id, "--replay", "--store", str(store), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["final_answer"] == "x"
    warned = [line for line in captured.err.splitlines() if "cannot be checked" in line]
    assert len(warned) == 1 and run_id[:8] in warned[0]


def test_the_python_door_refuses_an_edited_record_unless_trusted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from moot import Debate
    from moot.errors import UsageError
    from moot.models.testing import ReplayModel
    from moot.runs import RunStore

    store_path = tmp_path / "runs.db"
    run_id = _debate(store_path, capsys)[1]
    _sql(store_path, "UPDATE runs SET config = json_set(config, '$.topic', 'edited') WHERE id = ?", run_id)
    with RunStore(store_path) as store:
        with pytest.raises(UsageError, match=f"run {run_id[:8]} was edited .*its config"):
            ReplayModel.from_run(store, run_id)
        replay = ReplayModel.from_run(store, run_id, trust_edited=True)
    assert Debate("answer", model=replay).run_sync(TOPIC).final_answer == "x"
    assert "using it as it is now" in capsys.readouterr().err


def test_an_edited_absa_batch_sentence_is_refused_unless_trusted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "runs.db"
    given = tmp_path / "in.jsonl"
    given.write_text(
        '{"id": "s1", "sentence": "The battery is great."}\n{"id": "s2", "sentence": "The screen is dim."}\n'
    )
    args = ["--store", str(store)]
    assert (
        main(
            ["absa", "--input", str(given), "--output", str(tmp_path / "o1.jsonl"), "--model", "test", *args]
        )
        == 0
    )
    with sqlite3.connect(store) as conn:
        run_id = conn.execute("SELECT id FROM runs").fetchone()[0]
    _sql(store, "UPDATE items SET data = json_set(data, '$.result.sentence', 'edited') WHERE item = 's2'")
    capsys.readouterr()
    refused = tmp_path / "o2.jsonl"
    assert main(["absa", "--from", run_id, "--replay", "--output", str(refused), *args]) == 2
    errors = _errors(capsys.readouterr().err)
    assert len(errors) == 1 and f"run {run_id[:8]} was edited" in errors[0] and "item 's2'" in errors[0]
    assert not refused.exists()
    trusted = tmp_path / "o3.jsonl"
    assert (
        main(["absa", "--from", run_id, "--replay", "--trust-edited", "--output", str(trusted), *args]) == 0
    )
    assert "replayed an edited record" in capsys.readouterr().err
    with sqlite3.connect(store) as conn:
        config = json.loads(conn.execute("SELECT config FROM runs ORDER BY rowid DESC LIMIT 1").fetchone()[0])
    assert config["edited_record"] == {"run": run_id, "edited": ["item 's2'"]}
