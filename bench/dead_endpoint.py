"""A server that accepts connections and never answers: how long each door takes to give up.

Run: ``python bench/dead_endpoint.py [--commands bench,absa,absa-batch,run] [--n 50]``.

An asyncio server on 127.0.0.1 accepts every connection, reads nothing and answers nothing (a hung
process behind a live socket, a load balancer whose backend died). Each command runs as a user types
it, at its defaults, all at once, pointed at it with ``--model openai:m?base_url=...``:

* ``bench``: ``moot bench --task arithmetic --methods single --n N``;
* ``absa``: ``moot absa SENTENCE``;
* ``absa-batch``: ``moot absa --input FILE`` (5 sentences);
* ``run``: ``moot run TOPIC`` (the ``answer`` preset, its 10 s deadline).

For each: the wall time, the exit code and the last line of stderr (what the user is told).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rate_limits import client_env  # this folder is on sys.path when a script of it runs

COMMANDS = ("bench", "absa", "absa-batch", "run")


class Silent:
    """The server: accepts, holds every connection open, never answers."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self.accepted = 0
        self._ready = threading.Event()
        self._held: list[asyncio.StreamWriter] = []
        threading.Thread(target=self._serve, daemon=True).start()
        self._ready.wait(10)

    def _serve(self) -> None:
        async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.accepted += 1
            self._held.append(writer)  # never read, never written, never closed

        async def start() -> None:
            server = await asyncio.start_server(hold, "127.0.0.1", 0, backlog=4096)
            self.port = server.sockets[0].getsockname()[1]

        self.loop.run_until_complete(start())
        self._ready.set()
        self.loop.run_forever()


def _argv(command: str, url: str, tmp: Path, n: int) -> list[str]:
    moot = str(Path(sys.executable).with_name("moot"))
    model = ["--model", f"openai:m?base_url={url}", "--store", str(tmp / f"{command}.db")]
    if command == "bench":
        return [moot, "bench", "--task", "arithmetic", "--methods", "single", "--n", str(n), "--no-plots",
                "--out", str(tmp / "bench-out"), *model]  # fmt: skip
    if command == "absa":
        return [moot, "absa", "The soup was cold but the waiter was kind.", *model]
    if command == "absa-batch":
        path = tmp / "sentences.jsonl"
        path.write_text("".join(json.dumps({"id": f"s{i}", "sentence": f"The room {i} was clean."}) + "\n"
                                for i in range(5)))  # fmt: skip
        return [moot, "absa", "--input", str(path), "--output", str(tmp / "absa.jsonl"), *model]
    return [moot, "run", "Should a small team write tests first?", *model]


def _run(argv: list[str], timeout_s: float) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=client_env())
        code: int | str = proc.returncode
        lines = [x.strip() for x in proc.stderr.splitlines() if x.strip() and "units (" not in x]
        told = ("moot: error", "stopped", "answered none")
        said = [x for x in lines if any(t in x for t in told)][-1:]
        said = said or lines[-1:]
    except subprocess.TimeoutExpired:
        code, said = "timeout", []
    return {"wall_s": round(time.perf_counter() - started, 1), "exit": code, "said": said[0] if said else ""}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commands", default=",".join(COMMANDS))
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per command at most")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    server = Silent()
    url = f"http://127.0.0.1:{server.port}/v1"
    commands = args.commands.split(",")
    print(f"a server that accepts and never answers; load {os.getloadavg()[0]:.1f}", flush=True)
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(len(commands)) as pool:
        jobs = {c: pool.submit(_run, _argv(c, url, Path(tmp), args.n), args.timeout) for c in commands}
        rows = {c: job.result() for c, job in jobs.items()}
    for command, row in rows.items():
        print(f"{command:11s} {row['wall_s']:7.1f} s  exit {row['exit']}  {row['said'][:150]}")
    print(f"connections accepted: {server.accepted}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
