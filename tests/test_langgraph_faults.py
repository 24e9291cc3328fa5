"""Faults through the LangGraph doors against a real local HTTP endpoint, as the CLI's fault tests.

An unreachable endpoint, a blank answer, a deadline: the state keeps the pipeline's answer and the
custom stream says why, for the node (issue 20's pipeline: the debate reads and writes ``answer``)
and for the subgraph (its result falls back to the initial answer).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, TypedDict

import pytest

pytest.importorskip("langgraph")

from langgraph.graph import END, START, StateGraph  # noqa: E402

from fault_server import Fate, FaultServer, free_port, schema_reply  # noqa: E402
from moot import Debate, DebateResult  # noqa: E402
from moot.integrations.langgraph import build_debate_graph, debate_node  # noqa: E402
from moot.models.openai import OpenAIModel  # noqa: E402

pytestmark = pytest.mark.integration

NO_RETRY = {"retry": {"max_retries": 0}}


class Pipeline(TypedDict, total=False):
    query: str
    answer: str
    debate: dict[str, Any]


def node_graph(url: str, **overrides: Any) -> Any:
    graph = StateGraph(Pipeline)
    model = OpenAIModel("fake", base_url=url, api_key="sk-local")
    debate = Debate({"extends": "answer", **NO_RETRY, **overrides}, model=model)
    graph.add_node(
        "debate", debate_node(debate, topic_key="query", initial_answer_key="answer", answer_key="answer")
    )
    graph.add_edge(START, "debate")
    graph.add_edge("debate", END)
    return graph.compile()


async def run(graph: Any, state: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    custom: list[dict[str, Any]] = []
    values: dict[str, Any] = {}
    async for mode, chunk in graph.astream(state, stream_mode=["custom", "values"]):
        if mode == "custom":
            custom.append(chunk)
        else:
            values = chunk
    return values, custom


def blank_synthesis(n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
    reply = json.loads(schema_reply(body))
    if "final_answer" in reply:
        reply["final_answer"] = "   "
    return Fate(content=json.dumps(reply))


def test_node_unreachable_endpoint_keeps_the_answer_and_says_why() -> None:
    graph = node_graph(f"http://127.0.0.1:{free_port()}/v1")
    values, custom = asyncio.run(run(graph, {"query": "Q?", "answer": "from compose"}))
    assert values["answer"] == "from compose"
    fallback = next(e for e in custom if e["type"] == "fallback")
    assert fallback["reason"].startswith("backend unreachable")


def test_node_blank_synthesis_keeps_the_answer_and_says_why() -> None:
    with FaultServer(blank_synthesis) as server:
        values, custom = asyncio.run(run(node_graph(server.url), {"query": "Q?", "answer": "from compose"}))
    assert values["answer"] == "from compose"
    why = next(e for e in custom if e["type"] in ("fallback", "answer_kept"))
    assert "blank" in why["reason"] or "invalid output" in why["reason"]


def test_node_deadline_keeps_the_answer_and_says_why() -> None:
    with FaultServer(lambda n, body, headers: Fate(content=schema_reply(body), delay=2.0)) as server:
        graph = node_graph(server.url, timeout=0.3)
        values, custom = asyncio.run(run(graph, {"query": "Q?", "answer": "from compose"}))
    assert values["answer"] == "from compose"
    assert next(e for e in custom if e["type"] == "fallback")["reason"].startswith("timeout")
    assert values["debate"]["fallback"].startswith("timeout")


@pytest.mark.parametrize("fault", ["unreachable", "blank", "deadline"])
def test_subgraph_faults_fall_back_to_the_initial_answer_and_say_why(fault: str) -> None:
    def run_with(url: str, **overrides: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        model = OpenAIModel("fake", base_url=url, api_key="sk-local")
        graph = build_debate_graph({"extends": "answer", **NO_RETRY, **overrides}, model=model)
        return asyncio.run(run(graph, {"topic": "Q?", "initial_answer": "from compose"}))

    if fault == "unreachable":
        values, custom = run_with(f"http://127.0.0.1:{free_port()}/v1")
    elif fault == "blank":
        with FaultServer(blank_synthesis) as server:
            values, custom = run_with(server.url)
    else:
        with FaultServer(lambda n, body, headers: Fate(content=schema_reply(body), delay=2.0)) as server:
            values, custom = run_with(server.url, timeout=0.3)
    result = DebateResult.model_validate(values["result"])
    assert result.final_answer == "from compose" and result.fallback is not None
    assert next(e for e in custom if e["type"] == "fallback")["reason"] == result.fallback
