"""The run store: every run, its events and its items in one SQLite file.

Standard-library ``sqlite3`` in WAL mode: readers (``moot runs``, ``moot view``)
never block the writer, and several writer processes share the file through
SQLite's own locking with a busy timeout. Each event is committed as it is
appended, so a process killed with SIGKILL loses nothing it had recorded (a
commit in WAL mode survives the process; only an OS crash could drop the last
ones, since ``synchronous=NORMAL`` skips the fsync per commit).

Tables (schema version in ``schema_version``; :data:`MIGRATIONS` upgrades an
older file in place, in one transaction; both in :mod:`moot.runs.schema`):

* ``runs``: one row per run (kind, status, times, argv, config, result...).
* ``events``: the run's events in order (``seq`` counts from 1 per run).
* ``items``: per-item outcomes: bench units (item x method), ABSA batch and
  evaluation sentences; ``(item, part)`` is unique within a run.

Writers that record as they go (the CLI) open the store with ``background=True``:
writes made inside a running event loop gather for 10 ms and are then handed, in
order, to the store's writer thread (one connection of its own), which commits each
batch in one transaction. A burst of events (200 debates finishing a round together)
costs one commit, not hundreds, and the event loop never waits for SQLite (a commit,
another process's lock). Every read method, :meth:`RunStore.flush` and
:meth:`RunStore.close` wait until what was written before them is committed; outside
an event loop writes are committed at once.

Two processes creating or upgrading the same new store at once both succeed: each
step of the open is tried again while the other holds the file (see
:func:`moot.models._sqlite.retry_locked`).

A record says when it was edited: each run's config and result, and each item's data,
keep the SHA-256 of their stored text (schema 9); :meth:`RunStore.get` compares them
(:attr:`RunRecord.integrity`). A field that is not JSON (a row damaged by hand or by a
tool) is read as empty and named in :attr:`RunRecord.damage`: the run is still listed,
and showing or replaying it raises :class:`DamagedRecord`.

Credentials never land in the file: every text written passes :func:`moot.redact.text`
(URL user-info and ``api_key``-like query parameters become ``***``), and every text read
passes it again, so a store written by an older moot shows none either.

A run still marked ``running`` whose process is gone (same host, pid dead)
reads as ``interrupted``: that is what a SIGKILL leaves behind.
"""

from __future__ import annotations

import asyncio
import builtins
import hashlib
import json
import os
import re
import socket
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import moot.redact as redact

from .._ids import new_id
from ..errors import UsageError
from ..models._sqlite import BUSY_TIMEOUT_S, DbThread, retry_locked, set_wal
from ..models.base import Usage
from .integrity import check_record
from .schema import MIGRATIONS, SCHEMA_VERSION, Integrity, RunRecord, RunStatus, StoredEvent, StoredItem

__all__ = [
    "DEFAULT_STORE",
    "DamagedRecord",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "RunRecord",
    "RunStatus",
    "RunStore",
    "StoredEvent",
    "StoredItem",
    "default_store_path",
]

DEFAULT_STORE = Path(".moot") / "runs.db"
"""Where the store lives unless ``--store`` or ``MOOT_STORE`` says otherwise (relative to the cwd)."""

_INSERT_EVENT = "INSERT INTO events (run_id, seq, time, kind, data) VALUES (?, ?, ?, ?, ?)"
_EVENT_CHUNK = 400
"""Rows per multi-row INSERT (5 parameters each; SQLite allows 32,766 per statement)."""
_GATHER_S = 0.01
"""How long writes made in an event loop gather before they are committed together."""

_HOST = socket.gethostname()

_QUICK_CHECK_BYTES = 64 * 1024 * 1024
"""Stores up to this size get ``PRAGMA quick_check`` on every open (~3 ms a MB)."""
_LIVE = ("running", "interrupted")
"""Statuses that depend on whether the run's process is alive (checked when read)."""
_WORD = re.compile(r"\w+")


def default_store_path(store: str | Path | None = None) -> Path:
    """The store file: ``store`` if given, else ``$MOOT_STORE``, else ``./.moot/runs.db``."""
    if store is not None and str(store):
        return Path(store)
    env = os.environ.get("MOOT_STORE", "").strip()
    return Path(env) if env else DEFAULT_STORE


_LIST_COLUMNS = (
    "id, kind, status, title, model, started_at, ended_at, host, pid, argv, config, moot_version, "
    "calls, prompt_tokens, completion_tokens, score, summary, error"
)


def _alive(host: str, pid: int) -> bool:
    if host != _HOST or pid <= 0:
        return True  # another machine's run: we cannot tell, so trust its status
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class DamagedRecord(UsageError):
    """A stored run, event or item that cannot be read (a field that is not JSON); the message names it."""


def _digest(text: str | None) -> str | None:
    return None if text is None else hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _check(parts: Sequence[tuple[str, str | None, str | None]]) -> tuple[Integrity, builtins.list[str]]:
    """``(integrity, edited parts)`` of ``(name, stored text, stored digest)`` parts."""
    edited = [name for name, text, digest in parts if digest is not None and _digest(text) != digest]
    if edited:
        return "edited", edited
    if any(digest is None and text is not None for _, text, digest in parts):
        return "unsealed", []
    return "intact", []


def _load(text: str | None, what: str, default: Any, damage: builtins.list[str]) -> Any:
    """``text`` as JSON (redacted), or ``default`` with ``what`` added to ``damage``."""
    if text is None:
        return default
    try:
        return json.loads(redact.text(text))
    except (ValueError, TypeError) as exc:
        damage.append(f"its {what} is not JSON ({exc})")
        return default


def _row_data(run_id: str, what: str, text: str) -> dict[str, Any]:
    """An event's or item's data.

    Raises:
        DamagedRecord: it is not a JSON object (naming the run and the row).
    """
    damage: builtins.list[str] = []
    data = _load(text, "data", None, damage)
    if not damage and not isinstance(data, dict):
        damage.append("its data is not a JSON object")
    if damage:
        raise DamagedRecord(f"run {run_id[:8]} is damaged: {what}: {'; '.join(damage)}")
    assert isinstance(data, dict)
    return data


def _damaged(path: Path, detail: str) -> str:
    return (
        f"{path} is a damaged run store (SQLite: {detail}); move it aside (moot starts a new one there) "
        "or recover what it holds with: sqlite3 FILE .recover"
    )


class RunStore:
    """A run store file; safe to share between threads of one process and between processes.

    Args:
        path: the SQLite file (its folder is created).
        background: gather writes made in an event loop for 10 ms and commit them together.
        must_exist: a missing file is an error instead of a new store (for viewers and ``moot runs``);
            an older schema is upgraded all the same (its search index built), unless the file
            cannot be written: then it is read as it is.

    Raises:
        UsageError: the file is not a moot store, or was written by a newer moot.
    """

    def __init__(self, path: str | Path, *, must_exist: bool = False, background: bool = False) -> None:
        self.path = Path(path)
        if must_exist and not self.path.is_file():
            raise UsageError(f"no run store at {self.path}")
        if not must_exist:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._search: bool | None = None
        self._numbers: bool | None = None
        self._found: tuple[tuple[Any, ...], str] | None = None
        try:
            self._db = sqlite3.connect(
                str(self.path), timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
            self._db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            # Each step is tried again while another process creating the same file holds it.
            retry_locked(self._check_file)  # before anything writes: a file not ours is left as it was
            self._db.execute("PRAGMA foreign_keys = ON")
            if not must_exist:
                set_wal(self._db, synchronous="NORMAL")
            retry_locked(lambda: self._migrate(must_exist))
            # Usage's attempts and cached have columns from schema 6; an older store read as is has none.
            version = self._version()
            extra = ", attempts, cached" if version >= 6 else ", 0, 0"
            self._columns = _LIST_COLUMNS + extra
            self._sealed = version >= 9  # digests of config, result and items (schema 9)
        except sqlite3.DatabaseError as exc:
            self._db_close_quietly()
            if "not a database" in str(exc):
                raise UsageError(f"{self.path} is not a moot run store (not an SQLite database)") from None
            if "malformed" in str(exc) or "corrupt" in str(exc):
                raise UsageError(_damaged(self.path, str(exc))) from None
            raise UsageError(f"{self.path} is not a usable run store: {exc}") from None
        except UsageError:
            self._db_close_quietly()
            raise
        self._deferred = background
        self._pending: list[tuple[str, Sequence[Any]]] = []
        self._scheduled_on: asyncio.AbstractEventLoop | None = None
        self._write_error: BaseException | None = None
        self._writer: DbThread | None = None  # started by the first batch a loop hands over
        self._handed: list[Any] = []  # futures of the batches handed to the writer, not yet done

    def _db_close_quietly(self) -> None:
        db = getattr(self, "_db", None)
        if db is not None:
            db.close()

    def _check_file(self) -> None:
        """Refuse a file that is not a moot store, or whose pages are damaged; changes nothing.

        An empty file (0 bytes, or an SQLite database with no table) becomes a new store. A
        database with tables but without moot's (``schema_version`` with ``runs``, ``events``
        and ``items``) belongs to another program: refused, and not touched (no WAL switch, no
        table added). ``PRAGMA quick_check`` then reads every page once (74 ms for a 26 MB store,
        linear in size; skipped above 64 MB): a damaged store is refused with its path rather
        than read or written.
        """
        tables = {
            str(row[0])
            for row in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        }
        if tables and not {"schema_version", "runs", "events", "items"} <= tables:
            shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
            raise UsageError(
                f"{self.path} is not a moot run store (an SQLite database with other tables: {shown}); "
                "it was left untouched: give another --store or MOOT_STORE"
            )
        if self.path.is_file() and self.path.stat().st_size > _QUICK_CHECK_BYTES:
            return  # SQLite still names a damaged page when a read meets it (see _execute)
        problems = [str(r[0]) for r in self._db.execute("PRAGMA quick_check(3)").fetchall()]
        if problems != ["ok"]:
            raise UsageError(_damaged(self.path, "; ".join(problems)))

    # -- deferred writes ----------------------------------------------------------------------
    def _drain(self) -> None:
        """Hand every pending write, as one transaction, to the writer thread (in order).

        Called on the event loop (10 ms after its first write) and by :meth:`flush`. A failed
        batch is kept for the next caller; the batches after it are not written.
        """
        self._scheduled_on = None
        batch, self._pending = self._pending, []
        if not batch or self._write_error is not None:
            return
        if self._writer is None:
            self._writer = DbThread(f"moot-store:{self.path.name}", self._writer_connection)
            weakref.finalize(self, self._writer.close)  # a store dropped unclosed ends its thread
        try:
            handed = self._writer.submit(lambda conn: self._commit(batch, conn))
        except RuntimeError:  # the writer was closed (the process is ending): commit here
            self._commit_here(batch)
            return
        self._handed.append(handed)
        handed.add_done_callback(self._batch_done)

    def _batch_done(self, handed: Any) -> None:
        exc = handed.exception()
        if exc is not None and self._write_error is None:  # raised by flush() or the next write
            self._write_error = exc

    def _commit_here(self, batch: Sequence[tuple[str, Sequence[Any]]]) -> None:
        try:
            with self._lock:
                self._commit(batch, self._db)
        except Exception as exc:
            self._write_error = exc

    def _writer_connection(self) -> sqlite3.Connection:
        """The writer thread's own connection (the file is already a store in WAL mode)."""
        conn = sqlite3.connect(str(self.path), timeout=BUSY_TIMEOUT_S, isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA synchronous = NORMAL")
        return conn

    @staticmethod
    def _commit(statements: Sequence[tuple[str, Sequence[Any]]], db: sqlite3.Connection) -> None:
        db.execute("BEGIN IMMEDIATE")
        try:
            i = 0
            while i < len(statements):  # runs of the same statement go out together
                sql = statements[i][0]
                j = i
                while j < len(statements) and statements[j][0] == sql:
                    j += 1
                rows = [p for _, p in statements[i:j]]
                if sql == _INSERT_EVENT:
                    RunStore._insert_events(rows, db)
                else:
                    db.executemany(sql, rows)
                i = j
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:  # SQLite rolls back itself on a full disk
                db.execute("ROLLBACK")
            raise

    @staticmethod
    def _insert_events(rows: Sequence[Sequence[Any]], db: sqlite3.Connection) -> None:
        # One multi-row INSERT per chunk instead of one statement per row.
        for k in range(0, len(rows), _EVENT_CHUNK):
            chunk = rows[k : k + _EVENT_CHUNK]
            values = ", ".join(["(?, ?, ?, ?, ?)"] * len(chunk))
            flat = [v for row in chunk for v in row]
            db.execute(f"INSERT INTO events (run_id, seq, time, kind, data) VALUES {values}", flat)

    def flush(self) -> None:
        """Wait until every write made so far is committed.

        Raises:
            sqlite3.Error: a deferred write failed (it and the writes after it were not made).
        """
        if self._pending:
            self._drain()
        self._wait_handed()
        if self._write_error is not None:
            raise self._write_error

    def _wait_handed(self) -> None:
        """Wait until the writer thread committed every batch handed to it (errors: kept, not raised)."""
        while self._handed:
            self._handed.pop(0).exception()

    def _write(self, sql: str, params: Sequence[Any]) -> None:
        if not self._deferred:
            self._execute(sql, params)
            return
        if self._write_error is not None:
            raise self._write_error
        self._pending.append((sql, params))
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop in this thread: nothing to gather with, commit now
            self._drain()
            self._wait_handed()  # committed when the call returns, as without a writer thread
            return
        if self._scheduled_on is not loop:  # (a loop that ended before its drain ran counts as none)
            self._scheduled_on = loop
            loop.call_later(_GATHER_S, self._drain)

    def _version(self) -> int:
        row = self._db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
        ).fetchone()
        if row is None:
            return 0
        found = self._db.execute("SELECT MAX(version) FROM schema_version").fetchone()
        return int(found[0] or 0)

    def _migrate(self, must_exist: bool) -> None:
        version = self._version()
        if version > SCHEMA_VERSION:
            raise UsageError(
                f"{self.path} has store schema {version}; this moot reads up to {SCHEMA_VERSION}: "
                "upgrade moot"
            )
        if version == SCHEMA_VERSION:
            return
        try:
            self._upgrade()
        except sqlite3.OperationalError:
            if not must_exist:
                raise
            # A store this process may not write (read-only file or folder): read it as it is;
            # search then looks at titles only.

    def _upgrade(self) -> None:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")  # one process migrates; the others wait, then see it done
            try:
                self._db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
                for number in range(self._version() + 1, SCHEMA_VERSION + 1):
                    for statement in MIGRATIONS[number]:
                        self._db.execute(statement)
                    self._db.execute("INSERT INTO schema_version (version) VALUES (?)", (number,))
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:  # SQLite rolls back itself on a full disk
                    self._db.execute("ROLLBACK")
                raise

    @property
    def schema_version(self) -> int:
        """The schema version of the file."""
        with self._lock:
            return self._version()

    def close(self) -> None:
        """Commit what is queued, stop the writer thread and close the connections."""
        try:
            self.flush()
        finally:
            if self._writer is not None:
                self._writer.close()
            with self._lock:
                self._db.close()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        self.flush()  # reads see every write queued before them
        with self._lock:
            try:
                return self._db.execute(sql, params)
            except sqlite3.DatabaseError as exc:  # a page too damaged to read, met after the open
                if "malformed" in str(exc):
                    raise UsageError(_damaged(self.path, str(exc))) from None
                raise

    # -- writing ------------------------------------------------------------------------------
    def create_run(
        self,
        kind: str,
        *,
        title: str = "",
        model: str = "",
        argv: Sequence[str] = (),
        config: dict[str, Any] | str | None = None,
        moot_version: str = "",
        run_id: str | None = None,
    ) -> str:
        """Insert a ``running`` run and return its id (``config``: a dict, or its JSON text).

        ``run_id`` names it (a debate's own id); None draws a new one.
        """
        run_id = run_id or new_id(32)
        config_text = redact.text(
            config if isinstance(config, str) else json.dumps(config or {}, ensure_ascii=False, default=str)
        )
        row = (
            run_id,
            kind,
            redact.text(title),
            redact.text(model),
            time.time(),
            _HOST,
            os.getpid(),
            json.dumps(redact.argv(list(argv)), ensure_ascii=False),
            config_text,
            moot_version,
        )
        columns = "id, kind, status, title, model, started_at, host, pid, argv, config, moot_version"
        if self._sealed:  # the digest of the text stored: a later edit of it shows
            values = "?, ?, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?"
            self._write(
                f"INSERT INTO runs ({columns}, config_sha256) VALUES ({values})", (*row, _digest(config_text))
            )
        else:
            self._write(f"INSERT INTO runs ({columns}) VALUES (?, ?, 'running', ?, ?, ?, ?, ?, ?, ?, ?)", row)
        return run_id

    def append_event(self, run_id: str, seq: int, kind: str, data_json: str, at: float | None = None) -> None:
        """Append one event (``data_json`` is a JSON object's text); committed at once (or queued)."""
        self._write(
            _INSERT_EVENT, (run_id, seq, time.time() if at is None else at, kind, redact.text(data_json))
        )

    def put_item(
        self, run_id: str, item: str, part: str, data_json: str, *, correct: bool | None = None
    ) -> None:
        """Record one item outcome (a later one for the same ``(item, part)`` replaces it).

        Items are numbered in the order they were recorded (``seq``): a replaced one takes the next number.
        """
        data = redact.text(data_json)
        row = (run_id, item, part, run_id, time.time(), None if correct is None else int(correct), data)
        if self._sealed:
            self._write(
                "INSERT OR REPLACE INTO items (run_id, item, part, seq, time, correct, data, data_sha256) "
                "VALUES (?, ?, ?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM items WHERE run_id = ?), "
                "?, ?, ?, ?)",
                (*row, _digest(data)),
            )
            return
        self._write(
            "INSERT OR REPLACE INTO items (run_id, item, part, seq, time, correct, data) VALUES "
            "(?, ?, ?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM items WHERE run_id = ?), ?, ?, ?)",
            row,
        )

    def update(
        self,
        run_id: str,
        *,
        status: RunStatus | None = None,
        usage: Usage | None = None,
        result_json: str | None = None,
        summary: dict[str, Any] | None = None,
        score: float | None = None,
        error: str | None = None,
        ended: bool = False,
        title: str | None = None,
    ) -> None:
        """Change fields of a run; only the arguments given are written."""
        sets: list[str] = []
        params: list[Any] = []
        fields: dict[str, Any] = {"status": status, "result": result_json, "score": score, "error": error}
        fields["title"] = title
        if summary is not None:
            fields["summary"] = json.dumps(summary, ensure_ascii=False, default=str)
        for name in ("result", "error", "title", "summary"):  # text from outside may hold a credential
            if fields.get(name) is not None:
                fields[name] = redact.text(fields[name])
        if self._sealed and fields["result"] is not None:
            fields["result_sha256"] = _digest(fields["result"])
        if usage is not None:
            fields |= {
                "calls": usage.calls,
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
            }
            if self._columns.endswith("attempts, cached"):
                fields |= {"attempts": usage.attempts, "cached": usage.cached}
        if ended:
            fields["ended_at"] = time.time()
        for name, value in fields.items():
            if value is not None:
                sets.append(f"{name} = ?")
                params.append(value)
        if sets:
            self._write(f"UPDATE runs SET {', '.join(sets)} WHERE id = ?", (*params, run_id))

    def reopen(self, run_id: str) -> int:
        """Mark a run ``running`` again in this process (a resumed bench); returns its last event seq."""
        self._write(
            "UPDATE runs SET status = 'running', ended_at = NULL, error = NULL, host = ?, pid = ? "
            "WHERE id = ?",
            (_HOST, os.getpid(), run_id),
        )
        return self.counts(run_id)[0]

    def exists(self, run_id: str) -> bool:
        """True when a run with exactly this id is stored."""
        return self._execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is not None

    def item_keys(self, run_id: str) -> set[tuple[str, str]]:
        """``(item, part)`` of every item recorded for the run."""
        rows = self._execute("SELECT item, part FROM items WHERE run_id = ?", (run_id,)).fetchall()
        return {(str(i), str(p)) for i, p in rows}

    def delete(self, run_id: str) -> str:
        """Delete a run with its events and items; returns the full id.

        Raises:
            UsageError: no such run, or an ambiguous prefix.
        """
        full = self.resolve_id(run_id)  # (which also flushes queued writes)
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for table in ("events", "items"):
                    self._db.execute(f"DELETE FROM {table} WHERE run_id = ?", (full,))
                self._db.execute("DELETE FROM runs WHERE id = ?", (full,))
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:  # SQLite rolls back itself on a full disk
                    self._db.execute("ROLLBACK")
                raise
        return full

    # -- reading ------------------------------------------------------------------------------
    def resolve_id(self, run_id: str) -> str:
        """The full id of the run ``run_id`` names (the id or a unique prefix of at least 4 digits).

        Raises:
            UsageError: no such run, or the prefix names several.
        """
        text = run_id.strip().lower()
        if len(text) < 4 or any(c not in "0123456789abcdef" for c in text):
            raise UsageError(f"no run {run_id!r} in {self.path} (ids are hex; give at least 4 digits)")
        rows = self._execute("SELECT id FROM runs WHERE id >= ? AND id < ? LIMIT 2", (text, text + "g"))
        found = [r[0] for r in rows.fetchall()]
        if not found:
            raise UsageError(f"no run {run_id!r} in {self.path}")
        if len(found) > 1:
            raise UsageError(f"run id prefix {run_id!r} is ambiguous in {self.path}; give more digits")
        return str(found[0])

    @staticmethod
    def _record(row: sqlite3.Row | tuple[Any, ...], with_result: bool) -> RunRecord:
        (rid, kind, status, title, model, started, ended, host, pid, argv, config, version) = row[:12]
        calls, prompt, completion, score, summary, error, attempts, cached = row[12:20]
        if status == "running" and not _alive(host, pid):
            status, error = "interrupted", error or "the process ended without finishing the run"
        damage: builtins.list[str] = []
        argv_list = _load(argv, "argv", [], damage)
        config_data = _load(config, "config", {}, damage)
        summary_data = _load(summary, "summary", {}, damage)
        result = _load(row[20], "result", None, damage) if with_result else None
        for what, value, kind_ in (("argv", argv_list, list), ("config", config_data, dict)):
            if not isinstance(value, kind_):
                damage.append(f"its {what} is not a JSON {'array' if kind_ is list else 'object'}")
        integrity: Integrity | None = None
        edited: builtins.list[str] = []
        if with_result:  # row[21:23]: the digests (None in a store older than schema 9)
            digests = row[21:23] if len(row) >= 23 else (None, None)
            integrity, edited = _check([("config", config, digests[0]), ("result", row[20], digests[1])])
        return RunRecord(
            id=rid,
            kind=kind,
            status=status,
            title=redact.text(title),
            model=redact.text(model),
            started_at=started,
            ended_at=ended,
            host=host,
            pid=pid,
            argv=redact.argv(argv_list) if isinstance(argv_list, list) else [],
            config=config_data if isinstance(config_data, dict) else {},
            moot_version=version,
            usage=Usage(
                calls=calls,
                prompt_tokens=prompt,
                completion_tokens=completion,
                attempts=attempts,
                cached=cached,
            ),
            score=score,
            summary=summary_data if isinstance(summary_data, dict) else {},
            result=result,
            error=None if error is None else redact.text(error),
            damage=f"run {rid[:8]} is damaged: " + "; ".join(damage) if damage else None,
            integrity=integrity,
            edited=edited,
        )

    def get(self, run_id: str) -> RunRecord:
        """One run, with its result.

        Raises:
            UsageError: no such run, or an ambiguous prefix.
        """
        full = self.resolve_id(run_id)
        digests = ", config_sha256, result_sha256" if self._sealed else ""
        row = self._execute(
            f"SELECT {self._columns}, result{digests} FROM runs WHERE id = ?", (full,)
        ).fetchone()
        return self._record(row, True)

    def replayable(self, run_id: str, *, trust_edited: bool = False) -> RunRecord:
        """One run with its result, checked before a replay or a re-run uses it.

        An ABSA batch's items are checked too (:func:`moot.runs.integrity.check_record`).

        Raises:
            UsageError: no such run, an ambiguous prefix, a damaged record, or one edited after it
                was recorded (unless ``trust_edited``), naming what changed.
        """
        record = self.get(run_id)
        items: builtins.list[StoredItem] = []
        if record.damage is None and record.kind == "absa" and record.config.get("batch"):
            items = builtins.list(self.iter_items(record.id))
        check_record(record, trust_edited=trust_edited, items=items)
        return record

    def _where(
        self, kind: str | None, status: str | None, model: str | None, search: str | None
    ) -> tuple[str, builtins.list[Any]]:
        """The WHERE clause (with its leading keyword, or empty) and parameters for these filters."""
        where: builtins.list[str] = []
        params: builtins.list[Any] = []
        if kind:
            where.append("kind = ?")
            params.append(kind)
        if status:  # a dead process's `running` run reads as interrupted: both checked again in Python
            where.append("status IN ('running', 'interrupted')" if status in _LIVE else "status = ?")
            params.extend([] if status in _LIVE else [status])
        if model:
            where.append("instr(lower(model), ?) > 0")
            params.append(model.lower())
        words = _WORD.findall((search or "").lower())
        if words and self._has_search():
            numbered = self._numbered()
            where.append(f"{'num' if numbered else 'id'} IN (SELECT value FROM json_each(?))")
            params.append(self._matching(tuple(words), numbered))
        elif words:  # a store read as it is, without the index: titles only
            where.extend(["instr(lower(title), ?) > 0"] * len(words))
            params.extend(words)
        return (" WHERE " + " AND ".join(where)) if where else "", params

    def _matching(self, words: tuple[str, ...], numbered: bool) -> str:
        """The runs holding every word (as a word or a word's start), as a JSON array.

        Of their numbers (``runs.num``), or with ``numbered`` False of their ids (a store older
        than schema 7 read as it is).

        A page asks twice (its rows, then the total): the last answer is kept until the file changes.
        """
        with self._lock:
            key = (words, self._db.execute("PRAGMA data_version").fetchone()[0], self._db.total_changes)
        if self._found is not None and self._found[0] == key:
            return self._found[1]
        column = "run" if numbered else "run_id"
        one = f"SELECT d.{column} FROM search JOIN search_docs d ON d.doc = search.rowid WHERE search MATCH ?"
        sql = " INTERSECT ".join([one] * len(words))
        rows = self._execute(sql, [f'body : "{w}"*' for w in words]).fetchall()
        found = json.dumps([r for (r,) in rows])
        self._found = (key, found)
        return found

    def _numbered(self) -> bool:
        """Whether runs and search rows carry run numbers (schema 7 on)."""
        if self._numbers is None:
            with self._lock:
                self._numbers = self._version() >= 7
        return self._numbers

    def _has_search(self) -> bool:
        if self._search is None:
            row = self._execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'search_docs'")
            self._search = row.fetchone() is not None
        return self._search

    def list(
        self,
        *,
        kind: str | None = None,
        status: str | None = None,
        model: str | None = None,
        search: str | None = None,
        limit: int | None = None,
        offset: int = 0,
        sort: Literal["time", "cost", "score"] = "time",
    ) -> builtins.list[RunRecord]:
        """Runs, newest first (or by cost or score, highest first), without their results.

        ``model`` matches a substring of the model spec; ``search`` finds runs holding every word
        of it (as a word or a word's start) in their title, turns, prompts or items. ``limit``
        and ``offset`` page through the runs (:meth:`count` says how many match).
        """
        where, params = self._where(kind, status, model, search)
        order = {
            "time": "started_at DESC",
            "cost": "(prompt_tokens + completion_tokens) DESC, started_at DESC",
            "score": "score IS NULL, score DESC, started_at DESC",
        }[sort]
        sql = f"SELECT {self._columns} FROM runs{where} ORDER BY {order}"
        if status in _LIVE:  # few rows, filtered after the liveness check: page in Python
            runs = [
                r for r in map(self._record_row, self._execute(sql, params).fetchall()) if r.status == status
            ]
            return runs[offset : None if limit is None else offset + limit]
        if limit is not None or offset:
            # The page's rows are chosen first, reading only what they are filtered and sorted by;
            # then only they are read whole (a search matching 1,000 runs: 10.7 -> 2.3 ms of CPU).
            page = f"SELECT rowid FROM runs{where} ORDER BY {order} LIMIT ? OFFSET ?"
            sql = f"SELECT {self._columns} FROM runs WHERE rowid IN ({page}) ORDER BY {order}"
            params += [-1 if limit is None else limit, offset]
        runs = [self._record_row(row) for row in self._execute(sql, params).fetchall()]
        if status:
            runs = [r for r in runs if r.status == status]
        return runs

    def count(
        self,
        *,
        kind: str | None = None,
        status: str | None = None,
        model: str | None = None,
        search: str | None = None,
    ) -> int:
        """How many runs :meth:`list` finds with these filters (every page together)."""
        if status in _LIVE:
            return len(self.list(kind=kind, status=status, model=model, search=search))
        where, params = self._where(kind, status, model, search)
        return int(self._execute(f"SELECT COUNT(*) FROM runs{where}", params).fetchone()[0])

    def models(self) -> builtins.list[str]:
        """Every model spec a run recorded, sorted."""
        rows = self._execute("SELECT DISTINCT model FROM runs ORDER BY model").fetchall()
        return [str(m) for (m,) in rows]

    def _record_row(self, row: tuple[Any, ...]) -> RunRecord:
        return self._record(row, False)

    def events(self, run_id: str, *, after: int = 0) -> builtins.list[StoredEvent]:
        """The run's events with ``seq > after``, in order."""
        rows = self._execute(
            "SELECT seq, time, kind, data FROM events WHERE run_id = ? AND seq > ? ORDER BY seq",
            (run_id, after),
        ).fetchall()
        return [
            StoredEvent(seq=s, time=t, kind=k, data=_row_data(run_id, f"event {s}", d)) for s, t, k, d in rows
        ]

    def iter_items(self, run_id: str) -> Iterator[StoredItem]:
        """The run's items in the order they were first recorded."""
        digest = "data_sha256" if self._sealed else "NULL"
        rows = self._execute(
            f"SELECT item, part, seq, time, correct, data, {digest} FROM items WHERE run_id = ? ORDER BY seq",
            (run_id,),
        ).fetchall()
        for item, part, seq, at, correct, data, sha in rows:
            yield StoredItem(
                item=item,
                part=part,
                seq=seq,
                time=at,
                correct=None if correct is None else bool(correct),
                data=_row_data(run_id, f"item {item!r}" + (f" ({part})" if part else ""), data),
                integrity=_check([("data", data, sha)])[0],
            )

    def counts(self, run_id: str) -> tuple[int, int]:
        """``(events, items)`` recorded so far (cheap; live pages poll it)."""
        ev = self._execute("SELECT COALESCE(MAX(seq), 0) FROM events WHERE run_id = ?", (run_id,)).fetchone()
        it = self._execute("SELECT COUNT(*) FROM items WHERE run_id = ?", (run_id,)).fetchone()
        return int(ev[0]), int(it[0])

    def live_usage(self, run_id: str) -> Usage:
        """Calls and tokens recorded so far by a run still going (its row has them only at the end).

        The sum of every stored turn's usage (``turn.usage`` of an event) and every item's
        (``calls``/``prompt_tokens``/``completion_tokens`` of a bench unit, ``result.usage`` of
        an ABSA sentence): what the store holds, as a finished run would count it.
        """
        totals = [0, 0, 0]
        for table, paths in (("events", ("$.turn.usage.",)), ("items", ("$.", "$.result.usage."))):
            fields = ", ".join(
                "SUM(COALESCE(" + ", ".join(f"json_extract(data, '{p}{name}')" for p in paths) + ", 0))"
                for name in ("calls", "prompt_tokens", "completion_tokens")
            )
            row = self._execute(f"SELECT {fields} FROM {table} WHERE run_id = ?", (run_id,)).fetchone()
            totals = [t + int(v or 0) for t, v in zip(totals, row, strict=True)]
        return Usage(calls=totals[0], prompt_tokens=totals[1], completion_tokens=totals[2])
