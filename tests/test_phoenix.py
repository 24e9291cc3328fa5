"""A traced ``moot run`` read back from a real Arize Phoenix (``make phoenix-test``).

Phoenix is large (~850 MB), so it lives in a venv of its own (``make phoenix-test`` builds
``~/.cache/moot/phoenix-venv`` once) and these tests run only when ``MOOT_PHOENIX`` names its
``phoenix`` executable. Phoenix listens on 127.0.0.1 only, with its own telemetry off.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

PHOENIX = os.environ.get("MOOT_PHOENIX", "")

pytestmark = [
    pytest.mark.phoenix,
    pytest.mark.skipif(not PHOENIX, reason="MOOT_PHOENIX is not set: run `make phoenix-test`"),
]

TOPIC = "Should a small team write tests before fixing a bug?"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.load(resp)


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Phoenix server on a free loopback port; yields its base URL."""
    work = tmp_path_factory.mktemp("phoenix")
    port, grpc = _free_port(), _free_port()
    env = {
        **os.environ,
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(grpc),
        "PHOENIX_WORKING_DIR": str(work),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    log = (work / "phoenix.log").open("w")
    proc = subprocess.Popen([PHOENIX, "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                pytest.fail(f"phoenix exited with {proc.returncode}: see {work / 'phoenix.log'}")
            try:
                _get(f"{url}/v1/projects")
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"phoenix did not answer within 180 s: see {work / 'phoenix.log'}")
                time.sleep(1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _moot(args: list[str], env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "moot", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _spans_of(url: str, conversation: str, want: int) -> list[dict[str, Any]]:
    """The spans of one run's trace, read through Phoenix's REST API (waits for ``want`` of them)."""
    deadline = time.monotonic() + 60
    while True:
        data = _get(f"{url}/v1/projects/default/spans?limit=1000")["data"]
        roots = [s for s in data if s["attributes"].get("gen_ai.conversation.id") == conversation]
        trace_ids = {s["context"]["trace_id"] for s in roots}
        spans = [s for s in data if s["context"]["trace_id"] in trace_ids]
        if len(spans) >= want or time.monotonic() > deadline:
            return spans
        time.sleep(0.5)


@pytest.mark.parametrize("preset", ["answer", "adversarial"])
def test_a_moot_run_is_a_trace_in_phoenix(phoenix: str, preset: str, tmp_path: Path) -> None:
    done = _moot(
        ["run", TOPIC, "--protocol", preset, "--model", "test", "--json"],
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": phoenix,
            "OTEL_SERVICE_NAME": "moot-test",
            "MOOT_STORE": str(tmp_path / "r.db"),
        },
    )
    assert done.returncode == 0, done.stderr
    assert "warning" not in done.stderr
    result = json.loads(done.stdout)
    turns = sum(len(r["turns"]) + (r["moderator"] is not None) for r in result["rounds"])
    turns += result["verdict"] is not None
    calls = result["usage"]["calls"]
    spans = _spans_of(phoenix, result["id"], 1 + turns + calls)
    by_op: dict[str, list[dict[str, Any]]] = {}
    for s in spans:
        by_op.setdefault(s["attributes"]["gen_ai.operation.name"], []).append(s)
    (root,) = by_op["invoke_workflow"]
    assert len(by_op["invoke_agent"]) == turns and len(by_op["chat"]) == calls
    assert root["name"] == f"invoke_workflow {preset}" and root["parent_id"] is None
    assert root["attributes"]["moot.status"] == "complete"
    agent_ids = {s["context"]["span_id"] for s in by_op["invoke_agent"]}
    assert all(s["parent_id"] == root["context"]["span_id"] for s in by_op["invoke_agent"])
    assert all(s["parent_id"] in agent_ids for s in by_op["chat"])
    assert {s["span_kind"] for s in by_op["chat"]} == {"LLM"}  # Phoenix reads the GenAI conventions
    assert (
        sum(s["attributes"]["gen_ai.usage.input_tokens"] for s in by_op["chat"])
        == result["usage"]["prompt_tokens"]
    )
    assert TOPIC not in json.dumps(spans)  # content capture is off by default


@pytest.mark.skipif(
    not os.environ.get("MOOT_UPDATE_SCREENSHOTS"),
    reason="MOOT_UPDATE_SCREENSHOTS=1 retakes docs/img/phoenix-trace.png",
)
def test_screenshot_of_a_debate_trace(phoenix: str, tmp_path: Path) -> None:
    """docs/tracing-reference.md's picture: an adversarial debate on the embedded model, in Phoenix."""
    sync_api = pytest.importorskip("playwright.sync_api")
    chromium = os.environ.get("MOOT_CHROMIUM") or "/usr/bin/chromium"
    done = _moot(
        ["run", TOPIC, "--protocol", "adversarial", "--json"],
        {"OTEL_EXPORTER_OTLP_ENDPOINT": phoenix, "MOOT_STORE": str(tmp_path / "r.db")},
        timeout=1800,  # seven turns of the embedded model on a busy machine
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    spans = _spans_of(phoenix, result["id"], 1 + result["usage"]["calls"] * 2)
    trace_id = spans[0]["context"]["trace_id"]
    project = _get(f"{phoenix}/v1/projects")["data"][0]["id"]
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=chromium, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        page = browser.new_page(viewport={"width": 1400, "height": 860})
        page.goto(f"{phoenix}/projects/{project}/traces/{trace_id}", wait_until="networkidle", timeout=60_000)
        page.get_by_text("invoke_workflow adversarial").first.wait_for(timeout=30_000)
        page.wait_for_timeout(1500)
        page.screenshot(path=str(Path(__file__).resolve().parents[1] / "docs" / "img" / "phoenix-trace.png"))
        browser.close()
