"""Terminal output: text printed as written (no emoji codes, no markup), tables within the width."""

from __future__ import annotations

import io
import json
from collections.abc import Callable

import pytest
from rich.console import Console
from rich.table import Table

from moot.cli import main
from moot.cli._console import make_console, print_table
from moot.models import ModelRequest
from moot.models.testing import FunctionModel


def _console(width: int) -> tuple[io.StringIO, Console]:
    buffer = io.StringIO()
    console = make_console(width=width)
    console.file = buffer
    return buffer, console


def _wide_table() -> Table:
    table = Table("method", "accuracy [95% CI]", "parse fail", "lenient", "calls", "tokens", "s/item")
    for column in table.columns:
        column.no_wrap = True
    for name in ("single", "society:3:2", "baseline: always positive (majority class)"):
        table.add_row(name, "56.0% [42.3%, 68.8%]", "17 (34.0%)", "58.0%", "6.00", "1,483", "12.34")
    return table


def test_a_wide_table_drops_its_least_important_columns_and_says_so() -> None:
    buffer, console = _console(80)
    print_table(console, _wide_table(), drop=("s/item", "lenient", "tokens"))
    out = buffer.getvalue()
    assert "…" not in out and max(len(line) for line in out.splitlines()) <= 80
    assert "56.0% [42.3%, 68.8%]" in out and "17 (34.0%)" in out
    assert "not shown at 80 columns: s/item" in out and "s/item" not in out.splitlines()[1]


def test_a_table_with_nothing_to_drop_wraps_instead_of_cutting() -> None:
    buffer, console = _console(40)
    print_table(console, _wide_table())
    out = buffer.getvalue()
    assert "…" not in out and max(len(line) for line in out.splitlines()) <= 40


def test_model_names_and_text_are_not_emoji_or_markup() -> None:
    buffer, console = _console(80)
    console.print("model openai:m:latest :smile:")
    assert "openai:m:latest :smile:" in buffer.getvalue()


def test_live_view_prints_model_text_as_written(
    fake_provider: Callable[..., None], capsys: pytest.CaptureFixture[str]
) -> None:
    text = "use openai:m:latest :smile: and [bold]this[/bold]"

    def reply(req: ModelRequest) -> dict[str, object]:
        if req.metadata["phase"] == "judge":
            return {"final_answer": text, "citations": []}
        return {"answer": text, "confidence": 0.5}

    fake_provider("fake", lambda rest: FunctionModel(reply, name="fake:m:"))
    assert main(["run", "Q?", "--model", "fake:m:"]) == 0
    out = capsys.readouterr().out
    assert out.count("openai:m:latest :smile:") >= 3 and "[bold]this[/bold]" in out


@pytest.mark.parametrize("width", [60, 80])
def test_bench_table_fits_the_terminal(
    width: int, tmp_path: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    argv = ["bench", "--task", "arithmetic", "--methods", "single,vote:3,society:3:2", "--matched"]
    argv += ["--n", "4", "--model", "test", "--out", f"{tmp_path}/b", "--no-plots"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    table = [line for line in out.splitlines() if line.strip()]
    assert "…" not in out and max(len(line) for line in table) <= width
    assert "accuracy" in out and "society:3:2" in out


def test_absa_shows_each_stage_as_it_ends(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["absa", "The pasta was great but the service was slow.", "--model", "test", "--json"]) == 0
    captured = capsys.readouterr()
    json.loads(captured.out)  # stdout is still only the result
    lines = captured.err.splitlines()
    for stage in ("ate: ok", "atsa: ", "validator: ok", "debate: ok", "moderator: ok"):
        assert any(line.startswith(stage) for line in lines), stage


@pytest.mark.parametrize("command", ["bench", "absa"])
def test_help_keeps_square_brackets_that_rich_markup_would_eat(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, "--help"]) == 0
    assert "moot[ray]" in capsys.readouterr().out


@pytest.mark.parametrize("width", [60, 100])
def test_runs_tables_piped_honour_columns(
    width: int, tmp_path: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Piped, ``moot runs list/show`` are 200 columns wide (whole ids and titles) unless COLUMNS says."""
    monkeypatch.setenv("MOOT_STORE", f"{tmp_path}/runs.db")
    monkeypatch.delenv("COLUMNS", raising=False)
    assert main(["run", "A question whose title is long enough to need some room?", "--model", "test"]) == 0
    assert main(["runs", "list", "--json"]) == 0
    (run,) = json.loads(capsys.readouterr().out.splitlines()[-1])["runs"]
    for argv in (["runs", "list"], ["runs", "show", run["id"]]):
        assert main(argv) == 0
        assert max(len(line) for line in capsys.readouterr().out.splitlines()) > width, argv
        monkeypatch.setenv("COLUMNS", str(width))
        assert main(argv) == 0
        assert max(len(line) for line in capsys.readouterr().out.splitlines()) <= width, argv
        monkeypatch.delenv("COLUMNS")
