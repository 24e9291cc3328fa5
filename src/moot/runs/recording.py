"""Record a run into the store as it happens.

Every CLI command wraps its work in :func:`recording`::

    with recording("run", title=topic, model=spec, config=cfg, store=store) as rec:
        result = debate.run_sync(topic, on_event=rec.on_event)
        rec.finish(result, status="fell_back" if result.degraded else "complete")

The run row is created on entry (status ``running``), each event and item is
committed as it arrives, and the exit sets the end status: ``complete`` unless
:meth:`Recording.finish` said otherwise, ``interrupted`` on Ctrl-C, SIGTERM,
exit code 130 or a cancelled task, ``failed`` (with the error) on any other exception. With the
store turned off the same object records nothing.

A store that cannot be written (disk full, locked for 30 s) does not stop the
run: one warning goes to stderr and recording stops for that run.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import sqlite3
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel

import moot.redact as _redact

from ..errors import error_text
from ..models.base import Usage, model_info
from .store import RunStatus, RunStore, default_store_path

__all__ = ["Recording", "begin_recording", "model_info", "open_store", "prompts_hash", "recording", "redact"]

# Secret-looking key names (moot.redact); ``max_tokens`` or a persona's ``key`` stay.
_SECRET_NAMES = (
    r"(api[_-]?key|token|access[_-]?token|auth[_-]?token|secret|client[_-]?secret|password|passwd"
    r"|authorization|bearer|credentials?)"
)
# The same names as JSON object keys: one scan of the serialised config tells whether redact() must run.
_SECRET_IN_JSON = re.compile(rf'"([^"\\]*[_-])?{_SECRET_NAMES}"\s*:', re.I)
# How every name above ends, with the closing quote: substring tests on the lower-cased text are ~6x
# cheaper than the regex (0.02 vs 0.13 ms on a debate's config), and almost no config has any of them.
_SECRET_ENDS = (
    'apikey"', 'api_key"', 'api-key"', 'token"', 'secret"', 'password"', 'passwd"', 'authorization"',
    'bearer"', 'credential"', 'credentials"',
)  # fmt: skip


def _may_hold_secret(config_json: str) -> bool:
    """True when the serialised config has a secret-looking key (exactly as ``_SECRET_IN_JSON`` says)."""
    low = config_json.lower()
    return any(end in low for end in _SECRET_ENDS) and bool(_SECRET_IN_JSON.search(config_json))


def redact(data: Any) -> Any:
    """``data`` with secret-named keys' values and URL credentials masked (:func:`moot.redact.data`)."""
    return _redact.data(data)


def redact_argv(argv: Sequence[str]) -> list[str]:
    """The command line with secret option values and URL credentials masked (:func:`moot.redact.argv`)."""
    return _redact.argv(argv)


@cache
def prompts_hash() -> str:
    """SHA-256 over the bundled prompt templates (names and contents), to tell prompt versions apart."""
    digest = hashlib.sha256()
    folder = resources.files("moot").joinpath("prompts")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".md"):
            digest.update(entry.name.encode() + b"\0" + entry.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def open_store(store: str | Path | RunStore | None = None, *, enabled: bool = True) -> RunStore | None:
    """The store to record into: ``store``, ``$MOOT_STORE`` or ``./.moot/runs.db``; None when disabled."""
    if not enabled:
        return None
    if isinstance(store, RunStore):
        return store
    return RunStore(default_store_path(store), background=True)


def _version() -> str:
    from .._version import __version__

    return __version__


def _json(data: BaseModel | Mapping[str, Any] | Sequence[Any]) -> str:
    record_json = getattr(data, "record_json", None)
    if callable(record_json):  # a debate's result keeps each turn's messages as sent
        return str(record_json())
    if isinstance(data, BaseModel):
        return data.model_dump_json()
    try:  # the same text as json.dumps below at a tenth of the CPU (a bench unit: ~65 -> ~6 us)
        return orjson.dumps(data, default=str, option=_ORJSON_AS_JSON).decode()
    except orjson.JSONEncodeError:  # an int beyond 64 bits, a non-string key orjson will not write
        return json.dumps(data, ensure_ascii=False, default=str, separators=(",", ":"))


# Values json.dumps writes with default=str are passed to str() by orjson too, not written its own way.
_ORJSON_AS_JSON = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


class Recording:
    """One run being recorded; every method is a no-op when the store is off.

    Attributes:
        run_id: the run's id, or None when nothing is recorded.
        store: the store, or None.
    """

    def __init__(self, store: RunStore | None, run_id: str | None) -> None:
        self.store = store
        self.run_id = run_id
        self.status: RunStatus | None = None
        self._seq = 0

    @property
    def events_recorded(self) -> int:
        """How many events this run has recorded (its last event's ``seq``)."""
        return self._seq

    @property
    def enabled(self) -> bool:
        """True while the run is being recorded."""
        return self.store is not None and self.run_id is not None

    def _write(self, fn: Any, *args: Any, **kwargs: Any) -> None:
        if self.store is None or self.run_id is None:
            return
        try:
            fn(self.run_id, *args, **kwargs)
        except Exception as exc:  # the run goes on; say so once, loudly
            print(
                f"moot: warning: cannot write the run store {self.store.path} ({exc}); "
                "this run is no longer recorded",
                file=sys.stderr,
            )
            self.store = None

    def on_event(self, event: BaseModel) -> None:
        """An event callback: appends ``event``, any event model with a ``kind``.

        Fits ``Debate.run(on_event=...)`` and ``run_absa(on_event=...)``. A debate's event (it
        has a ``debate_id``) is stored without its empty fields and at its ``time``; one carrying
        a finished ``result`` (``debate_completed``) keeps it in summary, as ``outcome`` (its
        final answer and fallback): the whole result is the run's result.
        """
        if not self.enabled:
            return
        assert self.store is not None
        kind = str(getattr(event, "kind", type(event).__name__))
        if not hasattr(event, "debate_id"):  # a pipeline's event (ABSA's StageEvent): as it is
            self.event(kind, event)
            return
        res = getattr(event, "result", None)
        if res is not None:
            outcome = {
                "final_answer": getattr(res, "final_answer", None),
                "fallback": getattr(res, "fallback", None),
            }
            data = event.model_dump_json(exclude={"result"}, exclude_none=True)[:-1] + (
                ',"outcome":' + _json(outcome) + "}"
            )
        else:
            data = event.model_dump_json(exclude_none=True)
        self._seq += 1
        at = getattr(event, "time", None)
        self._write(
            self.store.append_event, self._seq, kind, data, at if isinstance(at, float) and at else None
        )

    def event(self, kind: str, data: BaseModel | Mapping[str, Any]) -> None:
        """Append a non-debate event (bench progress, an ABSA sentence done...)."""
        if not self.enabled:
            return
        assert self.store is not None
        self._seq += 1
        self._write(self.store.append_event, self._seq, kind, _json(data))

    def item(
        self, item: str, data: BaseModel | Mapping[str, Any], *, part: str = "", correct: bool | None = None
    ) -> None:
        """Record one item outcome (a bench unit, an ABSA sentence)."""
        if not self.enabled:
            return
        assert self.store is not None
        self._write(self.store.put_item, item, part, _json(data), correct=correct)

    def update(self, **fields: Any) -> None:
        """Change fields of the run row while it runs (``usage``, ``summary``, ``title``...)."""
        if self.enabled:
            assert self.store is not None
            self._write(self.store.update, **fields)

    def flush(self) -> None:
        """Wait until everything recorded so far is committed (the store may write on a thread)."""
        store = self.store
        if store is not None:
            self._write(lambda _run_id: store.flush())

    def finish(
        self,
        result: BaseModel | Mapping[str, Any] | Sequence[Any] | None = None,
        *,
        status: RunStatus = "complete",
        usage: Usage | None = None,
        summary: dict[str, Any] | None = None,
        score: float | None = None,
        error: str | None = None,
    ) -> None:
        """Store the result and the end status (the context manager stamps the end time)."""
        self.status = status
        if not self.enabled:
            return
        if usage is None:
            found = getattr(result, "usage", None)
            usage = found if isinstance(found, Usage) else None
        self.update(
            status=status,
            usage=usage,
            result_json=None if result is None else _json(result),
            summary=summary,
            score=score,
            error=error,
        )

    def fail(self, exc: BaseException) -> None:
        """Set the end status ``exc`` gives (``interrupted``, ``failed`` with the error).

        An exit code after :meth:`finish` keeps the status it chose (bench: incomplete, exit 1).
        """
        status, is_exit = _exit_status(exc)
        if status == "interrupted" or (status == "failed" and not (is_exit and self.status is not None)):
            self.status = status
            error = "interrupted" if status == "interrupted" else error_text(exc)
            self.update(status=status, error=error)

    def close(self, *, wait: bool = True) -> None:
        """Stamp the end time (``complete`` when no status was set); ``wait``: commit now."""
        if self.status is None:
            self.status = "complete"
            self.update(status="complete")
        self.update(ended=True)
        if wait:
            self.flush()


def _exit_status(exc: BaseException) -> tuple[RunStatus | None, bool]:
    """``(status, is_exit)``: how an exception ends a run (None: a clean exit with code 0)."""
    if isinstance(exc, KeyboardInterrupt | asyncio.CancelledError):  # Ctrl-C, or a cancelled task
        return "interrupted", False
    code = getattr(exc, "exit_code", getattr(exc, "code", None))
    if isinstance(exc, SystemExit) or code is not None:
        if code in (0, None):
            return None, True
        return ("interrupted" if code == 130 else "failed"), True
    return "failed", False


def begin_recording(
    store: RunStore,
    kind: str,
    *,
    title: str = "",
    model: str = "",
    config: Mapping[str, Any] | None = None,
    argv: Sequence[str] | None = None,
    continue_run: str | None = None,
    run_id: str | None = None,
) -> Recording:
    """Create the run row of ``kind`` in ``store`` (status ``running``), or reopen ``continue_run``.

    ``run_id`` names a new row (None: a new id). A run that continues its own id
    (``continue_run == run_id``: a debate resumed from a LangGraph checkpoint) is created when
    this store never saw it. The config gets the bundled prompts' hash; secret-looking keys and
    command-line option values are masked. End it with :meth:`Recording.close`.
    """
    if continue_run is not None and (continue_run != run_id or store.exists(continue_run)):
        rec = Recording(store, continue_run)
        rec._seq = store.reopen(continue_run)
        return rec
    cfg = dict(config or {}) | {"prompts_sha256": prompts_hash()}
    text = json.dumps(cfg, ensure_ascii=False, default=str)
    if _may_hold_secret(text):  # rare: walk the config only when a secret-looking key is there
        text = json.dumps(redact(cfg), ensure_ascii=False, default=str)
    run_id = store.create_run(
        kind,
        title=title,
        model=model,
        argv=redact_argv(list(sys.argv if argv is None else argv)),
        config=text,
        moot_version=_version(),
        run_id=run_id,
    )
    return Recording(store, run_id)


@contextmanager
def recording(
    kind: str,
    *,
    title: str = "",
    model: str = "",
    config: Mapping[str, Any] | None = None,
    argv: Sequence[str] | None = None,
    store: str | Path | RunStore | None = None,
    enabled: bool = True,
    continue_run: str | None = None,
    wait: bool = True,
) -> Iterator[Recording]:
    """Record one run of ``kind`` (see the module docstring).

    Args:
        kind: ``run``, ``absa``, ``absa-eval``, ``arbitrate``, ``bench``...
        title: the topic, sentence or task, for lists and search.
        model: the main model spec.
        config: the full resolved configuration; secret-looking keys are masked.
        argv: the command line (default ``sys.argv``); secret option values are masked.
        store: the store file or an open store (default ``$MOOT_STORE`` or ``./.moot/runs.db``).
        enabled: False records nothing (``--no-store``).
        continue_run: the id of a run to continue (``moot bench --resume``) instead of a new one.
        wait: at the end, wait until the run is committed (a store with a writer thread commits
            within milliseconds anyway); False lets many concurrent runs sharing one store end
            without waiting on each other (close or flush the store when they are done).
    """
    opened = None if isinstance(store, RunStore) else open_store(store, enabled=enabled)
    target = store if isinstance(store, RunStore) and enabled else opened
    rec = Recording(None, None)
    if target is not None:
        rec = begin_recording(
            target, kind, title=title, model=model, config=config, argv=argv, continue_run=continue_run
        )
    try:
        yield rec
    except BaseException as exc:
        rec.fail(exc)
        raise
    finally:
        rec.close(wait=wait or opened is not None)
        if opened is not None:
            try:
                opened.close()
            except sqlite3.Error:  # already reported by flush()
                pass
