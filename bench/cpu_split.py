"""A child's CPU split into start-up and run, and by thread; paired differences (``throughput.py``).

``throughput.py --pairs N`` runs ``moot bench`` N times untraced and N times traced, alternated,
and compares them pair by pair: the CPU a whole process used (its rusage, exact) says what a
user pays, but half of its noise is the start-up (imports, the run store), which a traced run
also pays once more (the OpenTelemetry SDK and exporter). This module reads, while the child
runs, each thread's ``/proc/PID/task/TID/schedstat`` (its time on a CPU, in nanoseconds:
``utime``/``stime`` count 10 ms ticks):

* **start-up**: the child's CPU when the model server saw its first request (interpolated
  between the two samples around that moment);
* **run**: the rest, first request to exit (the exporter's flush at exit included);
* **by thread** (a diagnostic): the main thread (the event loop, where spans are made) and the
  others (the batch processor's export thread...), each thread's last sample (taken every
  ``interval`` seconds: a thread's last moments before the exit can be missed; the whole and
  the run figures never are).

Linux only (``/proc``); elsewhere only the whole-process figure is there.
"""

from __future__ import annotations

import os
import random
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any


def _ns(path: str) -> int | None:
    """A thread's time on a CPU (ns, the first field of ``/proc/.../schedstat``), None when it is gone."""
    try:
        with open(path, "rb") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


class ProcSampler:
    """Samples a running child's CPU (see the module docstring) on a thread of its own.

    Args:
        pid: the child.
        first_request: the model server's first request time (``time.time()``), 0 before it.
        interval: seconds between samples once the run is under way (5 ms before).
    """

    def __init__(self, pid: int, first_request: Callable[[], float], interval: float = 0.02) -> None:
        self.pid = pid
        self._first = first_request
        self._interval = interval
        self._stop = threading.Event()
        self._threads: dict[int, int] = {}  # tid -> last ns seen
        self._before: tuple[float, int] | None = None  # the last sample before the first request
        self.startup_s: float | None = None
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> ProcSampler:
        if os.path.exists(f"/proc/{self.pid}/stat"):
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        tasks = f"/proc/{self.pid}/task"
        while not self._stop.is_set():
            now = time.time()
            try:
                tids = os.listdir(tasks)
            except OSError:
                return
            for tid in tids:
                ns = _ns(f"{tasks}/{tid}/schedstat")
                if ns is not None:
                    self._threads[int(tid)] = ns
            if self.startup_s is None:
                total = sum(self._threads.values())
                first = self._first()
                if first and self._before is not None:
                    t0, c0 = self._before
                    share = (first - t0) / (now - t0) if now > t0 else 1.0
                    self.startup_s = (c0 + max(0.0, min(1.0, share)) * (total - c0)) / 1e9
                elif not first:
                    self._before = (now, total)
            self._stop.wait(self._interval if self.startup_s is not None else 0.005)

    def other_threads_s(self) -> float:
        """CPU of the threads other than the main one (the export thread...), at their last sample."""
        return sum(ns for tid, ns in self._threads.items() if tid != self.pid) / 1e9

    @property
    def threads(self) -> int:
        """How many threads the child had (every one seen)."""
        return len(self._threads)


def bootstrap_ci(
    values: Sequence[float], level: float = 0.95, resamples: int = 10_000
) -> tuple[float, float]:
    """A percentile bootstrap confidence interval of the mean (fixed seed: same data, same interval)."""
    rng = random.Random(0)
    n = len(values)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(resamples))
    cut = (1 - level) / 2
    return means[int(cut * resamples)], means[min(resamples - 1, int((1 - cut) * resamples))]


# Two-sided 95% quantiles of Student's t, by degrees of freedom (beyond 30: 2.0 is within 2%).
_T95 = (12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23, 2.20, 2.18, 2.16, 2.14, 2.13)
_T95 += (2.12, 2.11, 2.10, 2.09, 2.09, 2.08, 2.07, 2.07, 2.06, 2.06, 2.06, 2.05, 2.05, 2.05, 2.04)


def t_ci(values: Sequence[float]) -> tuple[float, float]:
    """The mean's 95% confidence interval from Student's t (pairs assumed independent)."""
    n = len(values)
    mean = statistics.fmean(values)
    if n < 2:
        return mean, mean
    half = (_T95[n - 2] if n - 2 < len(_T95) else 2.0) * statistics.stdev(values) / n**0.5
    return mean - half, mean + half


def summary(values: Sequence[float]) -> dict[str, Any]:
    """Paired differences' mean, median, 95% CIs (t and bootstrap), range and count."""
    return {
        "mean": statistics.fmean(values),
        "median": statistics.median(values),
        "ci95_t": t_ci(values),
        "ci95_bootstrap": bootstrap_ci(values),
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }


def describe(values: Sequence[float]) -> str:
    """:func:`summary` as one line."""
    s = summary(values)
    (lo, hi), (blo, bhi) = s["ci95_t"], s["ci95_bootstrap"]
    return (
        f"mean {s['mean']:+.3f} median {s['median']:+.3f} 95% CI t [{lo:+.3f}, {hi:+.3f}] "
        f"bootstrap [{blo:+.3f}, {bhi:+.3f}] range [{s['min']:+.3f}, {s['max']:+.3f}] n={s['n']}"
    )
