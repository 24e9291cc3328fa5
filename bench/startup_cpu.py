"""Start-up CPU of a command: user + system CPU of each of N runs, from the children's rusage.

What a user pays before moot does anything: ``moot --help`` imports the CLI and exits. With
``--traced`` the same command runs a second time per round with ``OTEL_EXPORTER_OTLP_ENDPOINT`` set
(the OpenTelemetry SDK, the OTLP exporter and protobuf are imported and a provider is installed and
shut down; no span is made, so nothing is sent), alternated with the plain runs.

Usage::

    python bench/startup_cpu.py                       # moot --help, 10 runs
    python bench/startup_cpu.py --runs 20 --traced
    python bench/startup_cpu.py -- moot protocols     # another command
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys


def _cpu_ms(cmd: list[str], env: dict[str, str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=120
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) * 1000


def _line(label: str, values: list[float]) -> str:
    return (
        f"{label:8s} user+sys CPU: median {statistics.median(values):.0f} ms, min {min(values):.0f}, "
        f"mean {statistics.fmean(values):.0f}, max {max(values):.0f} ({len(values)} runs)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--traced", action="store_true", help="also with OTEL_EXPORTER_OTLP_ENDPOINT set")
    parser.add_argument("command", nargs="*", help="the command (default: moot --help)")
    args = parser.parse_args(argv)
    moot = shutil.which("moot") or os.path.join(os.path.dirname(sys.executable), "moot")
    cmd = args.command or [moot, "--help"]
    plain = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    traced = {**plain, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    print(f"$ {' '.join(cmd)}   load average before: {os.getloadavg()}, cores: {os.cpu_count()}", flush=True)
    _cpu_ms(cmd, plain)  # warm the file cache: the first run reads every module from disk
    runs: dict[str, list[float]] = {"plain": [], "traced": []}
    for _ in range(args.runs):
        runs["plain"].append(_cpu_ms(cmd, plain))
        if args.traced:
            runs["traced"].append(_cpu_ms(cmd, traced))
    print(_line("plain", runs["plain"]))
    if args.traced:
        print(_line("traced", runs["traced"]))
        added = [t - p for p, t in zip(runs["plain"], runs["traced"], strict=True)]
        print(f"traced minus plain, pair by pair: median {statistics.median(added):+.0f} ms")
    print(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
