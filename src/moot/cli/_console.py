"""Terminal output shared by the commands: consoles that print text as written, tables that fit.

Model names and model text are data. rich would turn ``:m:`` in ``openai:m:latest`` into
an emoji and colour numbers and URLs it finds in a reply, so every console here has emoji
codes and highlighting off (markup in model text is escaped where it is printed).

A table wider than the terminal loses whole columns, least important first, and then wraps
its cells; a cell is never cut to ``…``. A caption names the columns left out.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.measure import Measurement
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

__all__ = ["make_console", "print_table", "progress_bar"]


def make_console(*, stderr: bool = False, quiet: bool = False, width: int | None = None) -> Console:
    """A rich Console for the CLI: no emoji codes, no automatic highlighting."""
    return Console(stderr=stderr, quiet=quiet, width=width, emoji=False, highlight=False)


def progress_bar(console: Console, *extra: ProgressColumn) -> Progress:
    """The commands' progress bar: task name, bar, done/total, elapsed time, then ``extra`` columns."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        *extra,
        console=console,
        transient=False,
    )


def _natural_width(console: Console, table: Table) -> int:
    # The width with no cell wrapped, measured without the console's limit (Measurement.get clamps to it).
    options = console.options.update_width(1_000_000)
    return Measurement.get(console, options, table).maximum


def print_table(console: Console, table: Table, *, drop: Sequence[str] = ()) -> None:
    """Print ``table`` within the console's width.

    Args:
        console: where to print.
        table: the table; its columns are changed in place.
        drop: headers of columns that may be left out, least important first.
    """
    for column in table.columns:
        column.overflow = "fold"  # a long word breaks across lines instead of ending in "…"
    dropped: list[str] = []
    for header in drop:
        if _natural_width(console, table) <= console.width:
            break
        for index, column in enumerate(table.columns):
            if str(column.header) == header:
                del table.columns[index]
                dropped.append(header)
                break
    if _natural_width(console, table) > console.width:
        for column in table.columns:
            column.no_wrap = False  # wrap at spaces; a word wider than its column folds
    if dropped:
        note = f"not shown at {console.width} columns: {', '.join(dropped)}"
        table.caption = f"{table.caption} · {note}" if table.caption else note
    console.print(table)
