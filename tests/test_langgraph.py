"""LangGraph integration: debate_node, build_debate_graph and the three examples."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, TypedDict

import pytest

pytest.importorskip("langgraph")

from moot import Debate, DebateResult, Event, FunctionModel, ModelRequest, ScriptedModel  # noqa: E402
from moot.errors import MissingDependencyError, ModelHTTPError, UsageError  # noqa: E402
from moot.integrations.langgraph import build_debate_graph, debate_node  # noqa: E402
from moot.models.testing import Reply  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def load_example(name: str) -> ModuleType:
    """Import ``examples/<name>.py`` (examples/ is not a package)."""
    module_name = f"_moot_example_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # typing.get_type_hints resolves the state TypedDicts through it
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def seed000() -> ModuleType:
    return load_example("seed000_rag_pipeline")


@pytest.fixture
def seed004() -> ModuleType:
    return load_example("seed004_research_workflow")


@pytest.fixture
def subgraph_example() -> ModuleType:
    return load_example("adversarial_subgraph")


def arg(text: str, conf: float, evidence: list[str] | None = None) -> dict[str, object]:
    return {"content": text, "confidence": conf, "supporting_evidence": evidence or []}


EVIDENCE = ["remote staff logged more focused hours", "a 2023 survey found output rose"]


def refinement(text: str) -> dict[str, object]:
    return {"synthesis": text, "agreements": ["both cite output"], "open_questions": []}


def mod(conf: float, leaning: str = "support") -> dict[str, object]:
    return {"evaluation": "e", "leaning": leaning, "consensus_reached": conf > 0.8, "confidence": conf}


def ans(text: str, conf: float = 0.7) -> dict[str, object]:
    return {"answer": text, "citations": ["physics-101"], "confidence": conf}


def answer_script() -> dict[str, list[Reply]]:
    return {
        "affirmative": [ans("A1"), ans("A2")],
        "critical": [ans("C1"), ans("C2")],
        "synthesizer": [{"final_answer": "Rayleigh scattering, synthesized.", "confidence": 0.9}],
    }


def speakers(model: ScriptedModel | FunctionModel) -> list[str]:
    return [str(r.metadata["speaker"]) for r in model.requests]


def prompt_of(request: ModelRequest) -> str:
    return "\n".join(m.content for m in request.messages)


def run_graph(graph: Any, state: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = asyncio.run(graph.ainvoke(state))
    return out


def both_ways(
    protocol: str | dict[str, Any], script: dict[str, list[Reply]], *, delay: float = 0.0, **inputs: Any
) -> tuple[DebateResult, ScriptedModel, list[str], DebateResult, ScriptedModel, list[str]]:
    """Run ``protocol`` with Debate.run and with the graph on the same script; return both."""
    engine_model, graph_model = ScriptedModel(script, delay=delay), ScriptedModel(script, delay=delay)
    engine_events: list[str] = []
    graph_events: list[str] = []
    engine = Debate(protocol, model=engine_model).run_sync(
        "Remote work raises productivity.", on_event=lambda e: engine_events.append(e.kind), **inputs
    )
    graph = build_debate_graph(protocol, model=graph_model, on_event=lambda e: graph_events.append(e.kind))
    out = run_graph(graph, {"topic": "Remote work raises productivity.", **inputs})
    assert set(out) == {"result"}
    result = DebateResult.model_validate(out["result"])
    return engine, engine_model, engine_events, result, graph_model, graph_events


# -- build_debate_graph -----------------------------------------------------------------------------
def test_subgraph_has_one_node_per_speaker_and_seed_002_edges() -> None:
    graph = build_debate_graph("adversarial", model=ScriptedModel([])).get_graph()
    assert set(graph.nodes) == {
        "__start__",
        "setup",
        "proponent",
        "opponent",
        "moderator",
        "finalize",
        "__end__",
    }
    edges = {(e.source, e.target): e.data for e in graph.edges}
    assert ("proponent", "opponent") in edges and ("opponent", "moderator") in edges
    assert edges[("moderator", "proponent")] == "continue"
    assert edges[("moderator", "finalize")] == "conclude"

    extended = build_debate_graph("adversarial-extended", model=ScriptedModel([])).get_graph()
    into_refiner = {e.source for e in extended.edges if e.target == "refiner"}
    assert into_refiner == {"proponent", "opponent", "advocate", "critic"}
    assert {e.target for e in extended.edges if e.source == "refiner"} == {"moderator"}
    fan_out = {e.target for e in extended.edges if e.source == "moderator"}
    assert fan_out == {"proponent", "opponent", "advocate", "critic", "finalize"}


def test_subgraph_adversarial_stops_early_like_the_engine() -> None:
    script: dict[str, list[Reply]] = {
        "proponent": [arg("for", 0.9, EVIDENCE)],
        "opponent": [arg("against", 0.4)],
        "moderator": [mod(0.85)],
    }
    engine, engine_model, engine_events, result, model, events = both_ways("adversarial", script)
    assert speakers(model) == speakers(engine_model) == ["proponent", "opponent", "moderator"]
    assert result.stopped_early and len(result.rounds) == 1 and result.usage.calls == 3
    assert result.decision == engine.decision and result.final_answer == engine.final_answer == "SUPPORT"
    assert result.metrics == engine.metrics
    assert events == engine_events
    assert events[0] == "debate_started" and events[-1] == "debate_completed"


def test_subgraph_adversarial_runs_to_max_rounds_when_threshold_not_exceeded() -> None:
    script: dict[str, list[Reply]] = {
        "proponent": [arg("p1", 0.5), arg("p2", 0.5)],
        "opponent": [arg("o1", 0.5), arg("o2", 0.5)],
        "moderator": [mod(0.8), mod(0.9)],  # 0.8 is not > 0.8; round 2 is the last anyway
    }
    engine, engine_model, _, result, model, _ = both_ways("adversarial", script)
    assert speakers(model) == speakers(engine_model) == ["proponent", "opponent", "moderator"] * 2
    assert not result.stopped_early and len(result.rounds) == 2 and result.usage.calls == 6
    assert result.decision is not None and result.decision.label == "UNCERTAIN"
    # round 2 saw round 1: the same prompts as the engine's
    assert [r.messages for r in model.requests] == [r.messages for r in engine_model.requests]


def test_subgraph_extended_runs_four_in_parallel_then_refiner_then_moderator() -> None:
    script: dict[str, list[Reply]] = {
        k: [arg(f"{k}{r}", 0.6) for r in (1, 2, 3)] for k in ("proponent", "opponent", "advocate", "critic")
    }
    script["refiner"] = [refinement(f"refiner{r}") for r in (1, 2, 3)]
    script["moderator"] = [mod(0.5), mod(0.5), mod(0.5)]
    engine, engine_model, engine_events, result, model, events = both_ways(
        "adversarial-extended", script, delay=0.02
    )
    assert model.max_in_flight == engine_model.max_in_flight == 4
    assert len(result.rounds) == 3 and result.usage.calls == 18
    assert speakers(model) == speakers(engine_model)  # same order, concurrent group included
    assert speakers(model)[:6] == ["proponent", "opponent", "advocate", "critic", "refiner", "moderator"]
    refiner_prompt = model.requests[4].messages[1].content
    assert all(f"{k}1" in refiner_prompt for k in ("proponent", "opponent", "advocate", "critic"))
    assert [r.messages for r in model.requests] == [r.messages for r in engine_model.requests]
    assert [[t.speaker for t in r.turns] for r in result.rounds] == [
        [t.speaker for t in r.turns] for r in engine.rounds
    ]
    assert result.decision == engine.decision and events == engine_events


def test_subgraph_panel_without_moderator_and_with_judge_matches_engine() -> None:
    def prt(who: str) -> dict[str, object]:
        return {"speaker": who, "stance": "neutral", "planning": "p", "reflection": "r", "message": who}

    script: dict[str, list[Reply]] = {k: [prt(k)] * 2 for k in ("analyst", "critic", "empath")}
    script["judge"] = [{"winner": None, "consensus": "mostly positive", "rationale": "because"}]
    engine, engine_model, engine_events, result, model, events = both_ways("panel", script)
    assert speakers(model) == speakers(engine_model) == ["analyst", "critic", "empath"] * 2 + ["judge"]
    assert result.final_answer == engine.final_answer == "mostly positive"
    assert events == engine_events
    assert "end_round" in build_debate_graph("panel", model=model).get_graph().nodes


def test_subgraph_answer_preset_timeout_falls_back_to_initial_answer() -> None:
    async def slow(req: ModelRequest) -> str:
        await asyncio.sleep(5)
        return "{}"

    model = FunctionModel(slow)
    graph = build_debate_graph({"extends": "answer", "timeout": 0.05}, model=model)
    result = DebateResult.model_validate(
        run_graph(graph, {"topic": "Q?", "initial_answer": "from compose"})["result"]
    )
    assert result.final_answer == "from compose"
    assert result.fallback == "timeout: the debate exceeded 0.05 s"
    assert result.timings.wall_ms < 2000 and len(model.requests) == 2


def test_subgraph_budget_fallback_matches_engine() -> None:
    engine, engine_model, _, result, model, _ = both_ways(
        {"extends": "answer", "budget": {"max_calls": 3}},
        answer_script(),
    )
    assert result.usage.calls == engine.usage.calls == 3
    assert result.fallback == engine.fallback and result.fallback is not None
    assert result.fallback.startswith("budget: calls budget exhausted")
    assert result.final_answer == engine.final_answer


def test_subgraph_debate_mode_false_skips_without_calls() -> None:
    model = ScriptedModel([])
    out = run_graph(
        build_debate_graph("adversarial", model=model),
        {"topic": "X", "debate_mode": False, "initial_answer": "k"},
    )
    assert out["result"]["skipped"] and out["result"]["final_answer"] == "k" and model.requests == []


def test_subgraph_skips_when_the_protocol_is_disabled() -> None:
    model = ScriptedModel([])
    graph = build_debate_graph({"extends": "adversarial", "enabled": False}, model=model)
    out = run_graph(graph, {"topic": "X", "initial_answer": "k"})
    assert out["result"]["skipped"] and out["result"]["final_answer"] == "k" and model.requests == []


def test_subgraph_rejects_empty_topic_and_reports_missing_langgraph(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UsageError, match="topic is empty"):
        run_graph(build_debate_graph("adversarial", model=ScriptedModel([])), {"topic": "  "})
    monkeypatch.setitem(sys.modules, "langgraph.graph", None)  # makes `import langgraph.graph` fail
    with pytest.raises(MissingDependencyError, match=r"moot\[langgraph\]"):
        build_debate_graph("adversarial")


def test_adversarial_subgraph_example_inside_a_parent_graph(subgraph_example: ModuleType) -> None:
    model = ScriptedModel(
        {
            "proponent": [arg("for", 0.9, EVIDENCE)],
            "opponent": [arg("against", 0.4)],
            "moderator": [mod(0.9)],
        }
    )
    events: list[Event] = []
    parent = subgraph_example.build_parent(model, on_event=events.append)
    state = {"claim": " Remote work raises productivity. ", "evidence": ["study-2021"]}
    out = run_graph(parent, state)
    assert speakers(model) == ["proponent", "opponent", "moderator"]
    assert out["topic"] == "Remote work raises productivity."
    assert out["result"]["stopped_early"] and out["report"].startswith("verdict: SUPPORT")
    assert "1 round(s), stopped early, 3 model calls" in out["report"]
    assert "turns" not in out and "round" not in out  # the subgraph's internals stay inside it
    assert "study-2021" in prompt_of(model.requests[0])  # the parent's context reached it
    assert [e.kind for e in events][-1] == "debate_completed"


def test_adversarial_subgraph_example_extended_and_main(
    subgraph_example: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    script: dict[str, list[Reply]] = {
        k: [arg(k, 0.6)] * 3 for k in ("proponent", "opponent", "advocate", "critic")
    }
    script["refiner"] = [refinement("refiner")] * 3
    script["moderator"] = [mod(0.5), mod(0.95)]
    model = ScriptedModel(script, delay=0.02)
    build = subgraph_example.build_parent
    monkeypatch.setattr(subgraph_example, "build_parent", lambda spec, **kw: build(model, **kw))
    subgraph_example.main(["Claim.", "--extended"])
    assert model.max_in_flight == 4 and len(model.requests) == 12
    printed = capsys.readouterr().out
    assert "2 round(s), stopped early, 12 model calls" in printed and "round 1 refiner" in printed


# -- debate_node and the seed 000 pipeline ----------------------------------------------------------
def test_seed000_pipeline_runs_the_answer_debate(seed000: ModuleType) -> None:
    model = ScriptedModel(answer_script())
    out = run_graph(seed000.build_pipeline(model), {"query": "Why is the sky blue?", "debate_mode": True})
    assert speakers(model)[:2] in (["affirmative", "critical"], ["critical", "affirmative"])
    assert speakers(model)[4] == "synthesizer" and len(model.requests) == 5
    assert out["answer"] == "Rayleigh scattering, synthesized." and out["answer_source"] == "debate"
    assert out["initial_answer"].endswith("[physics-101]")
    assert "physics-101" in prompt_of(model.requests[0])  # retrieved chunks are the context
    assert DebateResult.model_validate(out["debate"]).id == out["debate"]["id"]


def test_seed000_debate_mode_false_skips_the_step(seed000: ModuleType) -> None:
    model = ScriptedModel([])
    out = run_graph(seed000.build_pipeline(model), {"query": "Why is the sky blue?", "debate_mode": False})
    assert model.requests == [] and out["debate"]["skipped"] and out["debate"]["usage"]["calls"] == 0
    assert out["answer"] == out["initial_answer"] and out["answer_source"] == "initial (debate skipped)"


def test_seed000_missing_flag_means_off(seed000: ModuleType) -> None:
    model = ScriptedModel([])
    out = run_graph(seed000.build_pipeline(model), {"query": "Why is the sky blue?"})
    assert model.requests == [] and out["answer"] == out["initial_answer"]


def test_seed000_backend_failure_falls_back_to_initial_answer(seed000: ModuleType) -> None:
    model = ScriptedModel({"*": [ModelHTTPError(500, "boom")] * 8})
    pipeline = seed000.build_pipeline(model, overrides={"retry": {"max_retries": 1, "base_delay": 0}})
    out = run_graph(pipeline, {"query": "Why is the sky blue?", "debate_mode": True})
    assert out["answer"] == out["initial_answer"]
    assert out["debate"]["fallback"].startswith("turn failed:") and "HTTP 500" in out["debate"]["fallback"]
    assert out["answer_source"].startswith("initial (fallback: turn failed")
    assert all(r.metadata["round"] == 1 for r in model.requests)  # nothing after round 1


def test_seed000_timeout_falls_back_to_initial_answer(seed000: ModuleType) -> None:
    async def slow(req: ModelRequest) -> str:
        await asyncio.sleep(5)
        return "{}"

    model = FunctionModel(slow)
    out = run_graph(
        seed000.build_pipeline(model, overrides={"timeout": 0.05}), {"query": "Why?", "debate_mode": True}
    )
    assert out["answer"] == out["initial_answer"]
    assert out["debate"]["fallback"] == "timeout: the debate exceeded 0.05 s"


def test_seed000_main(
    seed000: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    build = seed000.build_pipeline
    monkeypatch.setattr(seed000, "build_pipeline", lambda spec: build(ScriptedModel([])))
    seed000.main(["Why is the sky blue?", "--no-debate"])
    printed = capsys.readouterr().out
    assert "answer (initial (debate skipped)):" in printed and "0 model calls" in printed


def test_debate_node_options() -> None:
    model = ScriptedModel(answer_script())
    node = debate_node("answer", model=model, topic_key="q", output_key="out", answer_key="a")
    assert node.__name__ == "debate_answer"
    update = asyncio.run(node({"q": "Q?"}))
    assert set(update) == {"out", "a"} and update["a"] == "Rayleigh scattering, synthesized."
    with pytest.raises(UsageError, match="'q'"):
        asyncio.run(node({}))
    with pytest.raises(UsageError, match="not to debate_node"):
        debate_node(Debate("answer", model=model), model=model)


# -- seed 004 ----------------------------------------------------------------------------------------
RULING = {
    "resolution": "both_valid",
    "explanation": "Q1-2024 and the 2024 annual estimate measure different periods.",
    "recommended_value": None,
    "recommended_citation": None,
    "confidence": 0.8,
    "action": "use_both",
}


def test_seed004_arbitrates_the_unemployment_contradiction(seed004: ModuleType) -> None:
    model = ScriptedModel({"arbitrator": [RULING]})
    events: list[tuple[Any, ...]] = []

    async def callback(*args: Any) -> None:
        events.append(args)

    out = run_graph(
        seed004.build_workflow(model),
        {"question": "What is Qatar's unemployment rate?", "event_callback": callback},
    )
    assert speakers(model) == ["arbitrator"]
    prompt = prompt_of(model.requests[0])
    assert "GCC-STAT Q1-2024" in prompt and "World Bank 2024" in prompt
    debate = out["debate_results"]
    assert debate["status"] == "complete" and debate["contradictions_found"] == 1
    assert debate["resolved"] == 1 and debate["flagged_for_review"] == 0
    assert "different periods" in debate["consensus_narrative"]
    assert "Debate consensus: qatar_unemployment_rate" in out["final_synthesis"]
    outcomes = {r["agent"]: r["findings"][0].get("debate") for r in out["agent_reports"]}
    assert outcomes["LabourEconomist"]["outcome"] == "both_valid" and outcomes["Demographer"] is None
    stages = [e[0] for e in events if e[1] == "running"]
    assert stages == ["classify", "prefetch", "rag", "agents", "debate", "verify", "synthesize"]
    complete = next(e for e in events if e[:2] == ("debate", "complete"))
    assert complete[2] == {"contradictions": 1, "resolved": 1, "flagged": 0}


def test_seed004_no_contradiction_skips_the_debate_without_calls(seed004: ModuleType) -> None:
    model = ScriptedModel([])
    agreeing = {
        source: {
            metric: (0.10 if "unemployment" in metric else 88.0, period)
            for metric, (_, period) in data.items()
        }
        for source, data in seed004.DEFAULT_DATASTORE.items()
    }
    out = run_graph(seed004.build_workflow(model), {"question": "Unemployment?", "datastore": agreeing})
    assert model.requests == []
    assert out["debate_results"] == {"status": "skipped", "contradictions_found": 0, "latency_ms": 0.0}
    assert "Debate consensus" not in out["final_synthesis"]
    assert out["verification"]["citations_ok"]


def test_seed004_main(
    seed004: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    build = seed004.build_workflow
    monkeypatch.setattr(
        seed004, "build_workflow", lambda spec: build(ScriptedModel({"arbitrator": [RULING]}))
    )
    seed004.main([])
    printed = capsys.readouterr().out
    assert "[debate] complete in" in printed and "Debate consensus" in printed


# -- plain-data state, the custom stream, faults through the LangGraph doors -------------------------
class Pipeline(TypedDict, total=False):
    query: str
    answer: str
    debate: dict[str, Any]


def answer_pipeline(model: Any, checkpointer: Any = None, **overrides: Any) -> Any:
    """Issue 20's pipeline: the debate reads and writes the same ``answer`` key."""
    from langgraph.graph import END, START, StateGraph

    graph = StateGraph(Pipeline)
    node = debate_node(
        Debate({"extends": "answer", **overrides}, model=model),
        topic_key="query",
        initial_answer_key="answer",
        answer_key="answer",
    )
    graph.add_node("debate", node)
    graph.add_edge(START, "debate")
    graph.add_edge("debate", END)
    return graph.compile(checkpointer=checkpointer)


def stream(graph: Any, state: Any, config: Any = None, **kw: Any) -> tuple[list[Any], list[Any]]:
    """Run ``graph`` through ``astream``: (custom events, update chunks)."""

    async def go() -> tuple[list[Any], list[Any]]:
        custom, updates = [], []
        async for chunk in graph.astream(state, config, stream_mode=["custom", "updates"], **kw):
            *_, mode, data = chunk
            (custom if mode == "custom" else updates).append(data)
        return custom, updates

    return asyncio.run(go())


def test_node_streams_every_engine_event_and_checkpoints_plain_json() -> None:
    from langgraph.checkpoint.memory import MemorySaver

    saver = MemorySaver()
    graph = answer_pipeline(ScriptedModel(answer_script()), saver)
    config = {"configurable": {"thread_id": "1"}}
    custom, _ = stream(graph, {"query": "Why is the sky blue?", "answer": "initial"}, config)
    kinds = [e["type"] for e in custom]
    assert kinds.count("turn_started") == 5 and kinds.count("turn_completed") == 4
    assert kinds.count("verdict") == 1 and kinds[0] == "debate_started" and kinds[-1] == "debate_completed"
    assert all(e["source"] == "moot" for e in custom)
    verdict = next(e for e in custom if e["type"] == "verdict")
    assert verdict["text"] == "Rayleigh scattering, synthesized." and verdict["usage"]["calls"] == 1
    values = asyncio.run(graph.aget_state(config)).values
    assert json.loads(json.dumps(values)) == values  # plain data: nothing a checkpoint cannot hold
    assert values["answer"] == "Rayleigh scattering, synthesized."
    assert values["debate"]["id"] == custom[-1]["run_id"]


def test_subgraph_streams_through_a_parent_with_subgraphs_true(subgraph_example: ModuleType) -> None:
    from langgraph.checkpoint.memory import MemorySaver

    model = ScriptedModel(
        {"proponent": [arg("p", 0.6)] * 2, "opponent": [arg("o", 0.6)] * 2, "moderator": [mod(0.5)] * 2}
    )
    parent = subgraph_example.build_parent(model, checkpointer=MemorySaver())
    config = {"configurable": {"thread_id": "x"}}
    custom, _ = stream(parent, {"claim": "Remote work raises productivity."}, config, subgraphs=True)
    completed = [e for e in custom if e["type"] == "turn_completed"]
    assert [(e["round"], e["speaker"]) for e in completed] == [
        (r, s) for r in (1, 2) for s in ("proponent", "opponent", "moderator")
    ]
    state = asyncio.run(parent.aget_state(config)).values
    assert len(DebateResult.model_validate(state["result"]).turns()) == 6


def test_node_keeps_the_state_answer_when_the_synthesis_is_blank() -> None:
    script = answer_script()
    script["synthesizer"] = [{"final_answer": "   ", "confidence": 0.9}] * 2  # the reply and its repair
    custom, updates = stream(
        answer_pipeline(ScriptedModel(script)), {"query": "Q?", "answer": "from compose"}
    )
    assert updates[-1]["debate"].get("answer", "from compose") == "from compose"  # never the blank
    why = next(e for e in custom if e["type"] in ("answer_kept", "fallback"))
    assert "blank" in why["reason"]


def test_node_keeps_the_state_answer_when_the_backend_is_unreachable() -> None:
    from moot.errors import ModelConnectionError

    async def down(req: ModelRequest) -> str:
        raise ModelConnectionError("connection refused")

    graph = answer_pipeline(FunctionModel(down), retry={"max_retries": 0})
    custom, _ = stream(graph, {"query": "Q?", "answer": "from compose"})
    out = run_graph(graph, {"query": "Q?", "answer": "from compose"})
    assert out["answer"] == "from compose"
    fallback = next(e for e in custom if e["type"] == "fallback")
    assert fallback["reason"].startswith("backend unreachable") and fallback["final_answer"] == "from compose"


def test_node_keeps_the_state_answer_at_the_deadline() -> None:
    async def slow(req: ModelRequest) -> str:
        await asyncio.sleep(5)
        return "{}"

    graph = answer_pipeline(FunctionModel(slow), timeout=0.05)
    custom, _ = stream(graph, {"query": "Q?", "answer": "from compose"})
    out = run_graph(graph, {"query": "Q?", "answer": "from compose"})
    assert out["answer"] == "from compose" and out["debate"]["fallback"].startswith("timeout")
    assert next(e for e in custom if e["type"] == "fallback")["reason"].startswith("timeout")


# -- human review -----------------------------------------------------------------------------------
def stored_review(path: Path, run_id: str) -> tuple[Any, list[Any]]:
    """The stored run of a reviewed debate, and its ``human_review`` events."""
    from moot.runs import RunStore

    with RunStore(path) as store:
        assert [r.id for r in store.list()] == [run_id]  # the review reopened the debate's run
        return store.get(run_id), [e for e in store.events(run_id) if e.kind == "human_review"]


def test_node_human_review_pauses_once_and_records_the_decision(tmp_path: Path) -> None:
    from langgraph.checkpoint.memory import MemorySaver
    from langgraph.types import Command

    model = ScriptedModel(answer_script())
    graph = answer_pipeline_review(model, MemorySaver(), "always", store=tmp_path / "runs.db")
    config = {"configurable": {"thread_id": "r"}}
    paused = run_graph_config(graph, {"query": "Q?", "answer": "from compose"}, config)
    (pending,) = paused["__interrupt__"]
    assert pending.value["type"] == "human_review" and pending.value["topic"] == "Q?"
    assert pending.value["final_answer"] == "Rayleigh scattering, synthesized."
    assert json.loads(json.dumps(pending.value)) == pending.value
    custom, _ = stream(
        graph, Command(resume={"answer": "Blue light scatters most.", "note": "checked"}), config
    )
    assert len(model.requests) == 5  # resuming did not run the debate again
    assert [e["type"] for e in custom] == ["human_review"]
    state = asyncio.run(graph.aget_state(config)).values
    assert state["answer"] == "Blue light scatters most."
    human = DebateResult.model_validate(state["debate"]).human_review
    assert human is not None and human.phase == "human" and human.get("note") == "checked"
    # The stored run says what the graph went on with: the person's answer, and why they were asked.
    stored, reviews = stored_review(tmp_path / "runs.db", state["debate"]["id"])
    assert stored.status == "complete" and stored.result["final_answer"] == "Blue light scatters most."
    assert stored.result["human_review"]["content"]["note"] == "checked"
    assert [e.data["decision"]["answer"] for e in reviews] == ["Blue light scatters most."]


def test_node_human_review_under_invoke_pauses_once_and_records_the_decision(tmp_path: Path) -> None:
    """``app.invoke`` takes the sync path: the debate is a sync task, run once, resumed without it."""
    from langgraph.checkpoint.memory import MemorySaver
    from langgraph.types import Command

    model = ScriptedModel(answer_script())
    graph = answer_pipeline_review(model, MemorySaver(), "always", store=tmp_path / "runs.db")
    config = {"configurable": {"thread_id": "r"}}
    paused = graph.invoke({"query": "Q?", "answer": "from compose"}, config)
    (pending,) = paused["__interrupt__"]
    assert pending.value["final_answer"] == "Rayleigh scattering, synthesized."
    state = graph.invoke(Command(resume={"answer": "Blue light scatters most."}), config)
    assert len(model.requests) == 5  # resuming did not run the debate again
    assert state["answer"] == "Blue light scatters most."
    stored, reviews = stored_review(tmp_path / "runs.db", state["debate"]["id"])
    assert stored.status == "complete" and stored.result["final_answer"] == "Blue light scatters most."
    assert [e.data["decision"]["answer"] for e in reviews] == ["Blue light scatters most."]


def test_debate_node_runs_under_invoke_and_ainvoke_alike() -> None:
    """LangGraph's ``invoke`` gets a sync path, ``ainvoke`` the async one; both make the same update."""
    from langgraph.graph import END, START, StateGraph

    def graph_of(model: Any) -> Any:
        graph = StateGraph(Pipeline)
        graph.add_node("debate", debate_node("answer", model=model, topic_key="query", answer_key="answer"))
        graph.add_edge(START, "debate")
        graph.add_edge("debate", END)
        return graph.compile()

    sync_model, async_model = ScriptedModel(answer_script()), ScriptedModel(answer_script())
    sync = graph_of(sync_model).invoke({"query": "Q?"})
    async_ = asyncio.run(graph_of(async_model).ainvoke({"query": "Q?"}))
    assert sync["answer"] == async_["answer"] == "Rayleigh scattering, synthesized."
    assert isinstance(sync["debate"], dict) and sync["debate"]["usage"]["calls"] == 5
    assert len(sync_model.requests) == len(async_model.requests) == 5


def test_debate_node_invoke_from_inside_a_running_event_loop() -> None:
    """``app.invoke`` called by async code (a notebook cell): the debate gets a loop in a thread."""
    from langgraph.graph import END, START, StateGraph

    graph = StateGraph(Pipeline)
    graph.add_node("debate", debate_node("answer", model=ScriptedModel(answer_script()), topic_key="query"))
    graph.add_edge(START, "debate")
    graph.add_edge("debate", END)
    app = graph.compile()

    async def inside() -> dict[str, Any]:
        out: dict[str, Any] = app.invoke({"query": "Q?"})
        return out

    assert asyncio.run(inside())["debate"]["final_answer"] == "Rayleigh scattering, synthesized."


def test_node_split_review_skips_a_clear_decision_and_needs_a_checkpointer() -> None:
    graph = answer_pipeline_review(ScriptedModel(answer_script()), None, "split")
    with pytest.raises(UsageError, match="needs a checkpointer"):
        run_graph(graph, {"query": "Q?", "answer": "x"})
    from langgraph.checkpoint.memory import MemorySaver

    model = ScriptedModel(answer_script())  # synthesizer confidence 0.9: no review
    out = run_graph_config(
        answer_pipeline_review(model, MemorySaver(), "split"),
        {"query": "Q?"},
        {"configurable": {"thread_id": "s"}},
    )
    assert "__interrupt__" not in out and out["debate"]["human_review"] is None
    with pytest.raises(UsageError, match="human_review must be"):
        debate_node("answer", model=model, human_review="sometimes")  # type: ignore[arg-type]


def test_subgraph_split_review_interrupts_an_uncertain_decision_and_resumes(tmp_path: Path) -> None:
    from langgraph.checkpoint.memory import MemorySaver
    from langgraph.types import Command

    model = ScriptedModel(
        {"proponent": [arg("p", 0.5)] * 2, "opponent": [arg("o", 0.5)] * 2, "moderator": [mod(0.5)] * 2}
    )
    graph = build_debate_graph(
        "adversarial", model=model, checkpointer=MemorySaver(), human_review="split", store=tmp_path / "r.db"
    )
    config = {"configurable": {"thread_id": "g"}}
    paused = run_graph_config(graph, {"topic": "X."}, config)
    value = paused["__interrupt__"][0].value
    assert value["reason"].startswith("split decision") and value["decision"]["label"] == "UNCERTAIN"
    assert [p["speaker"] for p in value["positions"]] == ["proponent", "opponent"]
    out = run_graph_config(graph, Command(resume="SUPPORT"), config)
    result = DebateResult.model_validate(out["result"])
    assert result.final_answer == "SUPPORT" and result.human_review is not None
    assert result.human_review.content == {
        "accepted": False,
        "reason": "split decision (UNCERTAIN)",
        "note": "",
        "answer": "SUPPORT",
    }
    assert len(model.requests) == 6
    stored, reviews = stored_review(tmp_path / "r.db", result.id)
    assert stored.status == "complete" and stored.result["final_answer"] == "SUPPORT"
    assert [e.data["reason"] for e in reviews] == ["split decision (UNCERTAIN)"]


def answer_pipeline_review(model: Any, checkpointer: Any, mode: str, store: Any = None) -> Any:
    from langgraph.graph import END, START, StateGraph

    graph = StateGraph(Pipeline)
    node = debate_node(
        "answer",
        model=model,
        topic_key="query",
        initial_answer_key="answer",
        answer_key="answer",
        human_review=mode,
        store=store,
    )  # type: ignore[arg-type]
    graph.add_node("debate", node)
    graph.add_edge(START, "debate")
    graph.add_edge("debate", END)
    return graph.compile(checkpointer=checkpointer)


def run_graph_config(graph: Any, state: Any, config: Any) -> dict[str, Any]:
    out: dict[str, Any] = asyncio.run(graph.ainvoke(state, config))
    return out


def test_seed004_split_decision_goes_to_a_human_and_resumes_with_their_decision(seed004: ModuleType) -> None:
    from langgraph.checkpoint.memory import MemorySaver
    from langgraph.types import Command

    flag = {**RULING, "resolution": "neither_valid", "action": "flag_for_review", "confidence": 0.5}
    model = ScriptedModel({"arbitrator": [flag]})
    graph = seed004.build_workflow(model, human_review="split", checkpointer=MemorySaver())
    config = {"configurable": {"thread_id": "w"}}
    custom, _ = stream(graph, {"question": "What is Qatar's unemployment rate?"}, config)
    assert any(e["type"] == "verdict" for e in custom) or any(e["type"] == "turn_completed" for e in custom)
    snapshot = asyncio.run(graph.aget_state(config))
    (pending,) = snapshot.interrupts
    assert pending.value["reason"] == "1 contradiction(s) flagged for review"
    (metric,) = pending.value["metrics"]
    assert metric["metric"] == "qatar_unemployment_rate" and metric["status"] == "flagged"
    assert {c["agent"] for c in metric["claims"]} == {"LabourEconomist", "NationalStrategy"}
    decision = {
        "decisions": {"qatar_unemployment_rate": {"agent": "LabourEconomist"}},
        "note": "GCC-STAT wins",
    }
    out = run_graph_config(graph, Command(resume=decision), config)
    assert len(model.requests) == 1  # the arbitrator was not asked again
    debate = out["debate_results"]
    assert debate["resolved"] == 1 and debate["flagged_for_review"] == 0
    assert debate["human_review"]["content"]["decisions"] == decision["decisions"]
    assert "qatar_unemployment_rate: 0.1 (human review)." in debate["consensus_narrative"]
    outcomes = {r["agent"]: r["findings"][0].get("debate") for r in out["agent_reports"]}
    assert outcomes["LabourEconomist"]["outcome"] == "confirmed"
    assert outcomes["NationalStrategy"]["outcome"] == "superseded"


def test_arbitration_node_needs_a_checkpointer_for_review() -> None:
    from moot.arbitration import arbitration_node

    node = arbitration_node(model=ScriptedModel([]), human_review="split")
    from langgraph.graph import END, START, StateGraph

    class S(TypedDict, total=False):
        agent_reports: list[dict[str, Any]]
        debate_results: dict[str, Any]

    graph = StateGraph(S)
    graph.add_node("arbitration", node)
    graph.add_edge(START, "arbitration")
    graph.add_edge("arbitration", END)
    with pytest.raises(UsageError, match="needs a checkpointer"):
        run_graph(graph.compile(), {"agent_reports": []})


def test_a_recorded_node_run_names_its_langgraph_thread_and_the_state_names_the_run(tmp_path: Path) -> None:
    from langgraph.checkpoint.memory import MemorySaver
    from langgraph.graph import END, START, StateGraph

    from moot.runs import RunStore

    path = tmp_path / "runs.db"
    graph = StateGraph(Pipeline)
    node = debate_node(
        Debate("answer", model=ScriptedModel(answer_script()), store=path),
        topic_key="query",
        answer_key="answer",
    )
    graph.add_node("debate", node)
    graph.add_edge(START, "debate")
    graph.add_edge("debate", END)
    app = graph.compile(checkpointer=MemorySaver())
    # the Agent Server puts its thread and run ids in the configurable, as here
    config = {"configurable": {"thread_id": "thread-7", "run_id": "run-3"}}
    out = run_graph_config(app, {"query": "Why is the sky blue?"}, config)
    with RunStore(path) as store:
        (record,) = store.list()
        full = store.get(record.id)
    assert (
        full.config["langgraph"]["thread_id"] == "thread-7" and full.config["langgraph"]["run_id"] == "run-3"
    )
    assert full.result is not None and full.result["id"] == out["debate"]["id"]
