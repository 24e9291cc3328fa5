"""The run store's recorder: an observer (:mod:`moot.observe`) writing one run into a store.

What it writes, per event:

- :class:`~moot.observe.PipelineEvent` ``unit_completed``: one stored unit (``put_item``);
  ``model_request`` (a unit's plain requests): nothing; any other pipeline event: one stored
  event of its ``kind`` with its ``data``;
- for a debate (kind ``run``) and a one-sentence ABSA run, every other event too: a debate's
  :class:`~moot.transcript.Event` (a completed debate's result kept in summary in its event; the
  whole result is the run's ``result_json``) and ABSA's ``StageEvent``. Runs made of units (a
  bench, an ABSA batch or evaluation) keep their units, and an arbitration its rulings (each
  with its turn), not the events of the steps and debates inside them.

The run row is created by ``on_start`` (status ``running``) and ``on_end`` stores the result,
usage, summary, score, error and end status. A store that cannot be written does not stop the
run: one warning on stderr and the run is no longer recorded.
"""

from __future__ import annotations

import atexit
import sqlite3
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from pydantic import BaseModel

from ..observe import PipelineEvent, RunEnd, RunStart
from ..runs.recording import Recording, begin_recording
from ..runs.store import RunStore, default_store_path

__all__ = ["StoreRecorder", "recorded_ids", "recorder_for", "resolve_store"]


_opened: dict[Path, RunStore] = {}
_in_flight: dict[int, int] = {}  # id(store) -> runs being recorded into it
_lock = threading.Lock()
_ids: ContextVar[list[str] | None] = ContextVar("moot_recorded_ids", default=None)


@contextmanager
def recorded_ids() -> Iterator[list[str]]:
    """The ids of the runs recorded inside the block, in start order (for "recorded as run ...")."""
    ids: list[str] = []
    token = _ids.set(ids)
    try:
        yield ids
    finally:
        _ids.reset(token)


def resolve_store(spec: str | Path | RunStore | bool) -> RunStore:
    """The store a ``store=`` spec names; a path is opened once per process and kept open.

    True means ``$MOOT_STORE`` or ``./.moot/runs.db``.
    """
    if isinstance(spec, RunStore):
        return spec
    path = default_store_path(None if isinstance(spec, bool) else spec).resolve()
    with _lock:
        store = _opened.get(path)
        if store is None:
            store = _opened[path] = RunStore(path, background=True)
        return store


@atexit.register
def _close_opened() -> None:
    with _lock:
        stores = list(_opened.values())
        _opened.clear()
    for store in stores:
        try:
            store.flush()
            store.close()
        except sqlite3.Error:
            pass


def recorder_for(spec: str | Path | RunStore | bool, start: RunStart) -> StoreRecorder:
    """A recorder of the run ``start`` describes, into the store ``spec`` names."""
    return StoreRecorder(resolve_store(spec))


class StoreRecorder:
    """Records one run into ``store`` (see the module docstring).

    Attributes:
        store: the store.
        recording: the run being written, once started (its ``run_id`` names the stored run).
    """

    def __init__(self, store: RunStore) -> None:
        self.store = store
        self.recording = Recording(None, None)
        self._all_events = False
        self.ignores: frozenset[str] = frozenset()
        """The pipeline event kinds this recorder never stores (see :meth:`moot.observe.RunHandle.wants`)."""

    @property
    def run_id(self) -> str | None:
        """The stored run's id (None before the start, or once the store failed)."""
        return self.recording.run_id

    def on_start(self, start: RunStart) -> None:
        """Create the run row (or reopen the run it continues)."""
        # A debate and one ABSA sentence keep every event; the runs made of units (a bench, an ABSA
        # batch or evaluation) and an arbitration (its rulings hold their turns) keep only theirs.
        self._all_events = start.kind == "run" or (start.kind == "absa" and not start.config.get("batch"))
        # A unit's plain requests are not kept: the pipeline need not build them for the store.
        self.ignores = frozenset() if self._all_events else frozenset({"model_request"})
        self.recording = begin_recording(
            self.store,
            start.kind,
            title=start.title,
            model=start.model,
            config=start.config,
            argv=start.argv,
            continue_run=start.continues,
            run_id=start.run_id,
        )
        if start.continues is not None and start.title:
            self.recording.update(title=start.title)  # a resume may have added methods or items
        key = id(self.store)
        with _lock:
            _in_flight[key] = _in_flight.get(key, 0) + 1
        ids = _ids.get()
        if ids is not None and self.recording.run_id is not None:
            ids.append(self.recording.run_id)

    def on_event(self, event: BaseModel) -> None:
        """Append ``event`` (a unit result becomes a stored unit)."""
        rec = self.recording
        if isinstance(event, PipelineEvent):
            if event.kind == "unit_completed" and event.unit is not None:
                rec.item(event.unit, event.data, part=event.part, correct=event.correct)
            elif event.kind == "model_request":
                return  # a unit's requests, as a debate's events inside a unit, are not kept
            else:
                rec.event(event.kind, event.data)
        elif self._all_events:
            rec.on_event(event)

    def on_end(self, end: RunEnd) -> None:
        """Store the result and end status, stamp the end; commit when the store's last run ends."""
        rec = self.recording
        said = rec.run_id is not None and rec.store is None  # the recording warned when a write failed
        if end.exception is not None and end.error is not None and end.result is None:
            rec.fail(end.exception)
        else:
            rec.finish(
                end.result,
                status=end.status,
                usage=end.usage,
                summary=dict(end.summary) if end.summary is not None else None,
                score=end.score,
                error=end.error,
            )
        key = id(self.store)
        with _lock:
            left = _in_flight[key] = _in_flight.get(key, 1) - 1
            if left <= 0:
                _in_flight.pop(key, None)
        rec.close(wait=False)
        if left <= 0:
            try:
                self.store.flush()
            except sqlite3.Error as exc:  # the result is the caller's either way; say so loudly, once
                if not said:
                    where = self.store.path
                    # The same words as a failed write's (Recording._write): which of the two hits a
                    # full disk first depends on when the store's writer flushed.
                    print(
                        f"moot: warning: cannot write the run store {where} ({exc}); "
                        "this run is no longer recorded: its last events are lost",
                        file=sys.stderr,
                    )
