"""``--model-concurrency N`` on every subcommand that calls a model, honoured against a real server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from limit_servers import LimitServer
from moot import models
from moot.cli import main
from moot.models import base

COMMANDS = ["run", "bench", "absa", "absa-eval", "arbitrate"]


@pytest.fixture
def allow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MOOT_OPENAI_STRUCTURED_MODE", "MOOT_REQUEST_TIMEOUT"):
        monkeypatch.delenv(var, raising=False)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_model_command_takes_the_option(
    command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")  # rich would cut long option names in a narrow terminal
    assert main([command, "--help"]) == 0
    assert "--model-concurrency" in capsys.readouterr().out


@pytest.mark.parametrize("command", COMMANDS)
def test_a_bad_value_is_a_usage_error(command: str) -> None:
    assert main([command, "--model-concurrency", "0"]) == 2


@pytest.mark.usefixtures("allow")
def test_bench_honours_the_cap(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with LimitServer("ok", latency=0.05) as server:
        spec = f"openai:m?base_url={server.url}"
        code = main(
            ["bench", "--task", "arithmetic", "--methods", "single", "--n", "24", "--concurrency", "12"]
            + ["--model", spec, "--model-concurrency", "3", "--out", str(tmp_path / "o"), "--no-store"]
            + ["--no-plots"]
        )
        models._CACHE.pop(spec, None)
    assert code == 0
    assert server.served == 24 and server.peak == 3
    err = " ".join(capsys.readouterr().err.split())  # the console wraps at its width
    assert f"endpoint {server.url}: limit 3-3 (now 3), 24 sent, 0 answered 429/503, 0 timed out" in err


@pytest.mark.usefixtures("allow")
def test_run_input_honours_the_cap_and_the_next_command_does_not_keep_it(tmp_path: Path) -> None:
    topics = tmp_path / "topics.jsonl"
    topics.write_text("".join(json.dumps({"topic": f"Q{i}?"}) + "\n" for i in range(6)), encoding="utf-8")
    with LimitServer("ok", latency=0.05) as server:
        spec = f"openai:m?base_url={server.url}"
        args = ["run", "--input", str(topics), "--concurrency", "6", "--model", spec, "--no-store"]
        main([*args, "--output", str(tmp_path / "a.jsonl"), "--model-concurrency", "2"])
        capped = server.peak
        server.peak = 0
        main([*args, "--output", str(tmp_path / "b.jsonl")])
        models._CACHE.pop(spec, None)
    assert capped == 2
    assert server.peak > 2  # the cap lived only as long as its command


@pytest.mark.usefixtures("allow")
@pytest.mark.parametrize("command", ["run", "run --input", "absa", "absa --input"])
def test_the_endpoints_limit_and_429s_are_shown_and_recorded(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server allowing 2 requests/s (429 + Retry-After: 1 beyond): each command says the
    endpoint's limit range and 429s at the end, and its stored run keeps them (as a bench does).
    An absa sentence takes a dozen calls or more: 4 requests/s there (refused all the same), so
    the two sentences of ``absa --input`` take 9 s, not 18."""
    store = tmp_path / "runs.db"
    rate = 4 if command.startswith("absa") else 2
    with LimitServer("rate", rate=rate, latency=0.01) as server:
        spec = f"openai:m?base_url={server.url}"
        args = ["--model", spec, "--store", str(store)]
        if command == "run":
            args = ["run", "Is the sky blue?", *args]
        elif command == "absa":
            args = ["absa", "The soup was cold.", *args]
        else:
            lines = tmp_path / "in.jsonl"
            row = {"topic": "Is the sky blue?"} if command == "run --input" else {"sentence": "Cold soup."}
            lines.write_text("".join(json.dumps(row | {"id": str(i)}) + "\n" for i in range(2)))
            name = command.split()[0]
            args = [name, "--input", str(lines), "--output", str(tmp_path / "out.jsonl"), *args]
        main(args)  # the canned reply may be no valid answer (absa): the exit code is not the point
        models._CACHE.pop(spec, None)
    out = capsys.readouterr()
    shown = " ".join((out.out + out.err).split())
    assert server.throttled > 0
    assert f"endpoint {server.url}: limit " in shown
    kind = "run" if command.startswith("run") else "absa"
    from moot.runs import RunStore

    runs = RunStore(store).list(kind=kind)
    assert runs
    recorded = [s for r in runs for s in (r.summary or {}).get("endpoints", [])]
    assert recorded and all(s["endpoint"] == server.url for s in recorded)
    last = max(int(s["throttled"]) for s in recorded)
    assert last == server.throttled  # the count so far at the end of the (last) run
    assert f"{last} answered 429/503" in shown
    assert all(int(s["limit_low"]) <= int(s["limit_high"]) for s in recorded)
