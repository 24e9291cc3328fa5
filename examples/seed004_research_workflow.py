"""Seed 004: a research workflow with a debate node that arbitrates contradicting agent reports.

    classify -> prefetch -> rag -> agents -> debate -> verify -> synthesize

Everything but ``debate`` is a deterministic stand-in: ``prefetch`` reads a small
in-memory data store, ``agents`` turns it into three agent reports with citations.
With the default data store two agents disagree on Qatar's unemployment rate
(GCC-STAT Q1-2024 says 0.10 %, the World Bank's 2024 estimate 0.12 %), so ``debate``
(:func:`moot.arbitration.arbitrate`) detects one contradiction without any LLM call,
asks the arbitrator to rule on it, builds a confidence-weighted consensus and adjusts
the reports. When nothing contradicts, the node makes no LLM call and reports status
``skipped``. Progress is reported through ``state["event_callback"]`` as in the seed:
``await event_callback(stage, status, data=None, latency_ms=None)``.

Run it (``pip install 'moot[langgraph]'``)::

    python examples/seed004_research_workflow.py --model local
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph

from moot import Model
from moot.arbitration import AgentReport, Finding, arbitrate, arbitration_node
from moot.human_review import ReviewMode

EventCallback = Callable[..., Awaitable[None] | None]
"""``event_callback(stage, status, data=None, latency_ms=None)``, sync or async."""

#: source -> metric -> (value in %, period). The stand-in for the prefetch layer's data APIs.
DEFAULT_DATASTORE: dict[str, dict[str, tuple[float, str]]] = {
    "GCC-STAT": {
        "qatar_unemployment_rate": (0.10, "Q1-2024"),
        "qatar_labour_force_participation": (88.0, "Q1-2024"),
    },
    "World Bank": {
        "qatar_unemployment_rate": (0.12, "2024"),
        "qatar_labour_force_participation": (88.0, "2024"),
    },
}

#: agent -> (source it relies on, its confidence, the metrics it reports)
AGENTS: dict[str, tuple[str, float, tuple[str, ...]]] = {
    "LabourEconomist": ("GCC-STAT", 0.90, ("qatar_unemployment_rate",)),
    "NationalStrategy": ("World Bank", 0.85, ("qatar_unemployment_rate",)),
    "Demographer": ("GCC-STAT", 0.80, ("qatar_labour_force_participation",)),
}

PASSAGES = [
    "GCC-STAT publishes quarterly labour force survey results for the Gulf states.",
    "The World Bank's annual unemployment series models ILO estimates for the full year.",
    "Qatar's labour force is dominated by migrant workers, which keeps unemployment very low.",
]


class WorkflowState(TypedDict, total=False):
    """Seed 004's ``WorkflowState`` (only the keys this example uses)."""

    question: str
    event_callback: EventCallback | None
    datastore: Mapping[str, Mapping[str, tuple[float, str]]]
    classification: dict[str, Any]
    extractions: list[dict[str, Any]]
    rag_context: list[str]
    agent_reports: list[dict[str, Any]]
    debate_results: dict[str, Any] | None
    verification: dict[str, Any]
    final_synthesis: str


async def _emit(state: WorkflowState, stage: str, status: str, *extra: Any) -> None:
    callback = state.get("event_callback")
    if callback is None:
        return
    out = callback(stage, status, *extra)
    if inspect.isawaitable(out):
        await out


async def classify(state: WorkflowState) -> dict[str, Any]:
    """Route the question (keyword rules)."""
    await _emit(state, "classify", "running")
    words = state["question"].lower()
    topics = [t for t in ("unemployment", "labour", "participation") if t in words] or ["general"]
    await _emit(state, "classify", "complete", {"topics": topics})
    return {"classification": {"complexity": "medium", "topics": topics}}


async def prefetch(state: WorkflowState) -> dict[str, Any]:
    """Pull every metric from every source of the data store, with its citation."""
    await _emit(state, "prefetch", "running")
    store = state.get("datastore") or DEFAULT_DATASTORE
    extractions = [
        {
            "source": source,
            "metric": metric,
            "value": value,
            "period": period,
            "citation": f"[Per extraction: '{value:.2f}%' from {source} {period}]",
        }
        for source, metrics in store.items()
        for metric, (value, period) in metrics.items()
    ]
    await _emit(state, "prefetch", "complete", {"extractions": len(extractions)})
    return {"extractions": extractions}


async def rag(state: WorkflowState) -> dict[str, Any]:
    """Background passages sharing a word with the question."""
    await _emit(state, "rag", "running")
    words = set(state["question"].lower().replace("?", "").split())
    passages = [p for p in PASSAGES if words & set(p.lower().split())]
    await _emit(state, "rag", "complete", {"passages": len(passages)})
    return {"rag_context": passages}


async def agents(state: WorkflowState) -> dict[str, Any]:
    """Each agent reports the metrics it covers from the source it trusts."""
    await _emit(state, "agents", "running")
    reports = []
    for agent, (source, confidence, metrics) in AGENTS.items():
        findings = [
            Finding(metric=x["metric"], value=x["value"], citation=x["citation"], confidence=confidence)
            for x in state["extractions"]
            if x["source"] == source and x["metric"] in metrics
        ]
        narrative = "; ".join(f"{f.metric} is {f.value}% {f.citation}" for f in findings)
        reports.append(
            AgentReport(agent=agent, findings=findings, narrative=narrative).model_dump(mode="json")
        )
    await _emit(state, "agents", "complete", {"reports": len(reports)})
    return {"agent_reports": reports}


def make_debate_node(
    model: str | Model | None, human_review: ReviewMode | None = None
) -> Callable[[WorkflowState], Awaitable[dict[str, Any]]]:
    """Seed 004's ``_debate_node``: detect contradictions, arbitrate them, adjust the reports.

    With ``human_review`` ("split": a split decision is flagged for human review) the node is
    :func:`moot.arbitration.arbitration_node`: the graph pauses with ``interrupt()`` and resumes
    with the reviewer's decision (needs a checkpointer).
    """
    if human_review is not None:
        node = arbitration_node(model=model, human_review=human_review)

        async def reviewed(state: WorkflowState) -> dict[str, Any]:
            update = await node(state)
            full = update["debate_results"]
            fields = ["status", "contradictions_found", "latency_ms", "human_review"]
            if full["status"] == "complete":
                fields += ["resolved", "flagged_for_review", "consensus_narrative"]
            return {"agent_reports": update["agent_reports"], "debate_results": {k: full[k] for k in fields}}

        return reviewed

    async def debate(state: WorkflowState) -> dict[str, Any]:
        result = await arbitrate(
            state.get("agent_reports", []), model=model, on_progress=state.get("event_callback")
        )
        fields = {"status", "contradictions_found", "latency_ms"}
        if result.status == "complete":
            fields |= {"resolved", "flagged_for_review", "consensus_narrative"}
        return {
            "agent_reports": [r.model_dump(mode="json") for r in result.adjusted_reports],
            "debate_results": result.model_dump(mode="json", include=fields),
        }

    return debate


async def verify(state: WorkflowState) -> dict[str, Any]:
    """Every finding must carry a citation; findings the debate flagged are counted."""
    await _emit(state, "verify", "running")
    findings = [f for r in state["agent_reports"] for f in r["findings"]]
    uncited = [f["metric"] for f in findings if not f["citation"]]
    flagged = [f["metric"] for f in findings if (f.get("debate") or {}).get("outcome") == "flagged"]
    verification = {"citations_ok": not uncited, "uncited": uncited, "needs_review": sorted(set(flagged))}
    await _emit(state, "verify", "complete", verification)
    return {"verification": verification}


async def synthesize(state: WorkflowState) -> dict[str, Any]:
    """The final answer: agreed findings as reported, debated ones as the consensus says."""
    started = time.perf_counter()
    await _emit(state, "synthesize", "running")
    lines: list[str] = []
    seen: set[str] = set()
    for report in state["agent_reports"]:
        for f in report["findings"]:
            outcome = (f.get("debate") or {}).get("outcome")
            if f["metric"] in seen or outcome == "superseded":
                continue
            if outcome in (None, "confirmed"):  # agreed on, or upheld by the arbitrator
                seen.add(f["metric"])
                note = ", upheld in debate" if outcome else ""
                lines.append(f"- {f['metric']}: {f['value']}% {f['citation']} ({report['agent']}{note})")
    debate = state.get("debate_results") or {}
    if debate.get("consensus_narrative"):
        lines.append(f"Debate consensus: {debate['consensus_narrative']}")
    if state["verification"]["needs_review"]:
        lines.append(f"Needs human review: {', '.join(state['verification']['needs_review'])}")
    text = f"{state['question']}\n" + "\n".join(lines)
    await _emit(state, "synthesize", "complete", None, (time.perf_counter() - started) * 1000)
    return {"final_synthesis": text}


def build_workflow(
    model: str | Model | None = "local", *, human_review: ReviewMode | None = None, checkpointer: Any = None
) -> Any:
    """Compile the workflow.

    Args:
        model: model spec or instance for the arbitrator.
        human_review: ``"split"`` or ``"always"``: pause for a human (see :func:`make_debate_node`).
        checkpointer: any LangGraph checkpointer (needed with ``human_review``).

    Returns:
        The compiled graph; invoke it with ``{"question": ..., "event_callback": cb}``
        (optionally ``"datastore"`` to replace :data:`DEFAULT_DATASTORE`).
    """
    graph = StateGraph(WorkflowState)
    steps: list[tuple[str, Any]] = [
        ("classify", classify),
        ("prefetch", prefetch),
        ("rag", rag),
        ("agents", agents),
        ("debate", make_debate_node(model, human_review)),
        ("verify", verify),
        ("synthesize", synthesize),
    ]
    previous = START
    for name, action in steps:
        graph.add_node(name, action)
        graph.add_edge(previous, name)
        previous = name
    graph.add_edge(previous, END)
    return graph.compile(checkpointer=checkpointer)


def main(argv: list[str] | None = None) -> None:
    """Command line: ``seed004_research_workflow.py [QUESTION] [--model SPEC]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("question", nargs="?", default="What is Qatar's unemployment rate?")
    parser.add_argument("--model", default="local", help="provider:model spec (default: local)")
    args = parser.parse_args(argv)

    def show(stage: str, status: str, data: Any = None, latency_ms: float | None = None) -> None:
        timing = f" in {latency_ms:.0f} ms" if latency_ms is not None else ""
        print(f"[{stage}] {status}{timing}{f' {data}' if data else ''}")

    state = asyncio.run(
        build_workflow(args.model).ainvoke({"question": args.question, "event_callback": show})
    )
    print(f"\n{state['final_synthesis']}")


if __name__ == "__main__":
    main()
