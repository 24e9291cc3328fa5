"""``load_result``: a run's result as objects, read back by the layer that owns its kind.

The store keeps a ``kind`` string and JSON. Which objects a kind's result becomes is known above
the pipelines (:mod:`moot.app.records` registers a reader per kind when :mod:`moot` loads); a
kind without a reader reads back as its JSON.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .store import DamagedRecord, RunRecord, RunStore

__all__ = ["Reader", "load_result", "register_reader"]

Reader = Callable[[RunStore, RunRecord], Any]
"""``reader(store, record) -> result`` for one kind (``record`` holds its result JSON)."""

_readers: dict[str, Reader] = {}


def register_reader(kind: str, reader: Reader) -> None:
    """Read the results of runs of ``kind`` with ``reader`` from now on."""
    _readers[kind] = reader


def load_result(store: RunStore, run_id: str) -> Any:
    """A run's result as the same pydantic objects the API returns (see :mod:`moot.app.records`).

    None when the run recorded no result (interrupted before the end: read its events and items
    instead); its JSON for a kind without a reader.

    Raises:
        DamagedRecord: the run's row cannot be read (a field that is not JSON), naming it.
    """
    record = store.get(run_id)
    if record.damage is not None:
        raise DamagedRecord(record.damage)
    reader = _readers.get(record.kind)
    return reader(store, record) if reader is not None else record.result
