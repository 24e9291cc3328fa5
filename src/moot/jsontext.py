"""Reading the JSON object in a model's reply: leniently where it is safe, precisely when it fails.

Lenient: code fences and chatter around the object are ignored, and literal
newlines or tabs inside strings (which strict JSON forbids and small models emit)
are accepted. Nothing is guessed: a value the model did not write is never filled in.

Precise: when the reply holds an object that does not parse, the error says how,
``truncated`` (it stops before the object closes) or ``invalid JSON at character N``
with what is there, rather than "no JSON object", so a repair request and an audit
both see the real problem.

Partial: a reply cut at the token cap (``finish_reason == "length"``) can still carry
every required field; :func:`parse_partial` reads what was written, with the string
that was being written when the cap hit kept as far as it got.

JSON Lines: :func:`jsonl_lines` is the one place user files of JSON Lines are split.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pydantic_core

from .errors import UsageError

__all__ = [
    "JSONTextError",
    "check_unique_ids",
    "escape_controls",
    "extract_json",
    "jsonl_lines",
    "jsonl_rows",
    "parse_partial",
]

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


class JSONTextError(ValueError):
    """The reply's JSON could not be read; the message says why and where."""


def extract_json(text: str) -> Any:
    """Parse the JSON object in ``text``, tolerating code fences, chatter and raw control characters.

    Raises:
        JSONTextError: no JSON object in the reply, a truncated one, or invalid JSON
            (the message gives the character position in ``text``).
    """
    candidates = [text.strip()]
    candidates += [m.strip() for m in _FENCE.findall(text)]
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start : end + 1])
    for cand in candidates:
        try:
            return json.loads(cand, strict=False)  # strict=False: raw newlines/tabs inside strings
        except ValueError:
            continue
    if start < 0:
        raise JSONTextError("no JSON object in the reply")
    raise JSONTextError(_describe(text, start))


def _describe(text: str, start: int) -> str:
    """Why the object starting at ``text[start]`` does not parse, with the position in ``text``."""
    tail = text[start:].rstrip()
    try:
        json.loads(tail, strict=False)
    except json.JSONDecodeError as exc:
        if exc.pos >= len(tail) or _unclosed(tail):
            return f"truncated JSON: the object opened at character {start} is never closed"
        pos = start + exc.pos
        near = text[max(pos - 15, 0) : pos + 15]
        return f"invalid JSON at character {pos}: {exc.msg} (near {near!r})"
    return "the reply holds more than one JSON value"  # parses alone: chatter broke the whole


def _unclosed(tail: str) -> bool:
    """Whether the braces and brackets of ``tail`` (outside strings) never all close."""
    depth, in_string, escaped = 0, False, False
    for ch in tail:
        if in_string:
            escaped = ch == "\\" and not escaped
            if ch == '"' and not escaped:
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return False
    return True


def escape_controls(text: str) -> str:
    """``text`` with raw control characters (newline, tab...) inside JSON strings written as JSON escapes."""
    out: list[str] = []
    in_string, escaped = False, False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            elif ch < " ":
                ch = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(ch, f"\\u{ord(ch):04x}")
        elif ch == '"':
            in_string = True
        out.append(ch)
    return "".join(out)


def parse_partial(text: str) -> list[dict[str, Any]]:
    """Readings of a JSON object cut short, most complete first (empty: nothing readable).

    The first keeps the string that was being written when the reply stopped, as far
    as it got; the second drops it. The caller validates each against its schema.
    """
    start = text.find("{")
    if start < 0:
        return []
    body = escape_controls(text[start:])
    readings: list[dict[str, Any]] = []
    for mode in ("trailing-strings", True):
        try:
            value = pydantic_core.from_json(body, allow_partial=mode)
        except ValueError:
            continue
        if isinstance(value, dict) and value not in readings:
            readings.append(value)
    return readings


def jsonl_lines(text: str) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of each non-blank line of JSON Lines ``text``.

    Lines end at a newline only: :meth:`str.splitlines` also breaks at U+0085, U+2028 and
    other separators that JSON strings may hold raw (MMLU's test split has a U+0085 inside
    a question), and would cut such a line in two.
    """
    for number, line in enumerate(text.split("\n"), start=1):
        if line.strip():
            yield number, line


def jsonl_rows(text: str, path: str | Path) -> list[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` of each non-blank line of JSONL ``text`` read from ``path``.

    Raises:
        UsageError: a line that is not a JSON object (``path:LINE`` named).
    """
    rows: list[tuple[int, dict[str, Any]]] = []
    for number, line in jsonl_lines(text):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise UsageError(f"{path}:{number}: not valid JSON ({err.msg})") from None
        if not isinstance(row, dict):
            raise UsageError(f"{path}:{number}: each line must be a JSON object")
        rows.append((number, row))
    return rows


def check_unique_ids(
    ids: Iterable[str], source: str | Path, *, places: Sequence[int] | None = None, unit: str = "line"
) -> None:
    """Raise a UsageError naming every id that occurs more than once (the first ten, and a count).

    Args:
        ids: the ids, in input order.
        source: what they were read from, named first in the message.
        places: where each id was read (its line number, parallel to ``ids``), named beside each
            duplicate: ``a (lines 2, 5)``; None names the ids only.
        unit: what a place counts (``line``, ``sentence``, ``item``).
    """
    where: dict[str, list[int]] = {}
    for n, ident in enumerate(ids):
        where.setdefault(ident, []).append(places[n] if places is not None else n)
    duplicates = sorted(i for i, seen in where.items() if len(seen) > 1)
    if duplicates:
        named = [
            i if places is None else f"{i} ({unit}s {', '.join(str(p) for p in where[i])})"
            for i in duplicates[:10]
        ]
        shown = ", ".join(named) + (f" and {len(duplicates) - 10} more" if len(duplicates) > 10 else "")
        raise UsageError(f"{source}: duplicate item ids: {shown}; every id must be unique")
