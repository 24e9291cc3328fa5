"""``--cache`` through the command line: a second identical command sends no request."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fault_server import FaultServer, varied, without_timings
from moot import models
from moot.cli import main

pytestmark = pytest.mark.integration


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Any:
    with FaultServer(varied) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        yield srv
    # openai:m resolved against this server must not outlive it (models are kept per process).
    models._CACHE.pop("openai:m", None)


def test_moot_run_twice_with_cache(
    server: FaultServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "run",
        "Is tea better than coffee?",
        "--model",
        "openai:m",
        "--json",
        "--cache",
        "--protocol",
        "adversarial",
    ]
    main(argv)
    first = json.loads(capsys.readouterr().out)
    served = server.requests
    main(argv)
    second = json.loads(capsys.readouterr().out)
    assert served > 0 and server.requests == served
    assert second["final_answer"] == first["final_answer"]
    assert second["usage"]["calls"] == 0 and second["usage"]["cached"] == first["usage"]["calls"]
    assert second["decision"] == first["decision"]


def test_moot_bench_twice_with_cache_serves_nothing_and_gives_the_same_units(
    server: FaultServer, tmp_path: Path
) -> None:
    def bench(out: Path) -> list[dict[str, Any]]:
        argv = [
            "bench", "--task", "arithmetic", "--methods", "single,vote:3,society:3:2", "--n", "20",
            "--model", "openai:m", "--temperature", "0.7", "--out", str(out), "--no-plots", "--cache",
        ]  # fmt: skip
        main(argv)
        rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
        keep = ("item_id", "method", "answer", "correct", "parse_failed", "rounds", "messages")
        cost = ("usage", "latency_s", "queue_s", "retries")  # a cached reply costs nothing, by design
        for r in rows:
            r["rounds"] = [
                [{k: v for k, v in a.items() if k not in cost} for a in rnd] for rnd in r["rounds"]
            ]
        return sorted(({k: r.get(k) for k in keep} for r in rows), key=lambda r: (r["item_id"], r["method"]))

    first = bench(tmp_path / "a")
    served = server.requests
    second = bench(tmp_path / "b")
    assert served > 0 and server.requests == served
    assert len(first) == 60 and first == second
    # Served from the cache is neither a call nor a saved call, and the report says which it was.
    rows = [json.loads(line) for line in (tmp_path / "b" / "results.jsonl").read_text().splitlines()]
    # No unit counts a model call; each counts the replies it took from the cache (a shared round-0
    # sample in each unit that uses it).
    assert sum(r["calls"] for r in rows) == 0 and all(r["cached"] > 0 for r in rows)
    report = (tmp_path / "b" / "report.md").read_text()
    assert "calls saved" not in report and f"{served} replies served from the response cache" not in report
    assert "replies served from the response cache (0 calls served by the model)" in report


def test_moot_arbitrate_and_absa_twice_with_cache(
    server: FaultServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reports = Path(__file__).parents[1] / "examples" / "inputs" / "reports.json"
    for argv in (
        ["arbitrate", str(reports), "--model", "openai:m", "--json", "--cache"],
        ["absa", "The pasta was great but the waiter was rude.", "--model", "openai:m", "--json", "--cache"],
    ):
        main(argv)
        first = capsys.readouterr().out
        served = server.requests
        main(argv)
        second = capsys.readouterr().out
        assert served > 0 and server.requests == served, argv[0]
        assert without_timings(json.loads(first)) == without_timings(json.loads(second)), argv[0]


def test_two_processes_share_one_cache_file(server: FaultServer, tmp_path: Path) -> None:
    cache = tmp_path / "shared.db"
    argv = [
        sys.executable, "-m", "moot", "bench", "--task", "arithmetic", "--methods", "single,vote:3",
        "--n", "15", "--model", "openai:m", "--temperature", "0.7", "--no-plots", "--cache-file", str(cache),
    ]  # fmt: skip
    procs = [
        subprocess.Popen([*argv, "--out", str(tmp_path / f"out{i}")], stderr=subprocess.PIPE, text=True)
        for i in range(2)
    ]
    errors = [p.communicate(timeout=600)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    with sqlite3.connect(cache) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("SELECT count(*) FROM replies").fetchone()[0] > 0
    # Whatever either process stored is whole: a third run finds every reply there.
    served = server.requests
    third = subprocess.run(
        [*argv, "--out", str(tmp_path / "out3")], capture_output=True, text=True, timeout=600
    )
    assert third.returncode == 0, third.stderr
    assert server.requests == served


def test_cache_stats_prune_clear(
    server: FaultServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "c.db"
    main(["run", "Why?", "--model", "openai:m", "--json", "--cache-file", str(cache)])
    capsys.readouterr()
    assert main(["cache", "stats", "--cache-file", str(cache), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["entries"] == server.requests and stats["bytes"] > 0 and stats["models"] == {"openai:m": 5}
    assert main(["cache", "prune", "--older-than", "1d", "--cache-file", str(cache)]) == 0
    assert "removed 0 entries" in capsys.readouterr().out
    assert main(["cache", "clear", "--yes", "--cache-file", str(cache)]) == 0
    assert "removed 5 entries" in capsys.readouterr().out
    assert main(["cache", "stats", "--cache-file", str(tmp_path / "none.db")]) == 0
    assert "no cache yet" in capsys.readouterr().out and not (tmp_path / "none.db").exists()
    assert main(["cache", "clear", "--yes", "--cache-file", str(tmp_path / "none.db")]) == 2
    assert main(["run", "Why?", "--model", "openai:m", "--cache", "--cache-expiry", "soon"]) == 2
    assert "not an age" in capsys.readouterr().err


def test_the_viewer_shows_cached_replies_apart_from_calls(
    server: FaultServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fastapi.testclient import TestClient

    from moot.runs import RunStore
    from moot.view import create_app

    store = tmp_path / "runs.db"
    argv = ["run", "Why?", "--model", "openai:m", "--json", "--cache", "--store", str(store)]
    main(argv)
    main(argv)
    capsys.readouterr()
    with RunStore(store) as opened:
        second = opened.list()[0].id  # newest first
    page = TestClient(create_app(store), base_url="http://127.0.0.1").get(f"/runs/{second}").text
    assert "0 calls" in page and "5 replies from the cache or a replay (no call)" in page
