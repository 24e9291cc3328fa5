"""A response cache: a model reply is paid for once, then served from a SQLite file.

:class:`ResponseCache` holds replies keyed by everything that makes a reply what it is:

- the model (its ``provider:model`` name) and the endpoint(s) it talks to;
- the exact messages, the response format and its JSON schema;
- every generation parameter (``temperature``, ``max_tokens``, ``seed``, ``n``);
- who asks (the request's ``speaker``, ``round`` and ``phase`` metadata) and a **sample
  index**: the k-th identical request from the same asker in one process is sample k, so
  ``vote:5``'s five samples at temperature 1 stay five cached replies and a re-run gets each
  of them back in the same place. A request that names its own ``sample`` in its metadata
  uses that.

The key is a SHA-256 of these parts: no message text, no endpoint URL (which may carry a
credential) and no header is stored beside a reply. Only answered requests are cached:
errors, cut-off replies (``finish_reason == "length"``) and cancelled requests never are.

:class:`CachedModel` wraps any :class:`~moot.models.Model`; a reply served from the cache
counts as ``usage.cached``, not as a call or an attempt, so ``usage.calls`` stays the number
of requests a model served and reconciles with its server's log.

Several processes may share one cache file: writes are single SQLite transactions in WAL
mode (``synchronous=NORMAL``: no fsync per stored reply) with a busy timeout, and two processes
creating the same new file at once both succeed. Every read and write runs on a thread of the
cache's own, so an event loop never waits for the file. A file that is not a moot cache, one
written by another format version, or a damaged one (``PRAGMA quick_check`` when it is opened)
is refused with a message naming it, before any work, and left untouched. An entry that cannot
be read is a miss (counted in ``unreadable``, said once on stderr), never an error.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import sys
import threading
import time
import weakref
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ..errors import UsageError
from ._sqlite import BUSY_TIMEOUT_S, DbThread, is_locked, retry_locked, set_wal
from .base import Model, ModelRequest, ModelResponse, Usage, note_cached_reply
from .limits import Gate
from .pricing import Pricing, price_usage

__all__ = [
    "CACHE_ENV",
    "activate_cache",
    "cache_scope",
    "CacheStats",
    "CachedModel",
    "ResponseCache",
    "current_cache",
    "default_cache_path",
    "open_cache",
    "parse_age",
    "use_cache",
    "with_cache",
]

CACHE_ENV = "MOOT_CACHE"
"""Environment variable naming the cache file used by ``--cache`` / ``cache=True``."""

_FORMAT = 1
"""The cache file's format version (``PRAGMA user_version``); another version is refused."""
_APPLICATION_ID = 0x6D6F6F63  # "mooc": marks a SQLite file as a moot response cache
_SCHEMA = """
CREATE TABLE IF NOT EXISTS replies (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    created REAL NOT NULL,
    response BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS replies_created ON replies(created);
"""
_QUICK_CHECK_BYTES = 64 * 1024 * 1024
"""Cache files up to this size get ``PRAGMA quick_check`` when opened (a few ms a MB)."""


def default_cache_path() -> Path:
    """``$MOOT_CACHE`` if set, else ``./.moot/cache.db``."""
    return Path(os.environ.get(CACHE_ENV, "").strip() or Path(".moot") / "cache.db")


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}


def parse_age(text: str) -> float:
    """Seconds in an age such as ``90s``, ``30m``, ``12h``, ``7d`` or ``2w`` (a bare number: seconds).

    Raises:
        UsageError: not a positive age.
    """
    raw = text.strip().lower()
    unit = raw[-1:] if raw[-1:] in _UNITS else "s"
    number = raw[:-1] if raw[-1:] in _UNITS else raw
    try:
        value = float(number) * _UNITS[unit]
    except ValueError:
        value = -1.0
    if not value > 0:
        raise UsageError(f"not an age: {text!r} (use e.g. 90s, 30m, 12h, 7d, 2w)")
    return value


@dataclass(frozen=True)
class CacheStats:
    """What a cache file holds."""

    path: Path
    """The cache file."""
    entries: int
    """Cached replies."""
    bytes: int
    """Size of the file on disk (the database and its WAL)."""
    oldest: float | None
    """Unix time of the oldest entry, or None when empty."""
    newest: float | None
    """Unix time of the newest entry, or None when empty."""
    models: dict[str, int]
    """Entries per model name."""


class ResponseCache:
    """Model replies in a SQLite file, shared safely by concurrent processes.

    Every statement runs on one thread of the cache's own (:class:`~moot.models._sqlite.DbThread`,
    with its own connection): :class:`CachedModel` awaits it, so an event loop serving other
    debates never waits for the file (a read, a commit, another process's lock).

    Args:
        path: the cache file (created with its folder when missing).
        expiry_s: entries older than this many seconds are ignored (and replaced when the
            request is made again); None keeps them forever.

    Raises:
        UsageError: the file exists but is not a moot cache, has another format version, or is
            damaged (``PRAGMA quick_check`` finds a problem): refused before any work, untouched.
    """

    def __init__(self, path: str | Path, *, expiry_s: float | None = None) -> None:
        self.path = Path(path)
        self.expiry_s = expiry_s
        self.hits = 0
        """Replies served from the cache by this object."""
        self.misses = 0
        """Requests this object sent on to the model."""
        self.unreadable = 0
        """Entries that could not be read (a damaged row or page): each counted as a miss."""
        self.unwritten = 0
        """Replies that could not be stored (a damaged page, a full disk): the call still answered."""
        self._lock = threading.Lock()
        self._seen: defaultdict[str, int] = defaultdict(int)
        self._said: set[str] = set()
        if not self.path.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = DbThread(f"moot-cache:{self.path.name}", self._connect)
        try:
            self._db.call(lambda conn: None)  # opened, checked and prepared now: errors before any work
        except BaseException:
            self._db.close()
            raise
        weakref.finalize(self, self._db.close)  # a cache dropped unclosed ends its thread

    def _connect(self) -> sqlite3.Connection:
        """The cache thread's connection: the file checked, made a cache if new, in WAL mode."""
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        try:
            conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
            retry_locked(lambda: self._prepare(conn))
            set_wal(conn, synchronous="NORMAL")
        except sqlite3.DatabaseError as err:
            conn.close()
            if is_locked(err):
                raise UsageError(
                    f"{self.path} stayed locked by another process for {BUSY_TIMEOUT_S:.0f} s"
                ) from None
            raise UsageError(self._damaged(str(err))) from None
        except BaseException:
            conn.close()
            raise
        return conn

    def _damaged(self, detail: str) -> str:
        if "not a database" in detail:
            return f"{self.path} is not a moot response cache ({detail}); give another --cache-file"
        return (
            f"{self.path} is a damaged response cache (SQLite: {detail}); delete it (it holds only "
            "cached replies: moot starts a new one there) or give another --cache-file"
        )

    def _prepare(self, conn: sqlite3.Connection) -> None:
        """Refuse a file that is not a cache or is damaged; make an empty one a cache (idempotent)."""
        # The marks are read inside a write transaction: a process making the same new file a
        # cache at the same moment is waited for, never seen half-made (a race of two first opens).
        conn.execute("BEGIN IMMEDIATE")
        try:
            new = self._read_marks(conn) is None
            if new:
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(f"PRAGMA application_id={_APPLICATION_ID}")
                conn.execute(f"PRAGMA user_version={_FORMAT}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        if not new and self.path.stat().st_size <= _QUICK_CHECK_BYTES:
            problems = [str(r[0]) for r in conn.execute("PRAGMA quick_check(3)").fetchall()]
            if problems != ["ok"]:
                raise UsageError(self._damaged("; ".join(problems)))

    def _read_marks(self, conn: sqlite3.Connection) -> int | None:
        """The file's format version, None for an empty database; refuse anything else."""
        try:
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        except sqlite3.DatabaseError as err:
            if is_locked(err):
                raise
            raise UsageError(self._damaged(str(err))) from err
        if app_id == 0 and tables == 0:
            return None
        if app_id != _APPLICATION_ID:
            raise UsageError(f"{self.path} is not a moot response cache; give another --cache file")
        if version != _FORMAT:
            raise UsageError(
                f"{self.path} is a moot response cache of format {version}, this moot reads format "
                f"{_FORMAT}; delete it or give another file"
            )
        return version

    def _say_once(self, what: str, line: str) -> None:
        """One warning on stderr per kind of trouble and cache (the counts say how many)."""
        if what not in self._said:
            self._said.add(what)
            print(f"moot: warning: {line}", file=sys.stderr)

    def next_sample(self, base: str) -> int:
        """The sample index of one more request with key ``base`` in this process (0, 1, ...)."""
        with self._lock:
            sample = self._seen[base]
            self._seen[base] += 1
        return sample

    def close(self) -> None:
        """Finish what was given to the cache's thread, close the file and end the thread."""
        self._db.close()

    # -- reads and writes, on the cache's thread -------------------------------------------------
    def _get(self, conn: sqlite3.Connection, key: str) -> ModelResponse | None:
        try:
            row = conn.execute("SELECT created, response FROM replies WHERE key = ?", (key,)).fetchone()
        except sqlite3.DatabaseError as err:  # a damaged page met after the open, or locked for 30 s
            self._unreadable(f"SQLite: {err}")
            return None
        if row is None:
            return None
        created, blob = row
        if self.expiry_s is not None and time.time() - created > self.expiry_s:
            return None
        try:
            return ModelResponse.model_validate_json(blob)
        except ValueError as err:  # pydantic's ValidationError: garbage written into the entry
            self._unreadable(f"not a reply: {str(err).splitlines()[0]}")
            return None

    def _unreadable(self, detail: str) -> None:
        self.unreadable += 1
        self._say_once(
            "read",
            f"the response cache {self.path} has an unreadable entry ({detail}); it counts as a miss "
            "and the model is asked (later ones are counted, not said)",
        )

    def _put(self, conn: sqlite3.Connection, key: str, model: str, blob: bytes) -> None:
        try:
            conn.execute(
                "INSERT OR REPLACE INTO replies (key, model, created, response) VALUES (?, ?, ?, ?)",
                (key, model, time.time(), blob),
            )
        except sqlite3.DatabaseError as err:  # the reply is the caller's either way: said, not raised
            self.unwritten += 1
            self._say_once(
                "write",
                f"cannot store a reply in the response cache {self.path} (SQLite: {err}); "
                "the run goes on without caching it (later ones are counted, not said)",
            )

    def get(self, key: str) -> ModelResponse | None:
        """The cached reply for ``key``, or None (missing, expired or unreadable: a miss)."""
        return self._db.call(lambda conn: self._get(conn, key))

    async def aget(self, key: str) -> ModelResponse | None:
        """:meth:`get`, awaited on the cache's thread (the event loop goes on meanwhile)."""
        return await self._db.acall(lambda conn: self._get(conn, key))

    def put(self, key: str, model: str, response: ModelResponse) -> None:
        """Store ``response`` under ``key`` (replacing an expired entry)."""
        blob = response.model_dump_json().encode()
        self._db.call(lambda conn: self._put(conn, key, model, blob))

    async def aput(self, key: str, model: str, response: ModelResponse) -> None:
        """:meth:`put`, awaited on the cache's thread (the event loop goes on meanwhile).

        Stored when it returns (another cache object or process sees it); a failure is said once
        on stderr (``unwritten`` counts them), never raised: the reply is the caller's either way.
        """
        blob = response.model_dump_json().encode()
        await self._db.acall(lambda conn: self._put(conn, key, model, blob))

    def stats(self) -> CacheStats:
        """Entries, bytes on disk, the oldest and newest entry, entries per model."""

        def read(conn: sqlite3.Connection) -> tuple[Any, dict[str, int]]:
            totals = conn.execute("SELECT count(*), min(created), max(created) FROM replies").fetchone()
            return totals, dict(conn.execute("SELECT model, count(*) FROM replies GROUP BY model").fetchall())

        (entries, oldest, newest), models = self._db.call(read)
        size = sum(p.stat().st_size for p in (self.path, Path(f"{self.path}-wal")) if p.exists())
        return CacheStats(self.path, entries, size, oldest, newest, models)

    def clear(self) -> int:
        """Remove every entry; returns how many there were."""

        def clear(conn: sqlite3.Connection) -> int:
            removed = conn.execute("DELETE FROM replies").rowcount
            conn.execute("VACUUM")
            return int(removed)

        return self._db.call(clear)

    def prune(self, older_than_s: float) -> int:
        """Remove entries older than ``older_than_s`` seconds; returns how many."""
        cutoff = time.time() - older_than_s
        return self._db.call(
            lambda conn: int(conn.execute("DELETE FROM replies WHERE created < ?", (cutoff,)).rowcount)
        )


def open_cache(
    cache: str | Path | ResponseCache | bool | None, *, expiry_s: float | None = None
) -> ResponseCache | None:
    """A cache from a door's ``cache=`` argument.

    ``None`` or ``False``: no cache. ``True``: :func:`default_cache_path` (``$MOOT_CACHE`` or
    ``./.moot/cache.db``). A path: that file. A :class:`ResponseCache` is used as it is.
    """
    if cache is None or cache is False:
        return None
    if isinstance(cache, ResponseCache):
        return cache
    return ResponseCache(default_cache_path() if cache is True else cache, expiry_s=expiry_s)


def _identity(model: Model) -> Any:
    """What names the server behind ``model``: its name and its endpoints (hashed, never stored)."""
    endpoints = getattr(model, "endpoints", None) or getattr(model, "base_url", None)
    return [model.name, endpoints if isinstance(endpoints, str | list | tuple) else None]


_ASKER_KEYS = ("speaker", "round", "phase", "item")


class CachedModel(Model):
    """``inner`` behind a :class:`ResponseCache`: each distinct request is sent once, ever.

    The wrapper has the inner model's name, speed, timeout and concurrency gate, so deadlines
    and limits behave as without it; a hit waits for nothing but the cache file.
    """

    def __init__(self, inner: Model, cache: ResponseCache) -> None:
        super().__init__()
        self.inner = inner
        self.cache = cache
        self.name = inner.name
        self.max_concurrency = inner.max_concurrency
        self.request_timeout = inner.request_timeout
        self.tokens_per_second = inner.tokens_per_second
        self.supports_n = inner.supports_n
        self._identity = _identity(inner)

    def gate(self) -> Gate | None:
        """The inner model's gate: a cache never lets more requests reach a server than without it."""
        return self.inner.gate()

    def pause_left(self) -> float:
        """The inner model's (its endpoints' Retry-After pause)."""
        return self.inner.pause_left()

    def paced(self) -> bool:
        """The inner model's (its endpoints' rate schedule)."""
        return self.inner.paced()

    def endpoint_stats(self) -> list[dict[str, object]]:
        """The inner model's endpoints."""
        return self.inner.endpoint_stats()

    async def expected_speed(self) -> float | None:
        """The inner model's."""
        return await self.inner.expected_speed()

    async def aclose(self) -> None:
        """Close the inner model's loop-bound resources."""
        await self.inner.aclose()

    def count_tokens(self, text: str) -> int | None:
        """The inner model's tokenizer."""
        return self.inner.count_tokens(text)

    def key(self, request: ModelRequest) -> str:
        """The cache key of ``request`` (the sample index is assigned here, once per request)."""
        asker = {k: request.metadata.get(k) for k in _ASKER_KEYS if k in request.metadata}
        parts = [
            self._identity,
            [[m.role, m.content] for m in request.messages],
            request.schema_name if request.json_schema is not None else None,
            request.json_schema,
            request.max_tokens,
            request.temperature,
            request.seed,
            request.n,
            asker,
            request.metadata.get("attempt"),
        ]
        base = hashlib.sha256(orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)).hexdigest()
        sample = request.metadata.get("sample")
        if sample is None:
            sample = self.cache.next_sample(base)
        return hashlib.sha256(f"{base}:{sample}".encode()).hexdigest()

    async def request(self, request: ModelRequest) -> ModelResponse:
        """A cached reply (counted as ``usage.cached``), else the inner model's, then cached."""
        key = self.key(request)
        hit = await self.cache.aget(key)
        if hit is not None:
            self.cache.hits += 1
            note_cached_reply()
            # Served by no model: no call, no attempt, no tokens billed; counted as cached, costs 0.
            return hit.model_copy(update={"usage": Usage(cached=1, cost_source="cache")})
        self.cache.misses += 1
        response = await self.inner.request(request)
        # A reply cut at max_tokens is not what the model would say: never served again.
        if response.finish_reason != "length" and all(s.finish_reason != "length" for s in response.samples):
            await self.cache.aput(key, self.name, response)
        return response.model_copy(update={"usage": price_usage(self.inner, response.usage)})

    def pricing(self) -> Pricing:
        """The inner model's (a hit says ``cache`` and costs 0 on its own)."""
        return self.inner.pricing()

    def known_window(self) -> int | None:
        """The inner model's context window, when known without asking."""
        return self.inner.known_window()

    async def window(self) -> int | None:
        """The inner model's context window."""
        return await self.inner.window()


_CURRENT: ContextVar[ResponseCache | None] = ContextVar("moot_response_cache", default=None)


def current_cache() -> ResponseCache | None:
    """The cache set by the innermost :func:`use_cache`, or None."""
    return _CURRENT.get()


@contextmanager
def use_cache(cache: ResponseCache | None) -> Iterator[ResponseCache | None]:
    """Within the block, every model :func:`~moot.models.resolve_model` returns answers from ``cache``.

    How a door's ``cache=`` (and the CLI's ``--cache``) reaches every model a pipeline resolves,
    its own and its judges', without each passing it on. None: no cache (an outer one ends).
    """
    token = _CURRENT.set(cache)
    try:
        yield cache
    finally:
        _CURRENT.reset(token)


@contextmanager
def cache_scope(cache: str | Path | ResponseCache | bool | None) -> Iterator[ResponseCache | None]:
    """A door's ``cache=``: within the block every model resolved answers from that cache.

    None leaves things as they are (an enclosing :func:`use_cache` still applies); False turns
    caching off inside; anything else is opened with :func:`open_cache`.
    """
    if cache is None:
        yield current_cache()
        return
    opened = open_cache(cache)
    try:
        with use_cache(opened):
            yield opened
    finally:
        if opened is not None and opened is not cache:  # opened here from a path: closed here
            opened.close()


def activate_cache(cache: ResponseCache | None) -> None:
    """Make ``cache`` the current one for the rest of the current context (no block to close).

    For an application's entry point that runs each command in a context of its own (the
    ``moot`` command does): the setting ends with that context.
    """
    _CURRENT.set(cache)


def with_cache(model: Model, cache: ResponseCache | None) -> Model:
    """``model`` behind ``cache`` (unchanged when there is no cache or it is already wrapped)."""
    if cache is None or isinstance(model, CachedModel):
        return model
    return CachedModel(model, cache)
