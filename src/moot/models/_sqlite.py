"""SQLite files shared by processes and used from an event loop: safe first opens, I/O on a thread.

Two things every moot SQLite file (the response cache, the run store) needs:

- :func:`retry_locked`: creating a file and switching it to WAL races with other processes doing
  the same. ``PRAGMA journal_mode = WAL`` needs the file to itself and does not wait for the busy
  timeout (SQLite answers "database is locked" at once), so two processes opening a new file at
  the same moment failed. Each step of an open is idempotent (tables are made inside ``BEGIN
  IMMEDIATE``, which does wait): the step is tried again, with a growing random pause, until it
  succeeds or the busy timeout has passed.
- :class:`DbThread`: one thread that owns one connection and runs every statement given to it,
  in order. An event loop hands it work (:meth:`DbThread.acall`) and goes on serving other tasks
  while SQLite reads, writes or waits for another process's lock.
"""

from __future__ import annotations

import asyncio
import queue
import random
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar, cast

__all__ = ["BUSY_TIMEOUT_S", "DbThread", "is_locked", "retry_locked", "set_wal"]

T = TypeVar("T")

BUSY_TIMEOUT_S = 30.0
"""How long a moot SQLite file waits for another process's lock before giving up."""


def is_locked(exc: BaseException) -> bool:
    """True for SQLite's "database is locked" / "database table is locked" / busy errors."""
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in str(exc) or "busy" in str(exc))


def retry_locked(step: Callable[[], T], *, timeout_s: float = BUSY_TIMEOUT_S) -> T:
    """``step()``, tried again while SQLite says the file is locked, for up to ``timeout_s``.

    The pause between tries grows from 5 ms to 200 ms, with jitter so that processes that
    collided do not collide again in step. ``step`` must be safe to repeat.

    Raises:
        sqlite3.OperationalError: still locked after ``timeout_s`` (or any other SQLite error).
    """
    deadline = time.monotonic() + timeout_s
    pause = 0.005
    while True:
        try:
            return step()
        except sqlite3.OperationalError as exc:
            if not is_locked(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause * random.uniform(0.5, 1.5))
        pause = min(pause * 2, 0.2)


def set_wal(conn: sqlite3.Connection, *, synchronous: str = "NORMAL") -> None:
    """Put ``conn``'s file in WAL mode (once per file: it persists) and set ``synchronous`` for ``conn``.

    ``synchronous=NORMAL`` in WAL mode skips the fsync of each commit (a commit still survives
    the process; only an OS crash may drop the last ones) and is what SQLite recommends for WAL.
    """

    def switch() -> None:
        mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
        if mode != "wal":
            conn.execute("PRAGMA journal_mode = WAL").fetchone()

    retry_locked(switch)
    conn.execute(f"PRAGMA synchronous = {synchronous}")


_STOP = object()


def _deliver(results: list[tuple[asyncio.Future[object], bool, object]]) -> None:
    """On an event loop: hand each awaiting task its result (a task cancelled meanwhile gets none)."""
    for afut, ok, value in results:
        if afut.done():
            continue
        if ok:
            afut.set_result(value)
        else:
            afut.set_exception(cast(BaseException, value))


class DbThread:
    """A daemon thread owning one SQLite connection; every call given to it runs there, in order.

    Args:
        name: the thread's name (shown by debuggers and in thread dumps).
        connect: makes the connection, called once in the thread before the first call. An
            exception it raises is raised by that first call (and every later one).

    Calls run one at a time in the order given, so a write given before a read is seen by it.
    The thread is a daemon so that a process never hangs on it at exit; :meth:`close` waits for
    the calls given before it. The thread holds no reference to its owner once connected, so an
    owner dropped without closing can be collected (the owners close their thread then).
    """

    def __init__(self, name: str, connect: Callable[[], sqlite3.Connection]) -> None:
        self.name = name
        self._connect: Callable[[], sqlite3.Connection] | None = connect
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._closed = False

    def _main(self) -> None:
        conn, failure = self._open()
        while self._serve(conn, failure):
            pass
        if conn is not None:
            conn.close()

    def _open(self) -> tuple[sqlite3.Connection | None, BaseException | None]:
        connect, self._connect = self._connect, None  # the thread keeps no reference to its owner
        assert connect is not None
        try:
            return connect(), None
        except BaseException as exc:  # raised by each call, in the caller's thread
            return None, exc

    def _serve(self, conn: sqlite3.Connection | None, failure: BaseException | None) -> bool:
        """Run every call waiting (at least one); False once told to stop.

        Each event loop is woken once for all of its results: 100 cache lookups given together
        cost one wake-up of the loop, not 100. (A method of its own, so that nothing of the calls
        it ran stays referenced while the thread waits for the next ones.)
        """
        jobs = [self._queue.get()]
        while True:
            try:
                jobs.append(self._queue.get_nowait())
            except queue.Empty:
                break
        going = True
        woken: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[object], bool, object]]] = {}
        for job in jobs:
            if job is _STOP:
                going = False
                continue
            fn, target = cast("tuple[Callable[[sqlite3.Connection | None], object], object]", job)
            ok, value = self._run(fn, conn, failure)
            if isinstance(target, Future):
                if target.set_running_or_notify_cancel():
                    target.set_result(value) if ok else target.set_exception(cast(BaseException, value))
            else:
                loop, afut = cast("tuple[asyncio.AbstractEventLoop, asyncio.Future[object]]", target)
                woken.setdefault(loop, []).append((afut, ok, value))
        for loop, results in woken.items():
            try:
                loop.call_soon_threadsafe(_deliver, results)
            except RuntimeError:  # the loop was closed meanwhile: nobody awaits these any more
                pass
        return going

    @staticmethod
    def _run(
        fn: Callable[[sqlite3.Connection | None], object],
        conn: sqlite3.Connection | None,
        failure: BaseException | None,
    ) -> tuple[bool, object]:
        if failure is not None:
            return False, failure
        try:
            return True, fn(conn)
        except BaseException as exc:  # the caller gets it, the thread goes on
            return False, exc

    @property
    def thread(self) -> threading.Thread | None:
        """The thread, once the first call started it."""
        return self._thread

    def submit(self, fn: Callable[[sqlite3.Connection], T]) -> Future[T]:
        """Run ``fn(connection)`` on the thread; its future.

        Raises:
            RuntimeError: the thread was closed.
        """
        fut: Future[T] = Future()
        self._put((fn, fut))
        return fut

    def _put(self, job: tuple[Callable[[sqlite3.Connection], Any], object]) -> None:
        if self._closed:
            raise RuntimeError(f"{self.name} is closed")
        if self._thread is None:
            with self._start_lock:
                if self._thread is None:
                    thread = threading.Thread(target=self._main, name=self.name, daemon=True)
                    thread.start()
                    self._thread = thread
        self._queue.put(job)

    def call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn(connection)`` on the thread, waited for (from any thread but this one's own)."""
        return self.submit(fn).result()

    async def acall(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn(connection)`` on the thread, awaited: the event loop serves other tasks meanwhile."""
        loop = asyncio.get_running_loop()
        afut: asyncio.Future[T] = loop.create_future()
        self._put((fn, (loop, afut)))
        return await afut

    def close(self) -> None:
        """Run the calls given so far, close the connection and end the thread (idempotent)."""
        with self._start_lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
        if thread is not None:
            self._queue.put(_STOP)
            if thread is not threading.current_thread():
                thread.join()
