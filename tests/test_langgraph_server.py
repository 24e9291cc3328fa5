"""The example app on LangGraph's own server: ``langgraph dev`` serves it, ``langgraph_sdk`` calls it.

Run with ``make langgraph-test`` (it starts a server, ~20 s; ``make test`` leaves it out). The
server runs offline (in-memory runtime, ``--no-browser``, a free port on 127.0.0.1) with
``LANGGRAPH_STRICT_MSGPACK=true``; the debates' model is ``openai:fake`` at a local
OpenAI-compatible server that counts its requests.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph_sdk")
pytest.importorskip("langgraph_api")

from langgraph_sdk import get_client  # noqa: E402

from fault_server import Fate, FaultServer, free_port, schema_reply  # noqa: E402
from moot import DebateResult  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.langgraph_server]

APP = Path(__file__).resolve().parents[1] / "examples" / "langgraph_app"
LANGGRAPH = Path(sys.executable).with_name("langgraph")


def handler(n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
    """A valid reply to every request; the arbitrator flags its contradiction (a split decision)."""
    reply = json.loads(schema_reply(body))
    if "resolution" in reply:
        reply.update(resolution="neither_valid", action="flag_for_review")
    return Fate(content=json.dumps(reply))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, FaultServer]]:
    """``langgraph dev`` on the example app, its model a local fake OpenAI server."""
    with FaultServer(handler) as model_server:
        port = free_port()
        env = {
            **os.environ,
            "MOOT_MODEL": "openai:fake",
            "OPENAI_BASE_URL": model_server.url,
            "OPENAI_API_KEY": "sk-local",
            "LANGGRAPH_STRICT_MSGPACK": "true",
            "LANGSMITH_TRACING": "false",
            "LANGCHAIN_TRACING_V2": "false",
            "PYTHONPATH": os.pathsep.join(sys.path),
        }
        log_path = tmp_path_factory.mktemp("langgraph-dev") / "server.log"
        log = open(log_path, "w")  # noqa: SIM115 - closed below
        proc = subprocess.Popen(
            [
                str(LANGGRAPH),
                "dev",
                "--no-browser",
                "--no-reload",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            cwd=APP,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_ready(url, proc, log_path)
            yield url, model_server
        finally:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
            log.close()


def _wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"langgraph dev exited with {proc.returncode}: {log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/ok", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError("langgraph dev did not answer /ok within 120 s")


async def _stream(url: str, graph: str, **kwargs: Any) -> tuple[str, list[dict[str, Any]], list[Any]]:
    """One run through the SDK, streaming updates and custom events from every (sub)graph."""
    client = get_client(url=url)
    try:
        thread_id = kwargs.pop("thread_id", None) or (await client.threads.create())["thread_id"]
        custom: list[dict[str, Any]] = []
        interrupts: list[Any] = []
        async for part in client.runs.stream(
            thread_id, graph, stream_mode=["updates", "custom"], stream_subgraphs=True, **kwargs
        ):
            assert part.event != "error", part.data
            if part.event.startswith("custom"):
                custom.append(part.data)
            elif (
                part.event.startswith("updates")
                and isinstance(part.data, dict)
                and "__interrupt__" in part.data
            ):
                interrupts.extend(part.data["__interrupt__"])
    finally:
        await client.aclose()
    return thread_id, custom, interrupts


async def _state(url: str, thread_id: str) -> dict[str, Any]:
    client = get_client(url=url)
    try:
        state: dict[str, Any] = await client.threads.get_state(thread_id)
    finally:
        await client.aclose()
    return state


def turn_events(custom: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in custom if e.get("type") in ("turn_completed", "verdict")]


def test_seed000_pipeline_runs_streams_every_turn_and_keeps_them_in_the_thread(
    server: tuple[str, FaultServer],
) -> None:
    url, _ = server
    thread_id, custom, interrupts = asyncio.run(
        _stream(url, "seed000_pipeline", input={"query": "Why is the sky blue?", "debate_mode": True})
    )
    assert not interrupts
    state = asyncio.run(_state(url, thread_id))
    result = DebateResult.model_validate(state["values"]["debate"])
    assert result.fallback is None and len(result.turns(include_judge=True)) == 5
    assert len(turn_events(custom)) == 5  # one custom event (at least) per turn
    assert state["values"]["answer_source"] == "debate" and state["next"] == []
    assert custom[-1]["type"] == "debate_completed" and custom[-1]["run_id"] == result.id


def test_seed002_subgraph_streams_from_inside_the_subgraph(server: tuple[str, FaultServer]) -> None:
    url, _ = server
    thread_id, custom, _ = asyncio.run(
        _stream(url, "seed002_debate", input={"claim": "Remote work raises productivity."})
    )
    state = asyncio.run(_state(url, thread_id))
    result = DebateResult.model_validate(state["values"]["result"])
    assert len(result.rounds) == 2 and result.usage.calls == 6
    assert [(e["round"], e["speaker"]) for e in turn_events(custom)] == [
        (r, s) for r in (1, 2) for s in ("proponent", "opponent", "moderator")
    ]
    assert state["values"]["report"].startswith("verdict: ")


def test_seed004_split_decision_interrupts_and_completes_after_the_human_decision(
    server: tuple[str, FaultServer],
) -> None:
    url, model_server = server
    thread_id, custom, interrupts = asyncio.run(
        _stream(url, "seed004_review", input={"question": "What is Qatar's unemployment rate?"})
    )
    (pending,) = interrupts
    assert pending["value"]["type"] == "human_review"
    assert pending["value"]["reason"] == "1 contradiction(s) flagged for review"
    assert len(turn_events(custom)) == 1  # the one arbitration turn
    paused = asyncio.run(_state(url, thread_id))
    assert paused["next"] == ["debate"]
    before = model_server.requests

    decision = {"decisions": {"qatar_unemployment_rate": {"agent": "LabourEconomist"}}, "note": "GCC-STAT"}
    _, resumed, again = asyncio.run(
        _stream(url, "seed004_review", command={"resume": decision}, thread_id=thread_id)
    )
    assert not again and model_server.requests == before  # the arbitrator was not asked twice
    assert [e["type"] for e in resumed if e.get("type") == "human_review"] == ["human_review"]
    values = asyncio.run(_state(url, thread_id))["values"]
    debate = values["debate_results"]
    assert debate["flagged_for_review"] == 0 and debate["resolved"] == 1
    assert debate["human_review"]["content"]["decisions"] == decision["decisions"]
    assert "qatar_unemployment_rate: 0.1 (human review)." in values["final_synthesis"]
