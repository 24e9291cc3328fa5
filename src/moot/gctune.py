"""Garbage-collector settings for processes that keep hundreds of model calls in flight.

CPython collects its youngest generation every 700 net allocations, and every tenth of
those collections also walks the middle generation, and so on up to every object the
process holds (the ``openai``, ``aiohttp``, pydantic and moot modules among them). A
debate runner allocates a few hundred objects per model call, so at 1,500 calls/s the
collector runs hundreds of times a second, and its pauses land in the middle of bursts of
replies, where they delay every request still to be sent.

:func:`tuned_gc` collects the youngest generation every 50,000 net allocations instead of
700 (the older ones every 20 of those). Measured on these 2 cores (``bench/throughput.py``:
1,000 ``society:3:2`` items at concurrency 100, server answering in 200 ms): at 10,000,
client CPU per call 0.39 -> 0.31 ms, throughput 0.85 -> 0.91 of ideal; 200 concurrent
``answer`` debates (``bench/overhead.py``): 1.41x -> 1.31x their critical path. The count is
of *net* allocations (a freed object takes one back), so what triggers a young collection
is the growth of the live set: with 300 calls in flight their coroutines, requests and
replies are ~10,000 objects at the peak of a burst, and at 10,000 each burst set off a
collection that walked all of them (about 12 ms each, 16 in the run above: 200-300 ms of
the run's CPU, ~40 us a call) only to promote them and see them freed moments later. At
50,000 that run makes at most one (GC CPU 45-75 ms a process, mostly the imports'); cyclic garbage,
which is never freed otherwise, still counts toward the threshold, so a long run collects
it as before. Freezing the imported objects
(``gc.freeze``) as well gained nothing measurable beyond that, with tracing exporting too
(the SDK, its exporter and their objects frozen after install: 3 interleaved traced runs,
client CPU a call 1.01/1.02/1.28 ms unfrozen, 1.03/1.10/1.19 frozen, load 4.3-5.9): a young
collection never walks old objects, and the run's one full collection happens during the
imports, before these thresholds apply.

The ``moot`` command runs every subcommand inside it (``MOOT_GC=default`` turns that off).
A library does not change a process's collector on its own: applications that run moot
at high concurrency from Python wrap their run in it themselves.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator

__all__ = ["GEN0_THRESHOLD", "skip_final_collection", "tuned_gc", "tuning_wanted"]

GEN0_THRESHOLD = 50_000
"""Net allocations between two collections of the youngest generation (CPython's default: 700)."""

_depth = 0
_saved: tuple[int, int, int] | None = None


def tuning_wanted() -> bool:
    """False when ``MOOT_GC=default`` asks the ``moot`` command to leave the collector alone."""
    return os.environ.get("MOOT_GC", "").strip().lower() != "default"


@contextlib.contextmanager
def tuned_gc(threshold0: int = GEN0_THRESHOLD) -> Iterator[None]:
    """Run the body with the collector set for many calls in flight (see the module docstring).

    Thresholds already higher are kept; on exit the previous ones come back. Nested uses (a
    command that calls another) apply the settings once, outermost.

    Args:
        threshold0: allocations between collections of the youngest generation.
    """
    global _depth, _saved
    if _depth == 0:
        _saved = gc.get_threshold()
        gc.set_threshold(max(threshold0, _saved[0]), max(_saved[1], 20), max(_saved[2], 20))
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0 and _saved is not None:
            gc.set_threshold(*_saved)
            _saved = None


def skip_final_collection() -> None:
    """Spare the interpreter's exit its last full collection: call once, when the process is done.

    At exit CPython collects every object the process still holds (the imported modules, pydantic's
    schemas, the price table), only to hand back memory the operating system takes back anyway:
    0.13-0.19 s after every ``moot bench`` on these cores, against 0.02-0.03 s with the objects
    frozen (``gc.freeze``) first. What must happen at exit still does: ``atexit`` handlers and
    ``weakref.finalize`` callbacks run, and modules are torn down; only unreachable cycles left
    by then go unfinalised, and moot closes its files, stores and sessions itself before this.
    The ``moot`` command calls it as it returns its exit code; a program that runs moot inside a
    longer life never should.
    """
    gc.freeze()
