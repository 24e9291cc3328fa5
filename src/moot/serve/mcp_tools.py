"""moot's MCP server (the official ``mcp`` SDK): ``debate``, ``arbitrate`` and ``absa`` as tools.

Served over stdio by ``moot mcp`` and over streamable HTTP at ``/mcp`` by ``moot serve``. Each tool
runs under the same gate as the chat completions (:class:`~moot.serve.service.DebateService`) and
is recorded in the store like any run, its config naming the door (``mcp``, or ``serve`` when it
came through ``moot serve``). A tool returns its result as structured content plus a short text;
a client that sent a progress token gets one progress notification per finished turn; a failure
(an unknown preset, a bad argument, a debate without an answer, a full server) is an MCP tool error
(``is_error``) whose text names the cause.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel, Field

from .._version import __version__
from ..errors import MootError, error_text
from ..transcript import Turn
from .service import DebateService, turn_text

__all__ = ["build_mcp"]

Result = TypeVar("Result", bound=BaseModel)

_SHORT = 600
"""Characters of the answer in a tool's text (the whole result is the structured content)."""


def _short(text: str | None) -> str:
    text = (text or "").strip()
    return text if len(text) <= _SHORT else text[: _SHORT - 1] + "…"


async def _recorded(
    service: DebateService, tool: str, work: Callable[[], Awaitable[Result]], summary: Callable[[Result], str]
) -> CallToolResult:
    """Run ``work`` as a recorded run of ``service``; its result as structured content and a text."""
    try:
        result, run_id = await service.run_other(work, {"tool": tool})
    except MootError as exc:
        raise ToolError(error_text(exc)) from None
    data = result.model_dump(mode="json") | {"run_id": run_id}
    text = f"{summary(result)}\n\nmoot run {run_id}"
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


def build_mcp(service: DebateService) -> MCPServer[Any]:
    """The MCP server whose tools run on ``service``."""
    # MCPServer calls logging.basicConfig: a handler on the root logger, which would print every
    # warning of the "moot" logger a second time (and past --quiet). The root is left as it was.
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    server: MCPServer[Any] = MCPServer(
        "moot",
        version=__version__,
        instructions="Multi-agent debate: personas argue, a judge decides. "
        "`debate` answers a question by debate; `arbitrate` settles contradicting agent reports; "
        "`absa` finds the sentiment of each aspect of a sentence.",
        log_level="WARNING",
    )
    for handler in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(handler)
    root.setLevel(level)

    @server.tool(
        description="Debate a question among personas (a preset such as answer, adversarial, panel) and "
        "return the final answer, the decision and the run id. Progress: one notification per finished turn."
    )
    async def debate(
        topic: Annotated[str, Field(min_length=1, description="The question or claim to debate.")],
        ctx: Context,
        preset: Annotated[
            str, Field(description="A preset or protocol name: moot serve's /v1/models.")
        ] = "answer",
        context: Annotated[str | None, Field(description="Shared context every persona reads.")] = None,
        model: Annotated[
            str | None, Field(description="PROVIDER:MODEL to run on (default: the server's --model).")
        ] = None,
    ) -> CallToolResult:
        try:
            configured = service.debate_for(preset, model, {})
        except MootError as exc:
            raise ToolError(error_text(exc)) from None
        names = {k: p.name for k, p in configured.protocol.personas.items()}
        done = 0

        async def on_turn(turn: Turn) -> None:
            nonlocal done
            done += 1
            await ctx.report_progress(done, None, turn_text(turn, names).strip()[:200])

        record = {"served_model": f"moot:{preset}" + (f"@{model}" if model else ""), "tool": "debate"}
        try:
            outcome = await service.run_debate(
                configured, topic, context=context, record=record, on_turn=on_turn
            )
        except MootError as exc:
            raise ToolError(error_text(exc)) from None
        result = outcome.result
        assert result is not None  # a cancelled debate re-raised its cancellation
        if result.final_answer is None or not result.final_answer.strip():
            reason = result.fallback or "every turn failed"
            raise ToolError(f"the debate produced no answer: {reason} (run {outcome.run_id})")
        data = {
            "run_id": outcome.run_id,
            "final_answer": result.final_answer,
            "fallback": result.fallback,
            "decision": result.decision.model_dump(mode="json") if result.decision else None,
            "failed_turns": result.failed_turns,
            "usage": result.usage.model_dump(mode="json"),
            "view_url": service.view_link(outcome.run_id),
        }
        note = f" (fallback: {result.fallback})" if result.fallback else ""
        text = f"{_short(result.final_answer)}{note}\n\nmoot run {outcome.run_id}"
        return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)

    @server.tool(
        description="Arbitrate contradicting agent reports (seed 004): find the contradictions, rule on "
        "each, build the consensus. "
        "Each report: {agent, findings: [{metric, value, citation, confidence}], narrative}."
    )
    async def arbitrate(
        reports: Annotated[list[dict[str, Any]], Field(min_length=1, description="The agents' reports.")],
    ) -> CallToolResult:
        from ..arbitration import AgentReport, ArbitrationResult
        from ..arbitration import arbitrate as run_arbitration

        try:
            parsed = [AgentReport.model_validate(r) for r in reports]
        except ValueError as exc:
            raise ToolError(f"invalid report: {exc}") from None
        store = str(service.settings.store)

        async def work() -> ArbitrationResult:
            return await run_arbitration(parsed, model=service.settings.model, store=store)

        def summary(result: ArbitrationResult) -> str:
            return (
                f"{result.contradictions_found} contradiction(s), {result.resolved} resolved, "
                f"{result.flagged_for_review} flagged for review. {_short(result.consensus_narrative)}"
            )

        return await _recorded(service, "arbitrate", work, summary)

    @server.tool(
        description="Aspect-based sentiment of one sentence: its overall label and each aspect's polarity."
    )
    async def absa(
        sentence: Annotated[str, Field(min_length=1, description="The sentence to analyse.")],
    ) -> CallToolResult:
        from ..absa import run_absa
        from ..absa.schemas import FinalResult

        store = str(service.settings.store)

        async def work() -> FinalResult:
            return await run_absa(sentence, model=service.settings.model, store=store)

        def summary(result: FinalResult) -> str:
            aspects = ", ".join(f"{a.get('aspect', '?')}: {a.get('polarity', '?')}" for a in result.aspects)
            return f"{result.label} ({result.confidence:.2f}); aspects: {aspects or 'none'}"

        return await _recorded(service, "absa", work, summary)

    return server
