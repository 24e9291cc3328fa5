"""Seed 002 (ADR-009): the adversarial debate as a LangGraph subgraph inside a parent graph.

    parent:   frame -> debate -> report
    debate:   setup -> proponent -> opponent -> moderator --continue--> proponent
                                                          +--conclude--> finalize

The subgraph comes from :func:`moot.integrations.langgraph.build_debate_graph`: one node
per speaker, the moderator closing each round with a conditional edge (conclude when its
confidence exceeds 0.8 or after the last round), a confidence-weighted decision at the
end. ``--extended`` swaps in ``adversarial-extended`` (proponent, opponent, advocate and
critic in parallel, then the refiner, then the moderator; up to 3 rounds). The parent
shares the keys ``topic``, ``context`` and ``result`` with the subgraph; every key holds
plain data, so the parent compiles with any checkpointer.

Run it (``pip install 'moot[langgraph]'``)::

    python examples/adversarial_subgraph.py "Remote work raises productivity." --model local
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph

from moot import DebateResult, EventCallback, Model
from moot.integrations.langgraph import build_debate_graph


class ParentState(TypedDict, total=False):
    """The parent graph's state; ``topic``/``context``/``result`` are the subgraph's keys."""

    claim: str
    evidence: list[str]
    topic: str
    context: Any
    result: dict[str, Any]
    report: str


async def frame(state: ParentState) -> dict[str, Any]:
    """Turn the claim and its evidence into the debate's topic and shared context."""
    return {"topic": state["claim"].strip(), "context": {"evidence": state.get("evidence", [])}}


async def report(state: ParentState) -> dict[str, Any]:
    """Summarise the debate's outcome."""
    result = DebateResult.model_validate(state["result"])
    decision = result.decision
    verdict = f"{decision.label} (confidence {decision.confidence:.2f})" if decision else result.final_answer
    rounds = f"{len(result.rounds)} round(s){', stopped early' if result.stopped_early else ''}"
    lines = [f"verdict: {verdict}", f"{rounds}, {result.usage.calls} model calls"]
    if result.fallback:
        lines.append(f"fallback: {result.fallback}")
    return {"report": "\n".join(lines)}


def build_parent(
    model: str | Model | None = "local",
    *,
    protocol: str = "adversarial",
    on_event: EventCallback | None = None,
    checkpointer: Any = None,
) -> Any:
    """Compile the parent graph with the debate subgraph as its ``debate`` node.

    Args:
        model: model spec or instance for every debate participant.
        protocol: ``adversarial`` or ``adversarial-extended``.
        on_event: called with every engine event (the custom stream has them too).
        checkpointer: any LangGraph checkpointer (the state is plain data).

    Returns:
        The compiled parent graph; invoke it with ``{"claim": ..., "evidence": [...]}``.
    """
    graph = StateGraph(ParentState)
    graph.add_node("frame", frame)
    graph.add_node("debate", build_debate_graph(protocol, model=model, on_event=on_event))
    graph.add_node("report", report)
    graph.add_edge(START, "frame")
    graph.add_edge("frame", "debate")
    graph.add_edge("debate", "report")
    graph.add_edge("report", END)
    return graph.compile(checkpointer=checkpointer)


def _print_event(event: dict[str, Any]) -> None:
    """One event of LangGraph's custom stream (moot writes every engine event there)."""
    if event.get("type") == "turn_completed":
        print(f"  round {event['round']} {event['speaker']}: {event['text'][:100]}")


def main(argv: list[str] | None = None) -> None:
    """Command line: ``adversarial_subgraph.py [CLAIM] [--model SPEC] [--extended]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("claim", nargs="?", default="Remote work raises productivity.")
    parser.add_argument("--model", default="local", help="provider:model spec (default: local)")
    parser.add_argument("--extended", action="store_true", help="use adversarial-extended")
    args = parser.parse_args(argv)
    parent = build_parent(args.model, protocol="adversarial-extended" if args.extended else "adversarial")

    async def run() -> dict[str, Any]:
        state: dict[str, Any] = {}
        inputs = {"claim": args.claim}
        async for namespace, mode, chunk in parent.astream(
            inputs, stream_mode=["custom", "values"], subgraphs=True
        ):
            if mode == "custom":
                _print_event(chunk)
            elif not namespace:  # the parent's own state
                state = chunk
        return state

    print(asyncio.run(run())["report"])


if __name__ == "__main__":
    main()
