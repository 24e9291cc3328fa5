"""``moot run --input topics.jsonl --output results.jsonl``: many debates, one result per line.

Input: one JSON object per line, ``{"topic": "...", "context": ..., "initial_answer": "...",
"id": "..."}``, where only ``topic`` is required (a bare JSON string is a topic too). Output:
one JSON object per finished debate, the :class:`~moot.transcript.DebateResult` with the
item's key added as ``input_id``, written and flushed as each debate ends, so an
interrupted batch keeps what finished. Run the same command again and the items already in
the output are skipped: a batch resumes where it stopped.

A debate that fell back (its deadline, a budget, a failed turn) is written like any other,
and the batch exits 1; the summary says how many fell back, why, and, for a deadline, how
to lift it (``--timeout S``). Running the command again runs the fallen-back topics again
(their new line replaces the old one for the exit code and the next run).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import TextColumn

import moot.cli._exit as _exit

from ..engine import Debate
from ..errors import UsageError
from ..transcript import DebateResult
from ._console import ProgressLines, endpoint_line, print_endpoints, progress_bar
from ._io import read_jsonl, read_text

__all__ = ["TopicItem", "fallback_summary", "read_done", "read_topics", "run_batch"]

_FIELDS = ("id", "topic", "context", "initial_answer")

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TopicItem:
    """One line of a topics file."""

    key: str
    """``id`` when the line gives one, else the topic text: what resuming matches on."""
    topic: str
    context: Any = None
    initial_answer: str | None = None


def read_topics(path: Path) -> list[TopicItem]:
    """Read a topics JSONL file (see the module docstring).

    Raises:
        UsageError: a missing file, a line that is not a topic object (its number is named),
            an unknown field, two lines with the same key, or no topic at all.
    """
    items: list[TopicItem] = []
    seen: dict[str, int] = {}
    for number, data in read_jsonl(path, "input file"):
        if isinstance(data, str):
            data = {"topic": data}
        if not isinstance(data, dict):
            raise UsageError(f"{path} line {number}: expected an object with a 'topic'")
        unknown = sorted(set(data) - set(_FIELDS))
        if unknown:
            raise UsageError(
                f"{path} line {number}: unknown field {unknown[0]!r}; fields: {', '.join(_FIELDS)}"
            )
        topic, answer, ident = data.get("topic"), data.get("initial_answer"), data.get("id")
        if not isinstance(topic, str) or not topic.strip():
            raise UsageError(f"{path} line {number}: 'topic' must be a non-empty string")
        if answer is not None and not isinstance(answer, str):
            raise UsageError(f"{path} line {number}: 'initial_answer' must be a string")
        if ident is not None and (isinstance(ident, bool) or not isinstance(ident, str | int)):
            raise UsageError(f"{path} line {number}: 'id' must be a string or an integer")
        key = str(ident) if ident is not None else topic.strip()
        if key in seen:
            raise UsageError(
                f"{path} lines {seen[key]} and {number} have the same key {key!r}: give each line an 'id'"
            )
        seen[key] = number
        items.append(TopicItem(key, topic.strip(), data.get("context"), answer))
    if not items:
        raise UsageError(f"{path} holds no topics")
    return items


def read_done(path: Path) -> dict[str, DebateResult]:
    """The results already in an output file, by ``input_id``; a cut-off last line is dropped.

    A batch killed mid-write can leave a partial last line; it is removed from the file
    so the next line appended starts clean, and its item runs again.

    Raises:
        UsageError: the path is not a file of results (a bad line other than the last), or its
            folder does not exist.
    """
    if not path.parent.is_dir():  # checked before any debate runs, not when the first one ends
        raise UsageError(f"--output {path}: the folder {path.parent} does not exist")
    if not path.exists():
        return {}
    if not path.is_file():
        raise UsageError(f"--output {path} is not a file")
    # Split at "\n" only: results are written with ensure_ascii=False, so a reply may hold U+2028 raw.
    lines = read_text(path, "--output file").split("\n")
    lines = [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])
    done: dict[str, DebateResult] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            key = data.pop("input_id")
            done[str(key)] = DebateResult.model_validate(data)
        except (ValueError, KeyError, TypeError, AttributeError):
            if number == len(lines) and not line.endswith("\n"):
                path.write_text("".join(lines[:-1]), encoding="utf-8")
                break
            raise UsageError(
                f"--output {path} line {number} is not a moot run result; choose another file"
            ) from None
    return done


def _say_degraded(item: TopicItem, result: DebateResult) -> None:
    """A batch shows no transcript: a fallback or a failed turn is said as it happens."""
    key = json.dumps(item.key, ensure_ascii=False)
    if result.fallback is not None:
        logger.warning("topic %s fell back: %s", key, result.fallback)
    elif result.failed_turns and not result.skipped:
        failed = [t for t in result.turns(include_judge=True) if t.error is not None and not t.cancelled]
        first = f": {failed[0].speaker}: {failed[0].error}" if failed else ""
        logger.warning("topic %s had %d failed turn(s)%s", key, result.failed_turns, first)


def run_batch(
    debate: Debate,
    items: list[TopicItem],
    output: Path,
    *,
    concurrency: int,
    console: Console,
    debate_mode: bool = True,
) -> int:
    """Run the items not yet in ``output``, ``concurrency`` at a time; return the exit code.

    Each debate is recorded as ``debate``'s ``store=`` says, as a ``run`` of its own. The exit
    code follows the contract over every result in the output file, earlier ones included.
    """
    previous = read_done(output)
    again = [item for item in items if item.key in previous and previous[item.key].fallback is not None]
    todo = [item for item in items if item.key not in previous or item in again]
    if len(todo) < len(items) or again:
        skipped = len(items) - len(todo)
        rerun = f"; {len(again)} that fell back run again" if again else ""
        console.print(f"{skipped} of {len(items)} topics already in {output}: skipped{rerun}", markup=False)
    results: dict[str, DebateResult] = {}

    async def main() -> None:
        gate = asyncio.Semaphore(concurrency)
        live = console.is_terminal  # in a log or a pipe a live bar shows nothing until the end
        lines = ProgressLines(console, "debates", "topics")
        lines.start(len(todo))
        with (
            output.open("a", encoding="utf-8") as out,
            progress_bar(console, TextColumn("{task.fields[status]}"))
            if live
            else contextlib.nullcontext(None) as progress,
        ):
            task = progress.add_task("debates", total=len(todo), status="") if progress is not None else None

            async def one(item: TopicItem) -> None:
                async with gate:
                    result = await debate.run(
                        item.topic,
                        context=item.context,
                        initial_answer=item.initial_answer,
                        debate_mode=debate_mode,
                    )
                _say_degraded(item, result)
                line = {"input_id": item.key, **result.model_dump(mode="json")}
                out.write(json.dumps(line, ensure_ascii=False) + "\n")
                out.flush()  # a killed batch keeps every finished line
                results[item.key] = result
                degraded = sum(_exit.for_debate(r) != 0 for r in results.values())
                if progress is not None and task is not None:
                    status = [f"{degraded} fell back"] if degraded else []
                    stats = debate.endpoint_stats()
                    status += [endpoint_line(stats)] if stats else []
                    progress.update(task, advance=1, status=" · ".join(status))
                else:
                    lines.advance()

            try:
                await asyncio.gather(*(one(item) for item in todo))
            finally:
                await debate.aclose()

    asyncio.run(main())
    degraded = sum(_exit.for_debate(r) != 0 for r in results.values())
    note = f" ({degraded} fell back or had failed calls)" if degraded else ""
    console.print(f"wrote {len(results)} results to {output}{note}", markup=False)
    print_endpoints(console, debate.endpoint_stats())
    final = previous | results
    hint = fallback_summary(list(final.values()))
    if hint:
        console.print(f"fell back: {hint}", markup=False)
    return _exit.for_debates(final.values())


def fallback_summary(results: list[DebateResult]) -> str | None:
    """How many results fell back and why; for a deadline, how to lift it (None: none fell back)."""
    reasons = Counter(r.fallback for r in results if r.fallback is not None)
    if not reasons:
        return None
    shown = "; ".join(f"{count}x {reason}" for reason, count in reasons.most_common(3))
    more = f"; {len(reasons) - 3} other reasons" if len(reasons) > 3 else ""
    text = f"{sum(reasons.values())} of {len(results)} debates ({shown}{more})"
    if any(reason.startswith("timeout") for reason in reasons):
        longest = max((r.timings.deadline_s or 0.0) for r in results if r.fallback)
        text += (
            f"; a preset runs under its production deadline: lift it with --timeout "
            f"{max(60.0, 10 * longest):g} and run the same command again (fallen-back topics run again)"
        )
    return text
