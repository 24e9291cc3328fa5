"""The run store checks what it opens: empty files become stores, others' files are left untouched.

Real files: a 0-byte file, another program's SQLite database, random bytes, and a moot store
with a page overwritten, each opened by a writer (``moot run``), a reader (``moot runs``) and
the viewer.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest

from moot.cli import main
from moot.runs import RunStore


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _foreign(path: Path) -> Path:
    with sqlite3.connect(path) as db:  # another application's database, in rollback-journal mode
        db.execute("CREATE TABLE contacts (name TEXT, phone TEXT)")
        db.execute("INSERT INTO contacts VALUES ('ada', '555')")
    return path


def _damaged(path: Path) -> Path:
    with RunStore(path) as store:
        for i in range(60):
            run_id = store.create_run("run", title=f"t{i}", model="m")
            for seq in range(1, 11):
                store.append_event(run_id, seq, "turn", json.dumps({"text": "word " * 150}))
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    with path.open("r+b") as fh:  # a page in the middle overwritten, as a bad disk or a stray write would
        fh.seek(4096 * 20)
        fh.write(b"\xff" * 300)
    return path


def test_an_empty_file_becomes_a_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "empty.db"
    path.touch()
    assert main(["runs", "list", "--store", str(path)]) == 0
    assert main(["run", "Is x?", "--model", "test", "--store", str(path)]) == 0
    assert main(["runs", "list", "--json", "--store", str(path)]) == 0
    assert len(json.loads(capsys.readouterr().out.splitlines()[-1])["runs"]) == 1


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (_foreign, "is not a moot run store (an SQLite database with other tables: contacts)"),
        (
            lambda p: (p.write_bytes(b"not sqlite at all " * 100), p)[1],
            "is not a moot run store (not an SQLite",
        ),
        (_damaged, "is a damaged run store"),
    ],
    ids=["foreign", "not-sqlite", "damaged"],
)
def test_a_file_that_is_not_a_sound_moot_store_is_refused_and_left_as_it_was(
    make: object, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = make(tmp_path / "x.db")  # type: ignore[operator]
    before = _digest(path)
    for args in (
        ["run", "Is x?", "--model", "test", "--store", str(path)],
        ["runs", "list", "--store", str(path)],
        ["runs", "show", "abcd", "--store", str(path)],
    ):
        assert main(args) == 2, args
        err = capsys.readouterr().err
        assert err.startswith("moot: error:") and str(path) in err and said in err, err
        assert "internal error" not in err
    assert _digest(path) == before  # not one byte changed: no WAL switch, no table added
    assert not Path(f"{path}-wal").exists() or Path(f"{path}-wal").stat().st_size == 0
    _viewer_error_page(path, said)
    assert _digest(path) == before


def _viewer_error_page(path: Path, said: str) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from moot.view import create_app

    client = TestClient(create_app(path), base_url="http://127.0.0.1:7575")
    page = client.get("/")
    assert page.status_code == 503 and said in page.text and "cannot be shown" in page.text
    api = client.get("/api/runs")
    assert api.status_code == 503 and said in api.json()["detail"]


def test_moot_view_token_needs_16_characters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["view", "--token", "a"]) == 2
    err = capsys.readouterr().err
    assert "at least 16 characters (got 1)" in err and "--token " in err
