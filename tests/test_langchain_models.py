"""LangChain chat models as moot backends: langchain-core's fake chat model, offline."""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
from typing import Any

import pytest

pytest.importorskip("langchain_core")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage  # noqa: E402

from moot import Debate, DebateResult  # noqa: E402
from moot.errors import MissingDependencyError, UsageError  # noqa: E402
from moot.models import resolve_model  # noqa: E402
from moot.models.langchain import LangChainModel  # noqa: E402
from moot.models.testing import schema_instance  # noqa: E402
from moot.protocol import preset_names  # noqa: E402
from moot.schemas import get_output, output_names  # noqa: E402


def every_schema_reply() -> str:
    """One JSON object that satisfies every output schema (extra keys are ignored)."""
    merged: dict[str, Any] = {}
    for name in output_names():
        merged.update(schema_instance(get_output(name).model_json_schema()))
    merged["sentence_evidence_spans"] = ["x"]  # the patch judge must quote at least one span
    return json.dumps(merged)


def fake_chat(text: str | None = None) -> GenericFakeChatModel:
    reply = AIMessage(
        content=text or every_schema_reply(),
        usage_metadata={"input_tokens": 12, "output_tokens": 7, "total_tokens": 19},
        response_metadata={"finish_reason": "stop", "model_name": "fake-chat"},
    )
    return GenericFakeChatModel(messages=itertools.repeat(reply))


@pytest.mark.parametrize("preset", preset_names())
def test_every_preset_runs_on_a_langchain_chat_model_with_usage(preset: str) -> None:
    # "x" is every string of the reply: the patch judge's evidence spans must be quoted from the topic
    result = Debate(preset, model=fake_chat()).run_sync("Is x a good idea?")
    assert result.fallback is None and result.failed_turns == 0, (result.fallback, result.turns())
    turns = result.turns(include_judge=True)
    assert turns and all(t.model == "fake-chat" for t in turns)
    assert result.usage.calls == len(turns)
    assert result.usage.prompt_tokens == 12 * len(turns) and result.usage.completion_tokens == 7 * len(turns)


def test_resolve_model_wraps_a_chat_model_and_rejects_other_objects() -> None:
    model = resolve_model(fake_chat())
    assert isinstance(model, LangChainModel) and model.name == "langchain:GenericFakeChatModel"
    with pytest.raises(UsageError, match="not a model"):
        resolve_model(object())  # type: ignore[arg-type]


def test_the_missing_extra_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "langchain_core", None)
    with pytest.raises(MissingDependencyError, match=r"moot\[langchain\]"):
        LangChainModel(object())


def test_a_failing_chat_model_is_a_failed_turn_and_a_fallback() -> None:
    class Refused(Exception):
        status_code = 503

    class Down(GenericFakeChatModel):
        async def _agenerate(self, *args: Any, **kwargs: Any) -> Any:
            raise Refused("service unavailable")

    result = Debate(
        # A deadline of 2 s: the 503s are waited out until it (9.5 s at the preset's 10).
        {"extends": "answer", "retry": {"max_retries": 1, "base_delay": 0}, "timeout": 2},
        model=Down(messages=iter([])),
    ).run_sync("Q?", initial_answer="kept")
    assert result.final_answer == "kept" and result.fallback is not None
    failed = [t for t in result.turns(include_judge=True) if not t.ok]
    # A 503 is waited out while the debate's deadline leaves time, then fails with the reason.
    assert failed and failed[0].error_kind == "RateLimited" and "HTTP 503" in (failed[0].error or "")
    assert result.usage.attempts >= 2  # moot retried the 503


def test_calls_are_seen_by_langgraph_messages_stream() -> None:
    pytest.importorskip("langgraph")
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph

    from moot.integrations.langgraph import debate_node

    class S(TypedDict, total=False):
        topic: str
        debate: dict[str, Any]

    graph = StateGraph(S)
    graph.add_node("debate", debate_node("answer", model=fake_chat()))
    graph.add_edge(START, "debate")
    graph.add_edge("debate", END)
    app = graph.compile()

    async def go() -> list[Any]:
        return [m async for m in app.astream({"topic": "Q?"}, stream_mode="messages")]

    seen = asyncio.run(go())
    speakers = [meta.get("moot_speaker") for _, meta in seen if "moot" in (meta.get("tags") or [])]
    assert sorted(set(speakers)) == ["affirmative", "critical", "synthesizer"]


@pytest.mark.integration
@pytest.mark.parametrize("preset", preset_names())
def test_every_preset_runs_on_chat_openai_at_a_local_server(preset: str) -> None:
    pytest.importorskip("langchain_openai")
    import httpx
    from langchain_openai import ChatOpenAI

    from fault_server import Fate, FaultServer, schema_reply

    def handler(n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
        reply = json.loads(schema_reply(body))
        if "sentence_evidence_spans" in reply:
            reply["sentence_evidence_spans"] = ["x"]
        return Fate(content=json.dumps(reply))

    async def run(url: str) -> DebateResult:
        async with httpx.AsyncClient() as client:  # closed with this loop (ChatOpenAI's own is shared)
            chat = ChatOpenAI(
                model="fake", base_url=url, api_key="sk-local", max_retries=0, http_async_client=client
            )  # type: ignore[arg-type]
            return await Debate(preset, model=chat).run("Is x a good idea?")

    with FaultServer(handler) as server:
        result = asyncio.run(run(server.url))
    assert result.fallback is None and result.failed_turns == 0, result.fallback
    turns = result.turns(include_judge=True)
    assert result.usage.calls == len(turns) == server.requests
    assert result.usage.prompt_tokens == 10 * len(turns) and result.usage.completion_tokens > 0
    # structured output went through ChatOpenAI's own mechanism: OpenAI's json_schema response format
    assert all(b.get("response_format", {}).get("type") == "json_schema" for b in server.bodies)
