"""Whether a stored record may be re-run or replayed: damaged, edited after it was written, or unsealed.

The store keeps the SHA-256 of each run's config and result and of each item's data as written
(schema 9, :mod:`moot.runs.store`) and reads back whether they still match
(:attr:`~moot.runs.RunRecord.integrity`). :func:`check_record` turns that into a decision for a
replay or a ``--from``: a damaged record (a field that is not JSON) is refused; an edited one is
refused naming the parts that changed, unless the caller trusts edited records
(``--trust-edited``, ``trust_edited=True``): then one line on stderr says so and
:func:`trusted_edit` gives what the new run records about it. A record written before moot kept
digests is used with one line on stderr saying that it cannot be checked.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from ..errors import UsageError
from .schema import RunRecord, StoredItem

__all__ = ["check_record", "trusted_edit"]

_trusted: dict[str, dict[str, Any]] = {}  # full run id -> what the new run records about the edit
_said: set[str] = set()  # run ids whose warning was printed in this process


def _say_once(run_id: str, line: str) -> None:
    if run_id not in _said:
        _said.add(run_id)
        print(f"moot: warning: {line}", file=sys.stderr)


def check_record(record: RunRecord, *, trust_edited: bool = False, items: Sequence[StoredItem] = ()) -> None:
    """Refuse a record that is damaged or was edited after it was written (see the module docstring).

    Args:
        record: the run, as :meth:`~moot.runs.RunStore.get` read it (with its integrity).
        trust_edited: use an edited record all the same (said on stderr, and recorded by the new run).
        items: the run's items the caller will use (an ABSA batch's sentences), checked too.

    Raises:
        UsageError: the record is damaged, or edited and not trusted (naming the parts that changed).
    """
    short = record.id[:8]
    if record.damage is not None:
        raise UsageError(f"{record.damage}: it cannot be re-run or replayed")
    edited = list(record.edited) + [
        f"item {i.item!r}" + (f" ({i.part})" if i.part else "") for i in items if i.integrity == "edited"
    ]
    if edited:
        what = ", ".join(edited)
        if not trust_edited:
            raise UsageError(
                f"run {short} was edited after it was recorded (its {what} "
                f"{'differs' if len(edited) == 1 else 'differ'} from what was written): refusing to "
                "re-run or replay it; --trust-edited uses it as it is now"
            )
        _trusted[record.id] = {"run": record.id, "edited": edited}
        _say_once(
            record.id,
            f"run {short} was edited after it was recorded ({what}); using it as it is now "
            "(--trust-edited): the new run records that it replayed an edited record",
        )
    elif record.integrity == "unsealed" or any(i.integrity == "unsealed" for i in items):
        _say_once(
            record.id,
            f"run {short} was recorded before moot kept digests of its records: "
            "whether it was edited since cannot be checked",
        )


def trusted_edit(run_id: str) -> dict[str, Any]:
    """What the new run's config records about ``run_id`` (a prefix) as ``--trust-edited`` used it.

    ``{"edited_record": {"run": ID, "edited": [parts]}}`` when it was an edited record used in this
    process, else ``{}``.
    """
    key = run_id.strip().lower()
    for full, note in _trusted.items():
        if full.startswith(key):
            return {"edited_record": note}
    return {}
