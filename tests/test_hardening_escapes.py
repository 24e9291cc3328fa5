"""Text from outside never drives the terminal: a server's error body full of escape sequences.

A real server on 127.0.0.1 answers every request with HTTP 400 whose message retitles the
terminal (OSC 0), clears it (CSI 2J), homes the cursor and hides what follows (CSI 8m), with
a carriage return and a bidi override besides. Each command's error path prints what it
prints; none of it may hold a control character.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine_helpers import write_gold
from fault_server import Fate, FaultServer
from moot import models
from moot.cli import main
from moot.cli._console import _SafeConsole, make_console
from moot.models import base

EVIL = "\x1b]0;pwned\x07\x1b[2J\x1b[H\x1b[8mhidden\rover\u202eevil\x9b31m"
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _refuse(n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
    return Fate("status", status=400, body=json.dumps({"error": {"message": f"bad request {EVIL}"}}))


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultServer]:
    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with FaultServer(_refuse) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.url)
        yield srv
    for spec in [s for s in models._CACHE if s.startswith("openai:")]:
        models._CACHE.pop(spec, None)


def _inputs(tmp: Path) -> dict[str, Path]:
    gold = write_gold(tmp / f"gold{EVIL[:6]}.jsonl")  # a file name with an escape in it, too
    finding = {"metric": "unemployment_rate", "citation": "[GCC-STAT]", "confidence": 0.9}
    reports = tmp / "reports.json"
    reports.write_text(
        json.dumps(
            {
                "reports": [
                    {"agent": "A", "findings": [finding | {"value": 0.10}]},
                    {"agent": "B", "findings": [finding | {"value": 0.12, "citation": "[World Bank]"}]},
                ]
            }
        )
    )
    topics = tmp / "topics.jsonl"
    topics.write_text(json.dumps({"topic": "Is x?"}) + "\n")
    return {"gold": gold, "reports": reports, "topics": topics}


def test_an_escape_sequence_error_body_reaches_no_command_output(
    server: FaultServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = _inputs(tmp_path)
    commands = [
        ["run", "Is x?", "--model", "openai:M"],
        [
            "run",
            "--input",
            str(files["topics"]),
            "--output",
            str(tmp_path / "o.jsonl"),
            "--model",
            "openai:M",
        ],
        ["absa", "The food was great.", "--model", "openai:M"],
        [
            "absa-eval",
            str(files["gold"]),
            "--model",
            "openai:M",
            "--out",
            str(tmp_path / "ae"),
            "--no-ablations",
        ],
        ["arbitrate", str(files["reports"]), "--model", "openai:M"],
        ["bench", "--n", "2", "--methods", "single", "--model", "openai:M", "--no-plots"]
        + ["--out", str(tmp_path / f"b{EVIL[:5]}"), "--max-errors", "2"],
    ]
    for args in commands:
        code = main(args)
        out, err = capsys.readouterr()
        assert code == 1, (args, code, err[-400:])
        assert "bad request" in out + err, args  # the error is shown...
        assert not CONTROL.search(out + err), (args, [m for m in CONTROL.findall(out + err)])  # ...defused
    for run_id in [r["id"] for r in _runs(capsys)]:
        for show in (["runs", "show", run_id], ["runs", "show", run_id, "--events"]):
            main(show)
            out, err = capsys.readouterr()
            assert not CONTROL.search(out + err), show


def _runs(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    assert main(["runs", "list", "--json"]) == 0
    runs: list[dict[str, Any]] = json.loads(capsys.readouterr().out)["runs"]
    assert len(runs) >= 5
    return runs


def test_a_usage_error_naming_a_file_is_one_clean_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / f"x{EVIL}.yaml"
    bad.write_text("personas: [")
    assert main(["protocols", "validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("moot: error:") and err.count("\n") == 1 and not CONTROL.search(err)


def test_the_console_drops_controls_from_text_it_was_not_told_about(
    capsys: pytest.CaptureFixture[str],
) -> None:
    make_console().print(f"report: {EVIL} [bold]kept[/]")
    out = capsys.readouterr().out
    assert "kept" in out and "hidden" in out and not CONTROL.search(out)
    # On a terminal rich's own styling stays; only the text's sequences go.
    buffer = io.StringIO()
    console = _SafeConsole(file=buffer, force_terminal=True, color_system="standard", emoji=False)
    console.print(f"{EVIL} [bold]kept[/]")
    assert (
        "\x1b[1mkept" in buffer.getvalue()
        and "\x1b]0;" not in buffer.getvalue()
        and "\x1b[2J" not in buffer.getvalue()
    )


def test_a_live_progress_display_drops_controls_from_its_text_too() -> None:
    # A live display (the progress bar) is rendered through the same public Console.render.
    from rich.markup import escape

    from moot.cli._console import progress_bar

    buffer = io.StringIO()
    console = _SafeConsole(file=buffer, force_terminal=True, color_system="standard", emoji=False, width=100)
    with progress_bar(console) as progress:
        task = progress.add_task(escape(f"items {EVIL}"), total=2)
        progress.advance(task)
        progress.refresh()
    out = buffer.getvalue()
    assert "items" in out and "hidden" in out
    assert "\x1b]0;" not in out and "\x1b[2J" not in out and "\u202e" not in out and "\x9b" not in out
