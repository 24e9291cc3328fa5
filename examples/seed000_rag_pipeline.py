"""Seed 000 (SPEC DEBATE-001): a RAG pipeline whose debate step is behind a feature flag.

    retrieve -> compose -> debate -> finalize

``retrieve`` and ``compose`` are deterministic stand-ins (keyword retrieval over a
tiny corpus, an extractive first answer). ``debate`` is the ``answer`` preset wrapped
with :func:`moot.integrations.langgraph.debate_node`: two agents answer, critique each
other and a synthesizer merges them (5 calls, 10 s timeout). The step is skipped
without any model call when the state's ``debate_mode`` flag is false, and on a
timeout or a backend failure the pipeline keeps the composed initial answer.

Run it (``pip install 'moot[langgraph]'``)::

    python examples/seed000_rag_pipeline.py "Why is the sky blue?" --model local
    python examples/seed000_rag_pipeline.py "Why is the sky blue?" --no-debate
"""

from __future__ import annotations

import argparse
import asyncio
import re
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph

from moot import Debate, DebateResult, Model
from moot.integrations.langgraph import debate_node

CORPUS = [
    {
        "id": "physics-101",
        "text": "Sunlight is scattered by air molecules; shorter blue wavelengths scatter far more "
        "than red ones (Rayleigh scattering), so the sky looks blue.",
    },
    {
        "id": "sunset-faq",
        "text": "At sunset light crosses more air, most blue light is scattered away and the sky "
        "near the horizon looks red and orange.",
    },
    {
        "id": "violet-note",
        "text": "Violet light scatters even more than blue, but the sun emits less violet and our "
        "eyes are less sensitive to it.",
    },
    {"id": "ocean-myth", "text": "The sky is not blue because it reflects the ocean; that is a myth."},
]


class PipelineState(TypedDict, total=False):
    """The pipeline's state (seed 000's ``PipelineState``)."""

    query: str
    debate_mode: bool
    chunks: list[dict[str, str]]
    initial_answer: str
    answer: str
    debate: dict[str, Any]
    answer_source: str


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]+", text.lower()) if len(w) > 2}


async def retrieve(state: PipelineState) -> dict[str, Any]:
    """Keyword-overlap retrieval: the two best chunks."""
    query = _words(state["query"])
    ranked = sorted(CORPUS, key=lambda doc: len(query & _words(doc["text"])), reverse=True)
    return {"chunks": ranked[:2]}


async def compose(state: PipelineState) -> dict[str, Any]:
    """The initial answer: the best chunk, cited (what the pipeline answers without a debate)."""
    best = state["chunks"][0]
    return {"initial_answer": f"{best['text']} [{best['id']}]"}


async def finalize(state: PipelineState) -> dict[str, Any]:
    """Pick the answer to return and record where it came from."""
    result = state.get("debate")
    if result is None or result["skipped"]:
        source = "initial (debate skipped)"
    elif result["fallback"] is not None:
        source = f"initial (fallback: {result['fallback']})"
    else:
        source = "debate"
    return {"answer": state.get("answer") or state["initial_answer"], "answer_source": source}


def build_pipeline(
    model: str | Model | None = "local", *, overrides: dict[str, Any] | None = None, checkpointer: Any = None
) -> Any:
    """Compile the pipeline.

    Args:
        model: model spec or instance for the debate.
        overrides: protocol overrides for the ``answer`` preset (``timeout``, ``retry``...).
        checkpointer: any LangGraph checkpointer (the state is plain data).

    Returns:
        The compiled graph; invoke it with ``{"query": ..., "debate_mode": bool}``.
    """
    step = debate_node(
        Debate("answer", model=model, overrides=overrides),
        topic_key="query",
        context_key="chunks",
        initial_answer_key="initial_answer",
        output_key="debate",
        answer_key="answer",
        debate_mode_key="debate_mode",
    )
    graph = StateGraph(PipelineState)
    graph.add_node("retrieve", retrieve)
    graph.add_node("compose", compose)
    graph.add_node("debate", step)
    graph.add_node("finalize", finalize)
    graph.add_edge(START, "retrieve")
    graph.add_edge("retrieve", "compose")
    graph.add_edge("compose", "debate")
    graph.add_edge("debate", "finalize")
    graph.add_edge("finalize", END)
    return graph.compile(checkpointer=checkpointer)


def main(argv: list[str] | None = None) -> None:
    """Command line: ``seed000_rag_pipeline.py [QUERY] [--model SPEC] [--no-debate]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("query", nargs="?", default="Why is the sky blue?")
    parser.add_argument("--model", default="local", help="provider:model spec (default: local)")
    parser.add_argument("--no-debate", action="store_true", help="feature flag debate_mode=false")
    args = parser.parse_args(argv)
    pipeline = build_pipeline(args.model)
    state = asyncio.run(pipeline.ainvoke({"query": args.query, "debate_mode": not args.no_debate}))
    print(f"answer ({state['answer_source']}):\n{state['answer']}")
    result = DebateResult.model_validate(state["debate"])
    print(f"\n{result.usage.calls} model calls, {result.timings.wall_ms:.0f} ms")


if __name__ == "__main__":
    main()
