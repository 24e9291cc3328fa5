"""Two processes creating the same new run store (and response cache) at the same moment both succeed.

``PRAGMA journal_mode = WAL`` does not wait for SQLite's busy timeout: before the open retried it,
36 of 40 synchronised opens failed with "database is locked" (issue 37, item 3).
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

_OPENER = """
import sys, time
from pathlib import Path
from moot.models.cache import ResponseCache
from moot.runs.store import RunStore

store, cache, ready, go = (Path(a) for a in sys.argv[1:5])
ready.touch()
while not go.exists():
    time.sleep(0.001)
with RunStore(store, background=True) as opened:
    opened.create_run("run", title="race")
ResponseCache(cache).close()
print("ok")
"""

PAIRS = 20


def test_twenty_pairs_of_processes_creating_one_new_store_each_all_succeed(tmp_path: Path) -> None:
    go = tmp_path / "go"
    procs = []
    for i in range(PAIRS):
        for side in "ab":
            args = [tmp_path / f"runs{i}.db", tmp_path / f"cache{i}.db", tmp_path / f"ready{i}{side}", go]
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", _OPENER, *map(str, args)],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("ready*"))) < 2 * PAIRS:  # every process imported moot and waits
        assert time.monotonic() < deadline, "the openers did not start"
        time.sleep(0.02)
    go.touch()  # the barrier: all 40 open at once, two per new file
    results = [p.communicate(timeout=120) for p in procs]
    failed = [
        err.strip().splitlines()[-1:] for (out, err), p in zip(results, procs, strict=True) if p.returncode
    ]
    assert failed == [], failed
    assert sum(out.strip() == "ok" for out, _ in results) == 2 * PAIRS
    for i in range(PAIRS):
        for name in (f"runs{i}.db", f"cache{i}.db"):
            with sqlite3.connect(tmp_path / name) as conn:
                assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
                assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        with sqlite3.connect(tmp_path / f"runs{i}.db") as conn:
            assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 2  # both recorded
