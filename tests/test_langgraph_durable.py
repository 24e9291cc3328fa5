"""LangGraph checkpointers: plain-data state under strict msgpack, and a debate that survives a kill.

Each scenario runs in a child process, as a deployment would: ``LANGGRAPH_STRICT_MSGPACK`` is read
when LangGraph is imported, and a killed process is the failure durability is for. The model is
a real OpenAI-compatible server on 127.0.0.1 that counts the requests it reads.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.sqlite")

from fault_server import Fate, FaultServer, schema_reply  # noqa: E402
from moot import DebateResult  # noqa: E402
from moot.integrations.langgraph import build_debate_graph  # noqa: E402
from moot.runs import RunStore  # noqa: E402

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def child_env(server: FaultServer, strict: bool = True) -> dict[str, str]:
    env = dict(os.environ)
    env.update(OPENAI_BASE_URL=server.url, OPENAI_API_KEY="sk-local", PYTHONPATH=os.pathsep.join(sys.path))
    if strict:
        env["LANGGRAPH_STRICT_MSGPACK"] = "true"
    return env


STRICT_SCRIPT = """
import asyncio, json, sys
sys.path.insert(0, {examples!r})
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
import seed000_rag_pipeline as seed000
import adversarial_subgraph as sub

async def main():
    out = {{}}
    async with AsyncSqliteSaver.from_conn_string({db!r}) as saver:
        node_graph = seed000.build_pipeline("openai:fake", checkpointer=saver)
        cfg = {{"configurable": {{"thread_id": "node"}}}}
        await node_graph.ainvoke({{"query": "Why is the sky blue?", "debate_mode": True}}, cfg)
        parent = sub.build_parent("openai:fake", checkpointer=saver)
        sub_cfg = {{"configurable": {{"thread_id": "sub"}}}}
        await parent.ainvoke({{"claim": "Remote work raises productivity."}}, sub_cfg)
    # reload from a fresh connection, as a restarted server would
    async with AsyncSqliteSaver.from_conn_string({db!r}) as saver:
        node_graph = seed000.build_pipeline("openai:fake", checkpointer=saver)
        parent = sub.build_parent("openai:fake", checkpointer=saver)
        node_state = (await node_graph.aget_state({{"configurable": {{"thread_id": "node"}}}})).values
        sub_state = (await parent.aget_state({{"configurable": {{"thread_id": "sub"}}}})).values
        history = [s async for s in parent.aget_state_history({{"configurable": {{"thread_id": "sub"}}}})]
    out["node"] = node_state
    out["sub"] = sub_state
    out["history"] = len(history)
    print(json.dumps(out))

asyncio.run(main())
"""


def test_node_graph_and_subgraph_run_and_reload_under_strict_msgpack_sqlite(tmp_path: Path) -> None:
    with FaultServer(lambda n, body, headers: Fate(content=schema_reply(body))) as server:
        script = STRICT_SCRIPT.format(examples=str(EXAMPLES), db=str(tmp_path / "graph.db"))
        proc = subprocess.run(
            [sys.executable, "-c", script], env=child_env(server), capture_output=True, text=True, timeout=120
        )
    assert proc.returncode == 0, proc.stderr
    assert "unregistered" not in proc.stderr.lower() and "not msgpack serializable" not in proc.stderr
    import json

    out = json.loads(proc.stdout)
    node = DebateResult.model_validate(out["node"]["debate"])
    assert node.usage.calls == 5 and node.fallback is None and len(node.turns(include_judge=True)) == 5
    assert out["node"]["answer_source"] == "debate"
    sub = DebateResult.model_validate(out["sub"]["result"])
    assert sub.fallback is None and len(sub.rounds) == 2 and sub.usage.calls == 6
    assert out["sub"]["report"].startswith("verdict: ") and out["history"] >= 4
    assert server.requests == 11


RESUMABLE_SCRIPT = """
import asyncio, sys
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from moot.integrations.langgraph import build_debate_graph

async def main():
    async with AsyncSqliteSaver.from_conn_string({db!r}) as saver:
        graph = build_debate_graph("adversarial", model="openai:fake", checkpointer=saver, store=True)
        cfg = {{"configurable": {{"thread_id": "t"}}}}
        await graph.ainvoke({{"topic": "Remote work raises productivity."}}, cfg, durability="sync")

asyncio.run(main())
"""


def test_a_subgraph_killed_after_its_first_round_resumes_and_sends_only_later_requests(
    tmp_path: Path,
) -> None:
    db = tmp_path / "graph.db"
    round2_started = threading.Event()

    def handler(n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
        if n == 3 and not round2_started.is_set():  # round 1 is proponent, opponent, moderator
            round2_started.set()
            return Fate(kind="hang")  # the child is killed while waiting for this answer
        return Fate(content=schema_reply(body))

    with FaultServer(handler) as server:
        child = subprocess.Popen(
            [sys.executable, "-c", RESUMABLE_SCRIPT.format(db=str(db))],
            env=child_env(server),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            assert round2_started.wait(60), "the child never reached round 2"
            _until_committed(Path(os.environ["MOOT_STORE"]), events=10)  # round 1 as a crash leaves it
        finally:
            child.kill()
            child.wait(10)
        assert server.requests == 4

        os.environ["OPENAI_BASE_URL"], old = server.url, os.environ.get("OPENAI_BASE_URL")
        os.environ.setdefault("OPENAI_API_KEY", "sk-local")
        try:
            result = asyncio.run(_resume(db))
        finally:
            if old is None:
                del os.environ["OPENAI_BASE_URL"]
            else:
                os.environ["OPENAI_BASE_URL"] = old
        resumed = server.bodies[4:]
    assert len(resumed) == 3  # round 2 only: proponent, opponent, moderator
    assert len(result.rounds) == 2 and result.fallback is None
    assert [t.speaker for t in result.turns()] == ["proponent", "opponent", "moderator"] * 2
    assert result.usage.calls == 6

    # The killed process and the resuming one recorded one run under the state's id: it ends
    # complete with all six turns, not as a killed run plus an unrecorded resume.
    with RunStore(os.environ["MOOT_STORE"]) as store:
        runs = store.list(kind="run")
        assert [r.id for r in runs] == [result.id]
        stored = store.get(result.id)
        events = store.events(result.id)
    said = [
        (e.data.get("round"), e.data.get("speaker"))
        for e in events
        if e.kind in ("turn_completed", "judge_completed")
    ]
    assert stored.status == "complete" and stored.usage.calls == 6
    assert [e.seq for e in events] == list(range(1, len(events) + 1))  # one sequence, nothing lost
    assert said == [(r, s) for r in (1, 2) for s in ("proponent", "opponent", "moderator")]
    assert [e.kind for e in events].count("debate_started") == 1


def _until_committed(path: Path, events: int, timeout_s: float = 30.0) -> None:
    """Wait until the child's writer thread committed ``events`` events (it batches for ~10 ms)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            with RunStore(path) as store:
                if any(store.counts(run.id)[0] >= events for run in store.list(kind="run")):
                    return
        time.sleep(0.05)
    raise AssertionError(f"the child never committed {events} events to {path}")


async def _resume(db: Path) -> DebateResult:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(str(db)) as saver:
        graph = build_debate_graph("adversarial", model="openai:fake", checkpointer=saver, store=True)
        config: Any = {"configurable": {"thread_id": "t"}}
        before = await graph.aget_state(config)
        assert before.next == ("proponent",) and len(before.values["turns"]) == 3
        out = await graph.ainvoke(None, config)
    return DebateResult.model_validate(out["result"])
