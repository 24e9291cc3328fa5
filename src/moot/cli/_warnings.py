"""The CLI says every warning of the ``moot`` logger, once, as one ``moot: warning:`` line on stderr.

The library logs its degradations (a structured-output mode a server refused, a turn
that failed after its retries, a batch item that fell back, a config key with no
effect) to the ``moot`` logger, which has only a NullHandler: library users decide
what to show. The command line shows them: :func:`say_warnings` attaches a handler
for the duration of one command. Each line is cleaned of terminal escapes (the text
may quote a model's reply or a server's error body) and joined into one line, and a
line already said in this command is not said again. ``--quiet`` silences them.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator

from ._safe import clean

__all__ = ["QUIET_FLAGS", "lift_quiet", "say_warnings"]

QUIET_FLAGS = ("--quiet",)
"""The flag that silences the warning lines (accepted before or after the subcommand)."""


class _WarningLines(logging.Handler):
    """Prints each distinct warning record as one escaped line on the current ``sys.stderr``."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.said: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad log call must not end the command
            self.handleError(record)
            return
        line = " ".join(clean(text).split())
        if line in self.said:
            return
        self.said.add(line)
        print(f"moot: warning: {line}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def say_warnings(quiet: bool) -> Iterator[None]:
    """While the block runs, the ``moot`` logger's warnings go to stderr (none with ``quiet``)."""
    if quiet:
        yield
        return
    logger = logging.getLogger("moot")
    handler = _WarningLines()
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


def lift_quiet(args: list[str]) -> tuple[list[str], bool]:
    """``args`` without ``--quiet`` (anywhere before a ``--``), and whether one was given."""
    end = args.index("--") if "--" in args else len(args)
    kept = [a for a in args[:end] if a not in QUIET_FLAGS]
    return kept + args[end:], len(kept) < end
