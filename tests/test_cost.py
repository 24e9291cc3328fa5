"""What a debate costs (usage.cost_usd), budgets as bounds, and a history that fits the window.

Against a real local HTTP server that reports usage and enforces a window with vLLM's 400
body (tests/usage_server.py), except where a test double is the point.
"""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from genai_prices import Usage as TableUsage
from genai_prices import calc_price

import moot.models.base as base
from moot import Debate
from moot.errors import ContextLengthExceeded, UsageError, context_window_in
from moot.models import FunctionModel
from moot.models.pricing import Price, estimate_tokens, parse_price
from moot.models.testing import schema_instance
from usage_server import UsageServer, prompt_tokens


@pytest.fixture(autouse=True)
def _allow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)


def _spec(server: UsageServer, extra: str = "") -> str:
    return f"openai:{server.model}?base_url={server.url}{extra}"


def test_cost_of_a_run_is_the_servers_tokens_times_the_tables_price() -> None:
    with UsageServer(model="gpt-4o-mini") as server:
        result = Debate("answer", model=_spec(server)).run_sync("Is the sky blue?")
    assert result.fallback is None
    u = result.usage
    assert u.prompt_tokens == sum(r.prompt_tokens for r in server.chat())
    priced = calc_price(
        TableUsage(input_tokens=u.prompt_tokens, output_tokens=u.completion_tokens),
        "gpt-4o-mini",
        provider_id="openai",
    )
    assert u.cost_usd is not None and round(u.cost_usd, 5) == round(float(priced.total_price), 5)
    assert u.cost_source.startswith("genai-prices ")
    assert all(t.usage.cost_usd for t in result.turns(include_judge=True))


def test_an_unlisted_model_costs_null_with_the_reason_and_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with UsageServer(model="unlisted-7b") as server, caplog.at_level(logging.WARNING, "moot"):
        first = Debate("answer", model=_spec(server)).run_sync("Q one?")
        second = Debate("answer", model=_spec(server)).run_sync("Q two?")
    for result in (first, second):
        assert result.usage.cost_usd is None
        assert "no price for openai:unlisted-7b" in (result.usage.cost_note or "")
    said = [r for r in caplog.records if "no price for openai:unlisted-7b" in r.getMessage()]
    assert len(said) == 1


def test_price_in_the_spec_overrides_the_table() -> None:
    with UsageServer(model="gpt-4o-mini") as server:
        result = Debate("answer", model=_spec(server, "&price=1/2")).run_sync("Q?")
    u = result.usage
    assert u.cost_source == "price="
    assert u.cost_usd == pytest.approx((u.prompt_tokens * 1 + u.completion_tokens * 2) / 1e6)


@pytest.mark.parametrize("text", ["1/2/3", "a/b", "-1/2", ""])
def test_a_bad_price_is_a_usage_error(text: str) -> None:
    with pytest.raises(UsageError, match="price must be"):
        parse_price(text)


def test_test_doubles_and_the_cache_cost_zero_and_say_so(tmp_path) -> None:
    model = FunctionModel(lambda req: schema_instance(req.json_schema or {}))
    result = Debate("answer", model=model).run_sync("Q?")
    assert result.usage.cost_usd == 0 and result.usage.cost_source == "test"
    over = {"temperature": 0.7}
    with UsageServer(model="gpt-4o-mini") as server:
        spec = _spec(server)
        Debate("answer", model=spec, cache=tmp_path / "c.db", overrides=over).run_sync("Q?")
        again = Debate("answer", model=spec, cache=tmp_path / "c.db", overrides=over).run_sync("Q?")
    assert again.usage.cached and again.usage.cost_usd == 0 and again.usage.cost_source == "cache"


def test_context_length_wordings_are_their_own_kind() -> None:
    vllm = "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens"
    assert context_window_in(400, vllm) == (True, 4096)
    assert context_window_in(400, '{"error": {"code": "context_length_exceeded"}}') == (True, None)
    assert context_window_in(400, "the request exceeds the available context size, try increasing it")[0]
    assert context_window_in(None, "Requested tokens (5000) exceed context window of 2048") == (True, 2048)
    assert not context_window_in(400, "bad request: unknown field")[0]
    assert not context_window_in(500, vllm)[0]
    from moot.models.openai import http_error

    err = http_error(400, vllm, None, "openai:m")
    assert isinstance(err, ContextLengthExceeded) and err.window == 4096 and not err.retryable


# -- budgets -----------------------------------------------------------------------------------------


def test_100_debates_with_a_budget_never_pass_it_and_say_budget() -> None:
    budget = 0.0011
    with UsageServer(model="gpt-4o-mini", words=60) as server:
        spec = _spec(server)

        async def main() -> list:
            debates = [Debate("answer", model=spec, budget_usd=budget) for _ in range(100)]
            topics = [f"Question {i}: " + "why " * (i * 6) for i in range(100)]
            try:
                return await asyncio.gather(*(d.run(t) for d, t in zip(debates, topics, strict=True)))
            finally:
                for debate in debates:
                    await debate.aclose()

        results = asyncio.run(main())
    stopped = [r for r in results if r.fallback and r.fallback.startswith("budget:")]
    assert all(r.usage.cost_usd is not None and r.usage.cost_usd <= budget for r in results)
    assert stopped and len(stopped) < 100  # the budget cut some debates, not all
    assert all("usd budget" in (r.fallback or "") for r in stopped)
    assert all(r.final_answer for r in stopped)  # the best answer it has


def test_a_token_budget_is_a_bound_even_when_a_rounds_turns_run_together() -> None:
    model = FunctionModel(lambda req: {**schema_instance(req.json_schema or {}), "answer": "word " * 40})
    over = {"budget": {"max_tokens": 1000}, "max_tokens_per_turn": 100}
    result = Debate("answer", model=model, overrides=over).run_sync("Q " * 50)
    assert result.usage.total_tokens <= 1000
    assert result.fallback is not None and result.fallback.startswith("budget: tokens budget")


def test_a_budget_in_dollars_needs_a_price_for_every_model() -> None:
    with UsageServer(model="unlisted-8b") as server:
        with pytest.raises(UsageError, match="needs every model's price"):
            Debate("answer", model=_spec(server), budget_usd=1.0).run_sync("Q?")
        assert server.chat() == []


# -- history -----------------------------------------------------------------------------------------


def test_twelve_rounds_fit_a_4096_token_window_and_say_how(caplog: pytest.LogCaptureFixture) -> None:
    with UsageServer(window=4096, words=150) as server, caplog.at_level(logging.WARNING, "moot"):
        result = Debate("adversarial", model=_spec(server), overrides={"rounds": 12}).run_sync(
            "Tea beats coffee."
        )
    chat = server.chat()
    assert result.fallback is None and len(result.rounds) == 12
    assert all(r.status == 200 and r.prompt_tokens + (r.max_tokens or 0) <= 4096 for r in chat)
    assert max(r.prompt_tokens for r in chat) > 2000  # the history did grow: it was cut, not absent
    history = result.metrics["history"]
    assert history["strategy"] == "window" and history["turns_left_out"] > 0
    assert any("context window" in r.getMessage() and "left out" in r.getMessage() for r in caplog.records)
    late = result.rounds[-1].turns[0].sent
    assert late is not None and "earliest turns of this debate are left out" in late[-1].content


def test_summarize_makes_one_recorded_summary_per_round() -> None:
    history = {"strategy": "summarize", "summarizer": "moderator"}
    with UsageServer(window=4096, words=60) as server:
        result = Debate(
            "adversarial", model=_spec(server), overrides={"rounds": 12, "history": history}
        ).run_sync("Tea beats coffee.")
    summaries = [r.summary for r in result.rounds if r.summary is not None]
    assert result.fallback is None
    # One per round, made when a later prompt first needs it: round 12's speakers read round 11
    # whole and rounds 1-10 as the summary (the moderator reads only its own round).
    assert [s.round for s in summaries] == list(range(1, 11))
    assert all(s.ok and s.phase == "summary" and s.usage.calls == 1 for s in summaries)
    turns = result.turns(include_judge=True)
    # Every request is in a recorded turn (repairs included): the summaries are counted too.
    assert len(server.chat()) == sum(t.usage.calls for t in [*turns, *summaries])
    assert result.usage.calls == len(server.chat())
    assert all(r.prompt_tokens + (r.max_tokens or 0) <= 4096 for r in server.chat())


def test_a_window_learned_from_a_400_retries_the_turn_once_with_a_shorter_history() -> None:
    with UsageServer(window=3000, words=150) as server:
        server.window_listed = False  # /v1/models lists no max_model_len: only the 400 tells
        result = Debate("adversarial", model=_spec(server), overrides={"rounds": 8}).run_sync(
            "Tea beats coffee."
        )
    refused = [r for r in server.chat() if r.status == 400]
    assert result.fallback is None and result.failed_turns == 0
    assert 1 <= len(refused) <= 2  # learned at the first refusal (the sequential speakers)


def test_a_topic_that_alone_passes_the_window_is_a_usage_error_before_any_call() -> None:
    with UsageServer(window=4096) as server:
        with pytest.raises(UsageError, match="context window"):
            Debate("adversarial", model=_spec(server)).run_sync("tea " * 5000)
        assert server.chat() == []


def test_estimates_err_high_against_the_servers_count() -> None:
    from moot.models.base import Message

    messages = [Message(role="system", content="x" * 1000), Message(role="user", content="y " * 700)]
    body = {"messages": [m.model_dump() for m in messages]}
    assert estimate_tokens(None, messages) >= prompt_tokens(body)
    assert Price(0.15, 0.6).cost_usd(1_000_000, 0) == pytest.approx(0.15)


# -- the command line ------------------------------------------------------------------------------


def test_moot_run_budget_usd_falls_back_and_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    from moot.cli import main

    with UsageServer(model="gpt-4o-mini", words=60) as server:
        code = main(["run", "Q?", "--model", _spec(server), "--budget-usd", "0.0004", "--no-store", "--json"])
    assert code == 1
    out = json.loads(capsys.readouterr().out)
    assert out["fallback"].startswith("budget: usd budget") and out["usage"]["cost_usd"] <= 0.0004


def test_dry_run_prints_the_cost_and_the_window_before_anything_is_spent(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from moot.cli import main

    spec = "openai:gpt-4o-mini?base_url=http://127.0.0.1:9/v1&context_window=4096"
    argv = ["run", "Tea?", "--protocol", "adversarial", "--rounds", "12", "--model", spec, "--dry-run"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "estimate (at most: every reply at its max_tokens): 36 calls" in out
    assert "window 4,096 tokens" in out and "history shortened to fit" in out
    assert "cost $0.0" in out


# -- every door ------------------------------------------------------------------------------------


def _priced_double() -> FunctionModel:
    model = FunctionModel(lambda req: {**schema_instance(req.json_schema or {}), "answer": "word " * 30})
    model.price = Price(1000.0, 1000.0)  # US dollars per million "tokens" (words, for a test double)
    return model


def test_the_langgraph_node_and_subgraph_keep_budget_usd() -> None:
    pytest.importorskip("langgraph")
    from moot.integrations.langgraph import build_debate_graph, debate_node

    node = debate_node("answer", model=_priced_double(), budget_usd=0.5)
    out = asyncio.run(node({"topic": "Q?"}))
    found = out["debate"]
    result = found if isinstance(found, dict) else found.model_dump(mode="json")
    assert result["fallback"].startswith("budget: usd budget") and result["usage"]["cost_usd"] <= 0.5
    graph = build_debate_graph("answer", model=_priced_double(), budget_usd=0.5)
    data = asyncio.run(graph.ainvoke({"topic": "Q?"}))["result"]
    assert data["fallback"].startswith("budget: usd budget") and data["usage"]["cost_usd"] <= 0.5
    with pytest.raises(UsageError, match="budget_usd"):
        debate_node(Debate("answer"), budget_usd=1.0)


def test_absa_and_arbitration_take_budget_usd() -> None:
    from moot.absa.config import AbsaConfig
    from moot.arbitration import arbitrate_sync

    assert AbsaConfig(budget_usd=0.25).protocol().budget.max_usd == 0.25
    with pytest.raises(UsageError, match="budget_usd"):
        arbitrate_sync([], debate=Debate("arbitration"), budget_usd=1.0, model=None)


def test_traces_carry_the_cost() -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from moot.app.tracing import DebateTracer

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = DebateTracer(provider.get_tracer("moot"))
    result = Debate("answer", model=_priced_double()).run_sync("Q?", on_event=tracer.on_event)
    provider.shutdown()
    spans = exporter.get_finished_spans()
    chats = [s for s in spans if (s.attributes or {}).get("gen_ai.operation.name") == "chat"]
    assert chats and all((s.attributes or {}).get("moot.cost_usd", 0) > 0 for s in chats)
    total = sum((s.attributes or {})["moot.cost_usd"] for s in chats)
    assert total == pytest.approx(result.usage.cost_usd)
    (root,) = [s for s in spans if (s.attributes or {}).get("gen_ai.operation.name") == "invoke_workflow"]
    assert (root.attributes or {})["moot.cost_usd"] == pytest.approx(result.usage.cost_usd)
