"""``bench/cpu_split.py``: the paired statistics and the start-up/run split of a child's CPU."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
from bench_helpers import bench_script


def _script() -> ModuleType:
    return bench_script("cpu_split")


def test_paired_statistics() -> None:
    cs = _script()
    values = [0.10, 0.12, 0.08, 0.11, 0.09]
    s = cs.summary(values)
    assert s["mean"] == pytest.approx(0.10) and s["median"] == 0.10 and s["n"] == 5
    half = 2.78 * statistics.stdev(values) / 5**0.5  # Student's t, 4 degrees of freedom
    assert s["ci95_t"] == pytest.approx((0.10 - half, 0.10 + half))
    lo, hi = s["ci95_bootstrap"]
    assert min(values) <= lo < 0.10 < hi <= max(values)
    assert cs.bootstrap_ci(values) == (lo, hi)  # seeded: the same data, the same interval
    assert cs.t_ci([0.5]) == (0.5, 0.5)
    assert "mean +0.100 median +0.100" in cs.describe(values)


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads /proc")
def test_a_childs_cpu_splits_at_the_first_request_and_counts_its_other_threads() -> None:
    cs = _script()
    # A child that sleeps (no CPU), says so, then spins a second thread: its start-up is ~0 CPU.
    code = (
        "import sys, threading, time\n"
        "time.sleep(0.3)\n"
        "print('go', flush=True)\n"
        "def spin():\n"
        "    end = time.thread_time() + 0.2\n"
        "    while time.thread_time() < end: pass\n"
        "t = threading.Thread(target=spin); t.start(); time.sleep(0.1); t.join()\n"
    )
    first = [0.0]
    with (
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) as proc,
        cs.ProcSampler(proc.pid, lambda: first[0], interval=0.01) as sampler,
    ):
        assert proc.stdout is not None
        assert proc.stdout.readline() == "go\n"
        first[0] = time.time()
        proc.wait(timeout=30)
    # The start-up is the interpreter's own (tens of ms), never the 0.2 s spun after "go".
    assert sampler.startup_s is not None and 0 < sampler.startup_s < 0.15
    assert sampler.other_threads_s() >= 0.1  # the spinning thread, sampled every 10 ms
    assert sampler.threads >= 2
