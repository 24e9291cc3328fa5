"""Take the screenshots in docs/runs.md of ``moot view`` from real runs: ``make screenshots``.

Records real runs with the CLI into a fresh store, on the embedded model (``local``) unless
``--model`` names another (``openai:M`` with ``OPENAI_BASE_URL`` for a local server): two debates
that differ in their rounds, two small benches that differ in temperature, and a one-sentence ABSA
run. Then it serves the store with ``moot view`` on 127.0.0.1 and has Debian's headless Chromium
(through Playwright) photograph the run list, a debate with a turn's transcript open, the compare
page, a bench report, a bench item and the ABSA run, into ``docs/img/``. It fails if any page asks
for anything outside 127.0.0.1.

Run: ``.venv/bin/python docs/screenshots.py [--model local] [--keep DIR]`` (a few minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

IMG = Path(__file__).resolve().parent / "img"
TOPIC = "Should a small team write tests before fixing a bug?"
SENTENCE = "The battery life is great, but the screen scratches far too easily."
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def record(store: Path, work: Path, model: str) -> None:
    """The runs the screenshots show, recorded by the commands a user types."""
    env = os.environ | {"MOOT_STORE": str(store)}
    moot = [sys.executable, "-m", "moot"]
    bench = ["bench", "--task", "arithmetic", "--methods", "single,vote:3", "--n", "6", "--no-plots"]
    commands = [
        ["run", TOPIC, "--model", model, "--rounds", "1"],
        ["run", TOPIC, "--model", model],
        [*bench, "--model", model, "--out", str(work / "bench-t0")],
        [*bench, "--model", model, "--temperature", "0.8", "--out", str(work / "bench-t08")],
        ["absa", SENTENCE, "--model", model],
    ]
    for argv in commands:
        print("$ moot " + " ".join(argv), flush=True)
        done = subprocess.run([*moot, *argv], env=env, cwd=work, stdout=subprocess.DEVNULL, check=False)
        if done.returncode not in (0, 1):  # 1: a fallback or an incomplete bench, still worth showing
            raise SystemExit(f"moot {argv[0]} exited {done.returncode}")


def _serve(store: Path) -> tuple[str, Any, threading.Thread]:
    import uvicorn

    from moot.view import create_app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    server = uvicorn.Server(
        uvicorn.Config(create_app(store), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}", server, thread


def photograph(store: Path, chromium: str) -> None:
    """Serve ``store`` and take every screenshot into ``docs/img/``."""
    from playwright.sync_api import sync_playwright

    from moot.runs import RunStore

    with RunStore(store, must_exist=True) as opened:
        runs = {
            (r.kind, i): r.id
            for kind in ("run", "bench", "absa")
            for i, r in enumerate(opened.list(kind=kind))
        }
    base, server, thread = _serve(store)
    outside: list[str] = []
    IMG.mkdir(parents=True, exist_ok=True)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1360, "height": 900})
            page.on("request", lambda r: None if r.url.startswith(base) else outside.append(r.url))

            def shot(path: str, name: str, wait: str) -> None:
                page.goto(base + path)
                page.wait_for_load_state("networkidle")
                page.wait_for_selector(wait)
                page.screenshot(path=str(IMG / name))

            bench_a, bench_b = runs[("bench", 1)], runs[("bench", 0)]  # newest first: b ran at 0.8
            shot("/", "view-runs.png", "table#runs")
            shot(f"/runs/{bench_a}", "view-bench.png", "table.report")
            item = page.locator("a.item-link").first.get_attribute("href")
            shot(str(item), "view-bench-item.png", "section.transcript")
            shot(f"/compare?a={bench_a}&b={bench_b}", "view-compare.png", "table.settings-differ")
            shot(
                f"/compare?a={runs[('run', 1)]}&b={runs[('run', 0)]}",
                "view-compare-debates.png",
                "table.turns-ab",
            )
            shot(f"/runs/{runs[('absa', 0)]}", "view-absa.png", "p.sentence")
            shot(f"/runs/{runs[('run', 0)]}", "view-debate.png", ".timeline")
            first = page.locator(".turn details.transcript").first
            first.locator("summary").first.click()
            first.scroll_into_view_if_needed()
            page.screenshot(path=str(IMG / "view-transcript.png"))
            browser.close()
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    if outside:
        raise SystemExit(f"pages asked for URLs outside 127.0.0.1: {outside}")


def main() -> None:
    """Record the runs (unless ``--keep`` already holds them), then photograph them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", default="local", help="the model every run uses (default: the embedded one)"
    )
    parser.add_argument("--keep", type=Path, default=None, help="record into this folder and keep it")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="moot-shots-"))
    work.mkdir(parents=True, exist_ok=True)
    store = work / "runs.db"
    try:
        if not store.exists():
            record(store, work, args.model)
        photograph(store, args.chromium)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"screenshots in {IMG}")


if __name__ == "__main__":
    main()
