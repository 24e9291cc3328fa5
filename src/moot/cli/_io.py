"""Reading the user's files and writing outputs, with one clear error and nothing half-written.

Every subcommand reads its inputs through :func:`read_text`/:func:`read_json`
and checks argument strings with :func:`check_text`, so a missing file, a
directory, or bytes that are not UTF-8 become one ``UsageError`` line instead
of a traceback. Outputs are checked before any model call
(:func:`check_output_file`, :func:`check_output_dir`), and streamed outputs are
written to a hidden sibling that only takes the final name when the command
succeeds (:func:`staged_output`), so a run that fails leaves no partial file.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TextIO

import typer

from ..errors import UsageError
from ..jsontext import jsonl_lines
from ..paths import read_text, set_outside_paths_allowed

__all__ = [
    "MAX_CONCURRENCY",
    "AllowOutsideOption",
    "allow_outside",
    "check_output_dir",
    "check_output_file",
    "check_text",
    "read_json",
    "read_jsonl",
    "read_text",
    "staged_output",
]

MAX_CONCURRENCY = 1000
"""Upper bound of every ``--concurrency`` option: more tasks in flight than any server takes."""

AllowOutsideOption = Annotated[
    bool,
    typer.Option(
        "--allow-outside-paths",
        help="Let prompt, extends: and override paths in a config leave its folder (or MOOT_ALLOW_PATHS=1).",
    ),
]
"""``--allow-outside-paths``, on every command that reads a config; see :func:`allow_outside`."""


def allow_outside(allow: bool) -> None:
    """For the rest of the running command, let config paths leave their folder if ``allow``.

    :func:`moot.cli.main` runs each command in a copy of the context, so the
    permission ends with the command (a second command in the same process starts without it).
    """
    if allow:
        set_outside_paths_allowed(True)


def check_text(value: str, what: str) -> str:
    """``value`` if it is valid text; arguments with bytes that are not UTF-8 fail here.

    Python decodes such argument bytes to lone surrogates, which fail much later,
    when the text is encoded for a model or a file.

    Raises:
        UsageError: ``value`` holds bytes that are not UTF-8.
    """
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UsageError(f"{what} is not valid UTF-8 text (bad byte at character {exc.start})") from None
    return value


def read_json(path: Path, what: str) -> Any:
    """The JSON data of a user's file.

    Raises:
        UsageError: missing, unreadable, not UTF-8, empty, or not valid JSON.
    """
    text = read_text(path, what)
    if not text.strip():
        raise UsageError(f"{what} {path} is empty")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{what} {path} is not valid JSON: {exc}") from None


def read_jsonl(path: Path, what: str) -> Iterator[tuple[int, Any]]:
    """Each non-blank line of a user's JSON Lines file, as ``(line number, JSON data)``.

    Lines are split by :func:`moot.jsontext.jsonl_lines` (at a newline only).

    Raises:
        UsageError: missing, unreadable or not UTF-8, or a line that is not valid JSON
            (its number is named).
    """
    for number, line in jsonl_lines(read_text(path, what)):
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path} line {number}: not valid JSON: {exc.msg}") from None
        yield number, data


def _check_parent(path: Path, what: str) -> None:
    parent = path.parent
    for ancestor in (parent, *parent.parents):
        if ancestor.exists() and not ancestor.is_dir():
            raise UsageError(f"{what} {path}: {ancestor} is a file, not a directory")


def check_output_file(path: Path, what: str) -> None:
    """Fail now, before any work, if ``path`` cannot become the output file.

    Raises:
        UsageError: ``path`` is a directory, its folder does not exist, or a part
            of its folder is a file.
    """
    if path.is_dir():
        raise UsageError(f"{what} {path} is a directory; give a file name")
    _check_parent(path, what)
    if not path.parent.is_dir():
        raise UsageError(f"{what} {path}: the folder {path.parent} does not exist")


def check_output_dir(path: Path, what: str) -> None:
    """Fail now if ``path`` cannot be (or become) an output directory; missing folders may be created.

    Raises:
        UsageError: ``path`` or one of its parents is an existing file.
    """
    if path.exists() and not path.is_dir():
        raise UsageError(f"{what} {path} is a file, not a directory")
    _check_parent(path, what)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def staged_output(path: Path, what: str, *, keep_partial: bool = False) -> Iterator[TextIO]:
    """Write ``path`` through a hidden temporary sibling, renamed to ``path`` on success.

    If the block raises, the temporary file is removed, unless ``keep_partial``
    is set and something was written (a batch keeps the results it finished).
    An existing ``path`` is only replaced on success.

    Raises:
        UsageError: ``path`` cannot be an output file (see :func:`check_output_file`).
    """
    check_output_file(path, what)
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    except OSError as exc:
        raise UsageError(f"cannot write {what} {path}: {exc.strerror or exc}") from None
    tmp = Path(tmp_name)
    os.chmod(fd, 0o666 & ~_umask())  # mkstemp makes the file private; give it the usual mode
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            yield fh
    except BaseException:
        if keep_partial and tmp.stat().st_size > 0:
            tmp.replace(path)
        else:
            tmp.unlink(missing_ok=True)
        raise
    tmp.replace(path)
