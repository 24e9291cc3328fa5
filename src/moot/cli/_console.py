"""Terminal output shared by the commands: consoles that print text as written, tables that fit.

Model names and model text are data. rich would turn ``:m:`` in ``openai:m:latest`` into
an emoji and colour numbers and URLs it finds in a reply, so every console here has emoji
codes and highlighting off (markup in model text is escaped where it is printed).

A table wider than the terminal loses whole columns, least important first, and then wraps
its cells; a cell is never cut to ``…``. A caption names the columns left out.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console, ConsoleOptions, RenderableType
from rich.measure import Measurement
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.segment import Segment
from rich.table import Table

from ._safe import has_controls, markup, strip_controls

__all__ = ["ProgressLines", "endpoint_line", "make_console", "print_endpoints", "print_table", "progress_bar"]


class _SafeConsole(Console):
    """A Console that drops control and escape sequences from every piece of text it renders.

    Text from outside should already pass :func:`moot.cli._safe.clean` where it is put in;
    this catches what was not (a file name in an f-string). It filters what
    :meth:`rich.console.Console.render` yields, the public method every ``print``, ``log``,
    table cell and live display is rendered through (nested renderables come back through it
    too). rich's own styling and control segments (cursor moves of the progress bar) are kept:
    they are not text, and rich adds its escape codes only when it writes the segments out.
    """

    def render(self, renderable: RenderableType, options: ConsoleOptions | None = None) -> Iterable[Segment]:
        """The segments rich renders ``renderable`` into, their text without control sequences."""
        for seg in super().render(renderable, options):
            if not seg.control and has_controls(seg.text):
                yield Segment(strip_controls(seg.text), seg.style, seg.control)
            else:
                yield seg


def make_console(*, stderr: bool = False, quiet: bool = False, width: int | None = None) -> Console:
    """A rich Console for the CLI: no emoji codes, no automatic highlighting, no control sequences in text."""
    return _SafeConsole(stderr=stderr, quiet=quiet, width=width, emoji=False, highlight=False)


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


class ProgressLines:
    """Progress for a log or a pipe, where a live bar shows nothing until the end.

    ``advance()`` prints one plain line (``LABEL: 12/240 UNIT (5%), 31 s``) when ``every``
    seconds have passed since the last line, when another ``step`` of the units is done,
    and at the last unit.
    """

    def __init__(
        self, console: Console, label: str, unit: str, *, every: float = 10.0, step: float = 0.05
    ) -> None:
        self.console, self.label, self.unit, self.every, self.step = console, label, unit, every, step
        self.total = self.done = 0
        self.started = self.last = time.monotonic()
        self._next = 0

    def start(self, total: int, done: int = 0) -> None:
        """Begin counting ``total`` units, ``done`` of them finished already (a resume)."""
        self.total, self.done = total, done
        self.started = self.last = time.monotonic()
        self._next = self._threshold(done)

    def _threshold(self, done: int) -> int:
        # The next count at which another `step` of the total is reached.
        part = max(1, math.ceil(self.total * self.step))
        return (done // part + 1) * part

    def advance(self, n: int = 1) -> None:
        """Count ``n`` finished units; print a line if one is due."""
        self.done += n
        now = time.monotonic()
        if self.done >= self.total or self.done >= self._next or now - self.last >= self.every:
            self.last = now
            self._next = self._threshold(self.done)
            pct = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
            self.console.print(
                f"{self.label}: {self.done}/{self.total} {self.unit}{pct}, {now - self.started:.0f} s",
                markup=False,
                highlight=False,
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


def endpoint_line(stats: Sequence[dict[str, Any]]) -> str:
    """``in flight 120/limit 300, 429s 4`` summed over a model's endpoints (for progress lines)."""
    in_flight = sum(int(s["in_flight"]) for s in stats)
    limit = sum(int(s["limit"]) for s in stats)
    throttled = sum(int(s["throttled"]) for s in stats)
    return f"in flight {in_flight}/limit {limit}, 429s {throttled}"


def print_endpoints(console: Console, stats: Sequence[dict[str, Any]]) -> None:
    """Each endpoint's limit range, requests sent, 429/503 answers and time-outs, one line each."""
    for s in stats:
        line = (
            f"endpoint {markup(str(s['endpoint']))}: limit {s['limit_low']}-{s['limit_high']} "
            f"(now {s['limit']}), {s['sent']} sent, {s['throttled']} answered 429/503, "
            f"{s['timeouts']} timed out"
        )
        if s.get("open"):
            line += f"; [yellow]down:[/] {markup(str(s['open']))}"
        console.print(line)
