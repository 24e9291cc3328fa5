"""The three seed graphs as a LangGraph app: ``langgraph dev`` serves them from ``langgraph.json``.

* ``seed000_pipeline``: seed 000's RAG pipeline, the ``answer`` debate as one node
  (:func:`moot.integrations.langgraph.debate_node`); input ``{"query": ..., "debate_mode": true}``.
* ``seed002_debate``: seed 002's parent graph with the ``adversarial`` debate as a subgraph
  (:func:`moot.integrations.langgraph.build_debate_graph`); input ``{"claim": ...}``.
* ``seed004_review``: seed 004's research workflow; a split arbitration pauses for human review
  (``interrupt()``); input ``{"question": ...}``, resume with
  ``Command(resume={"decisions": {"<metric>": {"agent": "<name>"}}})``.

The model is ``$MOOT_MODEL`` (e.g. ``openai:gpt-4o-mini``; ``openai:NAME`` with
``OPENAI_BASE_URL`` for any OpenAI-compatible server), else the embedded ``local`` model. The
server gives every graph its checkpointer: the state is plain data, so each run is durable and
every engine event reaches the client on the ``custom`` stream.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the seed examples next to this folder

import adversarial_subgraph  # noqa: E402
import seed000_rag_pipeline  # noqa: E402
import seed004_research_workflow  # noqa: E402

seed000_pipeline = seed000_rag_pipeline.build_pipeline(None)
seed002_debate = adversarial_subgraph.build_parent(None)
seed004_review = seed004_research_workflow.build_workflow(None, human_review="split")
