"""LangGraph integration (extra ``moot[langgraph]``): a debate as a node or as a subgraph.

Two ways to put a debate into a LangGraph ``StateGraph``:

* :func:`debate_node` wraps a whole :class:`~moot.Debate` run in one node. It suits
  pipelines where the debate is one step among many (seed 000: retrieve -> compose ->
  *debate* -> finalize). It runs under ``app.invoke`` and ``app.ainvoke`` alike, and
  ``await node(state)`` calls it in any framework (LangGraph not needed).
* :func:`build_debate_graph` compiles a protocol into a LangGraph subgraph with one
  node per speaker, the moderator and judge as nodes of their own, sequential stages
  as edges, concurrent groups as fan-out/fan-in, and a ``continue``/``conclude``
  conditional edge closing each round (seed 002, ADR-009)::

      setup -> proponent -> opponent -> moderator --continue--> proponent
                                                  +--conclude--> finalize

  The nodes drive the engine's own run object, so prompting, structured output
  with validation and repair, visibility rules, budgets, the timeout, the
  early-stop rule and the aggregation are exactly those of :meth:`Debate.run`, and
  a graph run makes the same model calls in the same order.

Both keep the graph state plain JSON data, so a graph runs under any checkpointer
(``MemorySaver``, ``AsyncSqliteSaver``, the Agent Server's) and with
``LANGGRAPH_STRICT_MSGPACK=true``: the node writes the result as a dict
(``DebateResult.model_validate(state[output_key])`` gives the object back); the subgraph
keeps each finished turn as a dict under ``turns`` and the live engine run (models,
callbacks) outside the state, keyed by the run's id. A subgraph run stopped between turns
(a killed process, a restarted server) resumes on the same thread from its last
finished turn, and sends only the remaining requests.

Every engine event goes to LangGraph's custom stream as a small JSON dict (the table in
:mod:`moot.graph_stream`); read it with ``stream_mode="custom"`` (and
``subgraphs=True`` for a nested graph).

Protocols with many rounds on LangGraph releases older than 1.0 (default recursion limit
25) may need ``config={"recursion_limit": ...}``.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import functools
import inspect
import time
import typing
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Required, TypedDict

import moot.graph_stream as _lg_stream
import moot.integrations._lg_review as _lg_review
import moot.observe as observe

from .. import aio
from ..engine import Debate, DebateRun, EventCallback, RoleModel
from ..errors import MissingDependencyError, UsageError
from ..human_review import ReviewMode, check_mode, require_checkpointer, run_once, run_once_sync
from ..models import ModelLike
from ..protocol import Protocol
from ..transcript import DebateResult, Event, Turn

if TYPE_CHECKING:
    from langgraph.graph.state import CompiledStateGraph

__all__ = [
    "DebateGraphInput",
    "DebateGraphOutput",
    "DebateGraphState",
    "NodeFunction",
    "build_debate_graph",
    "debate_node",
]


class NodeFunction(typing.Protocol):
    """A graph node: ``await node(state)`` returns a partial state update.

    :func:`debate_node`'s is also a LangChain ``Runnable`` with both paths (``invoke`` and
    ``ainvoke``) when LangGraph is installed, so a graph runs it under either.

    ``state`` is any mapping (typed ``Any`` so that LangGraph's ``add_node`` accepts the
    node for a graph of any state schema).
    """

    __name__: str

    def __call__(self, state: Any) -> Coroutine[Any, Any, dict[str, Any]]:
        """Run the node on ``state``."""
        ...


ProtocolSpec = Protocol | str | Path | dict[str, Any]


def _listeners(on_event: EventCallback | None) -> EventCallback:
    """One callback: the custom stream, then the caller's ``on_event``."""

    async def listen(event: Event) -> None:
        _lg_stream.stream_event(event)
        if on_event is not None:
            out = on_event(event)
            if inspect.isawaitable(out):
                await out

    return listen


def _langgraph_ids() -> dict[str, str]:
    """The LangGraph thread and run this node runs in (empty outside a graph)."""
    try:
        from langgraph.config import get_config
    except ImportError:
        return {}
    try:
        config = get_config()
    except RuntimeError:
        return {}
    conf, meta = config.get("configurable") or {}, config.get("metadata") or {}
    ids = {
        "thread_id": conf.get("thread_id") or meta.get("thread_id"),
        "run_id": conf.get("run_id") or meta.get("run_id") or config.get("run_id"),
        "graph_id": meta.get("graph_id") or conf.get("graph_id"),
        "checkpoint_ns": conf.get("checkpoint_ns"),
    }
    return {k: str(v) for k, v in ids.items() if v}


@contextmanager
def _cross_reference() -> Iterator[None]:
    """A run recorded inside (``store=``) gets the LangGraph thread and run ids in its config."""
    ids = _langgraph_ids()
    if not ids:
        yield
        return
    with observe.annotate(config={"langgraph": ids}):
        yield


def _kept_because(result: DebateResult) -> str | None:
    """Why the node leaves the state's answer as it was, or None to write ``final_answer``."""
    answer = result.final_answer
    if answer is None:
        return "the debate produced no answer" + (f" ({result.fallback})" if result.fallback else "")
    if not answer.strip():
        return "the debate's answer is blank" + (f" ({result.fallback})" if result.fallback else "")
    return None


def _answer_update(result: DebateResult, answer_key: str) -> dict[str, Any]:
    """``{answer_key: final_answer}``, or nothing (said on the custom stream) when the answer is kept."""
    kept = _kept_because(result)
    if kept is None:
        return {answer_key: result.final_answer}
    if not result.skipped:
        _lg_stream.write({"type": "answer_kept", "source": "moot", "debate_id": result.id, "reason": kept})
    return {}


# -- debate_node ------------------------------------------------------------------------------------
def debate_node(
    debate_or_protocol: Debate | ProtocolSpec,
    *,
    model: ModelLike | None = None,
    topic_key: str = "topic",
    context_key: str = "context",
    initial_answer_key: str | None = None,
    output_key: str = "debate",
    answer_key: str | None = None,
    debate_mode_key: str | None = None,
    on_event: EventCallback | None = None,
    human_review: ReviewMode | None = None,
    store: Any = None,
    budget_usd: float | None = None,
    judge_blind: bool | None = None,
    judge_shuffle: bool | None = None,
    judge_audit: bool | None = None,
    judge_swap_robust: bool | None = None,
) -> NodeFunction:
    """A graph node that runs a whole debate on the state's topic and context.

    The node reads ``state[topic_key]`` (required text), ``state[context_key]``
    (optional, any JSON-able value) and, if ``initial_answer_key`` is given, the
    answer to fall back on. It returns a partial update that puts the
    :class:`~moot.DebateResult` as JSON data (a dict, so that any checkpointer stores
    it; ``DebateResult.model_validate(state[output_key])`` gives the object back) under
    ``output_key`` and, if ``answer_key`` is given and the result has a non-blank one,
    ``result.final_answer`` under ``answer_key``. Run-time failures
    never raise: on a timeout, an unreachable backend or a failed turn the result
    falls back (``result.fallback`` says why) to the initial answer (seed 000).

    Args:
        debate_or_protocol: a configured Debate, or a protocol (preset name, YAML
            path, dict or Protocol) to build one from.
        model: the model for a protocol given by name; must be None with a Debate.
        topic_key: state key holding the topic.
        context_key: state key holding the shared context (missing is fine).
        initial_answer_key: state key holding the answer to fall back on.
        output_key: state key that receives the DebateResult, as a dict.
        answer_key: state key that receives the final answer.
        debate_mode_key: state key of a feature flag; when given and the flag is
            missing or false, the debate is skipped without any model call: the
            result has ``skipped=True`` and ``final_answer`` is the initial answer.
        on_event: called with every event of every run (besides the custom stream).
        human_review: ``"split"`` pauses the graph with ``interrupt()`` for a split or
            low-confidence decision or a fallback, ``"always"`` for every outcome; resume
            with ``Command(resume=...)`` (:mod:`moot.human_review`). The decision is the
            result's ``human_review`` turn; an answer given replaces the final answer. The
            debate runs as a LangGraph task, so resuming does not run it again. Needs a
            checkpointer.
        store: record each debate the node runs in a run store, as :class:`~moot.Debate`'s
            ``store=`` does (a path, an open ``RunStore``, True for the default store); a Debate
            passed in keeps its own.
        budget_usd: a US-dollar cap per debate, as :class:`~moot.Debate`'s ``budget_usd=``; a
            Debate passed in keeps its own.
        judge_blind: blind deciding steps, as :class:`~moot.Debate`'s ``judge_blind=``
            (docs/judging.md); with a Debate, give them to the Debate.
        judge_shuffle: shuffled deciding steps (``judge_shuffle=``).
        judge_audit: the swap audit (``judge_audit=``), in the result's ``metrics["judge_audit"]``.
        judge_swap_robust: position-sensitive decisions made undecided (``judge_swap_robust=``).

    Returns:
        The node, named ``debate_<protocol>``: ``await node(state)`` returns the update; with
        LangGraph installed it is also a ``Runnable`` whose ``invoke`` runs the debate on an
        event loop of its own, so ``app.invoke(...)`` works as ``await app.ainvoke(...)`` does.

    Raises:
        UsageError: ``model`` or ``store`` given together with a Debate, an unknown ``human_review``;
            (when the node runs) the topic is missing or empty, or ``human_review`` without
            a checkpointer.
        ConfigError: the protocol is invalid.
    """
    if isinstance(debate_or_protocol, Debate):
        if model is not None:
            raise UsageError("pass model= to the Debate, not to debate_node(), when giving a Debate")
        if store is not None or budget_usd is not None:
            raise UsageError(
                "pass store= and budget_usd= to the Debate, not to debate_node(), when giving a Debate"
            )
        if any(o is not None for o in (judge_blind, judge_shuffle, judge_audit, judge_swap_robust)):
            raise UsageError("pass judge_*= to the Debate, not to debate_node(), when giving a Debate")
        debate = debate_or_protocol
    else:
        debate = Debate(
            debate_or_protocol,
            model=model,
            store=store,
            budget_usd=budget_usd,
            judge_blind=judge_blind,
            judge_shuffle=judge_shuffle,
            judge_audit=judge_audit,
            judge_swap_robust=judge_swap_robust,
        )
    mode = check_mode(human_review)
    name = f"debate_{debate.protocol.name}".replace("-", "_")
    listeners = _listeners(on_event)

    def start(state: Mapping[str, Any]) -> Callable[[], Coroutine[Any, Any, dict[str, Any]]]:
        """Check the state; the debate's run, as JSON data (a task's result must be plain data)."""
        topic = state.get(topic_key)
        if not isinstance(topic, str):
            raise UsageError(f"debate node: the state has no text under {topic_key!r}")
        initial = state.get(initial_answer_key) if initial_answer_key else None
        enabled = bool(state.get(debate_mode_key, False)) if debate_mode_key else True
        if mode is not None:
            require_checkpointer(f"debate node {name}")

        async def run() -> dict[str, Any]:
            with _cross_reference():
                result = await debate.run(
                    topic,
                    context=state.get(context_key),
                    initial_answer=None if initial is None else str(initial),
                    debate_mode=enabled,
                    on_event=listeners,
                )
            return result.model_dump(mode="json")

        return run

    async def node(state: Mapping[str, Any]) -> dict[str, Any]:
        run = start(state)
        # With a review, a task: when the graph resumes after it, the debate is not run again.
        return finish(await run() if mode is None else await run_once(f"{name}_run", run))

    def invoke(state: Mapping[str, Any]) -> dict[str, Any]:
        run = start(state)

        def blocking() -> dict[str, Any]:
            return _blocking(_closing(run(), debate))

        return finish(blocking() if mode is None else run_once_sync(f"{name}_run", blocking))

    def finish(data: dict[str, Any]) -> dict[str, Any]:
        """The state update from the debate's result (after the human review, if any)."""
        result = DebateResult.model_validate(data)
        if mode is not None and _lg_review.review(result, mode):
            _record_review(debate, result)
        update: dict[str, Any] = {output_key: result.model_dump(mode="json")}
        return update | (_answer_update(result, answer_key) if answer_key else {})

    node.__name__ = node.__qualname__ = invoke.__name__ = invoke.__qualname__ = name
    return _with_sync_path(node, invoke)


async def _closing(run: Coroutine[Any, Any, dict[str, Any]], debate: Debate) -> dict[str, Any]:
    """``run``, then the debate's connection pools closed: they must not outlive this event loop.

    As in :meth:`Debate.run_sync`; the async path keeps them for the caller's loop.
    """
    try:
        return await run
    finally:
        await debate.aclose()


def _blocking(coro: Coroutine[Any, Any, dict[str, Any]]) -> dict[str, Any]:
    """Run ``coro`` to the end on an event loop of its own.

    From a thread whose loop is running (``app.invoke`` called inside async code, a notebook)
    ``asyncio.run`` is refused, so the loop runs in a worker thread, in this thread's context
    (LangGraph's config, stream writer and interrupts travel in context variables).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return aio.run(coro)
    context = contextvars.copy_context()
    with ThreadPoolExecutor(1, thread_name_prefix="moot-debate-node") as pool:
        return pool.submit(context.run, aio.run, coro).result()


@functools.cache
def _runnable_node_class() -> type[Any] | None:
    """A LangChain ``RunnableLambda`` that can also be awaited as ``node(state)``; None without it.

    LangGraph takes a node's sync and async functions from a Runnable; from a plain async
    function it gets no sync path, and ``app.invoke`` raises "No synchronous function provided".
    """
    try:
        from langchain_core.runnables import RunnableLambda
    except ImportError:
        return None

    AsyncNode = Callable[[Mapping[str, Any]], Coroutine[Any, Any, dict[str, Any]]]

    class RunnableNode(RunnableLambda[Any, dict[str, Any]]):
        """Both paths of one node; calling it calls the async function itself, outside any Runnable."""

        def __init__(self, invoke: Callable[[Mapping[str, Any]], dict[str, Any]], node: AsyncNode) -> None:
            super().__init__(invoke, afunc=node, name=node.__name__)
            self.node = node
            self.__name__ = node.__name__

        def __call__(self, state: Any) -> Coroutine[Any, Any, dict[str, Any]]:
            return self.node(state)

    return RunnableNode


def _with_sync_path(
    node: Callable[[Mapping[str, Any]], Coroutine[Any, Any, dict[str, Any]]],
    invoke: Callable[[Mapping[str, Any]], dict[str, Any]],
) -> NodeFunction:
    """One node with both paths: ``node`` for ``ainvoke`` and ``await``, ``invoke`` for ``invoke``."""
    cls = _runnable_node_class()
    if cls is None:  # no LangChain, hence no LangGraph: ``await node(state)`` is the only caller
        return typing.cast(NodeFunction, node)
    return typing.cast(NodeFunction, cls(invoke, node))


def _record_review(debate: Debate, result: DebateResult) -> None:
    """Tell the run's observers what the person decided, once they have.

    The debate's run ended before the review (its node, or ``finalize``, finished it); it is
    reopened under its id, takes a ``human_review`` event and ends again with the reviewed
    result, so a stored run shows the answer the graph went on with, and who gave it.
    """
    start = dataclasses.replace(debate.run_start(result.topic), run_id=result.id, continues=result.id)
    handle = observe.open_run(start, **debate.observe_options)
    review = result.human_review
    decision = dict(review.content or {}) if review is not None else {}
    data = {"reason": decision.get("reason"), "decision": decision}
    handle.emit(observe.PipelineEvent(kind="human_review", data=data))
    handle.end("fell_back" if result.degraded else "complete", result)


# -- build_debate_graph: state ----------------------------------------------------------------------
def _turns(old: list[dict[str, Any]] | None, new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``turns`` reducer: finished turns accumulate (``setup`` overwrites them)."""
    return [*(old or []), *new]


def _first_reason(old: str, new: str) -> str:
    """The ``fallback`` reducer: the first reason wins, as in the engine (``setup`` overwrites it)."""
    return old or new


def _overwrite(value: Any) -> dict[str, Any]:
    """LangGraph's plain-data form of ``Overwrite(value)``: bypass a channel's reducer."""
    return {"__overwrite__": value}


class DebateGraphInput(TypedDict, total=False):
    """What the debate subgraph reads from its caller's state."""

    topic: Required[str]
    """The question, claim or sentence."""
    context: Any
    """Shared context shown to every participant (JSON-able)."""
    initial_answer: str | None
    """The answer to fall back on (seed 000)."""
    debate_mode: bool
    """False skips the debate (no model call); missing means True."""


class DebateGraphOutput(TypedDict):
    """What the debate subgraph hands back to its caller's state."""

    result: dict[str, Any]
    """The finished result as JSON data (``DebateResult.model_validate`` gives the object)."""


class DebateGraphState(DebateGraphInput, total=False):
    """The debate subgraph's full state: plain data only, so any checkpointer can store it."""

    run_id: str
    """The engine run's id (the result's ``id``); the live run is kept outside the state under it."""
    run: dict[str, Any]
    """Set by ``setup``: ``skipped``, ``started_at`` (Unix time) and ``deadline_s``."""
    round: int
    """The round in progress (1-based; 0 when skipped)."""
    turns: Annotated[list[dict[str, Any]], _turns]
    """Every finished turn so far (seed 002's arguments), as ``Turn`` JSON plus its ``stage``."""
    fallback: Annotated[str, _first_reason]
    """The first reason the debate must fall back ("" while there is none)."""
    elapsed_s: float
    """Seconds the run had spent at the last round's end (a resumed run keeps its deadline)."""
    stopped_early: bool
    """The early-stop rule ended the debate."""
    concluded: bool
    """Set by the round's closing node: True ends the debate (``conclude``), False runs another round."""
    result: dict[str, Any]
    """The finished result (set by ``finalize``)."""


@dataclass
class _Live:
    """The live side of one graph run, outside the state: the engine run and what it published."""

    run: DebateRun
    skipped: bool = False
    published: set[int] = field(default_factory=set)
    """``id()`` of the run's turns already written to the state."""
    starts: dict[tuple[int, int], list[asyncio.Event]] = field(default_factory=dict)

    async def take_turn(self, number: int, stage: int, position: int, size: int) -> None:
        """Start the speakers of a concurrent group in ``order``, as ``asyncio.gather`` does.

        LangGraph launches a superstep's nodes sorted by name; each speaker waits until the one
        before it in the group has started (reached its model call), then starts its own.
        """
        starts = self.starts.setdefault((number, stage), [asyncio.Event() for _ in range(size)])
        if position:
            await starts[position - 1].wait()
        starts[position].set()  # set() does not yield: this node runs on to its first real await

    def new_turns(self) -> list[dict[str, Any]]:
        """The run's finished turns not yet in the state, as JSON data (each published once)."""
        run = self.run
        out = []
        for turn in run.result.turns(include_judge=True):
            if id(turn) in self.published:
                continue
            self.published.add(id(turn))
            out.append({**turn.model_dump(mode="json"), "stage": run.stage_of(turn)})
        return out


# -- build_debate_graph -----------------------------------------------------------------------------
def _require_langgraph() -> Any:
    try:
        from langgraph.graph import END, START, StateGraph
    except ImportError:
        raise MissingDependencyError("langgraph", "langgraph") from None
    return StateGraph, START, END


def _node_names(protocol: Protocol) -> tuple[list[list[str]], dict[str, str]]:
    """Unique node names: one per speaker slot (the persona key), then the fixed steps."""
    taken: set[str] = set()

    def claim(base: str) -> str:
        name, n = base, 1
        while name in taken:
            n += 1
            name = f"{base}_{n}"
        taken.add(name)
        return name

    stages = [[claim(key) for key in stage] for stage in protocol.stages()]
    closer = "moderator" if protocol.moderator is not None else "end_round"
    fixed = {step: claim(step) for step in ("setup", closer, "judge", "finalize", "review")}
    fixed["closer"] = fixed[closer]
    return stages, fixed


def _iter_slots(protocol: Protocol, stages: list[list[str]]) -> Iterator[tuple[int, int, str, str]]:
    """(stage index, position in the stage, persona key, node name) for every speaker slot."""
    for index, (keys, names) in enumerate(zip(protocol.stages(), stages, strict=True)):
        for position, (key, name) in enumerate(zip(keys, names, strict=True)):
            yield index, position, key, name


NodeAction = Callable[[DebateGraphState], Awaitable[dict[str, Any]]]


class _DebateNodes:
    """The node actions of one compiled debate graph; each drives the engine run of its graph run.

    Together they do what :meth:`DebateRun.execute` does, one step per node: ``setup`` begins
    the run, each speaker node is :meth:`DebateRun.speak`, the round's closing node is
    :meth:`DebateRun.moderate` then :meth:`DebateRun.next_round`, ``judge`` is
    :meth:`DebateRun.judge` and ``finalize`` is :meth:`DebateRun.finish`. Each node writes the
    turns it finished to the state. The live runs are kept here, by run id; a node that finds
    none for its state (another process, a restart) rebuilds it from the state's turns.
    """

    def __init__(
        self,
        debate: Debate,
        stages: list[list[str]],
        on_event: EventCallback | None,
        human_review: ReviewMode | None = None,
    ) -> None:
        self.debate = debate
        self.human_review = human_review
        self.sizes = [len(stage) for stage in stages]
        self.on_event = _listeners(on_event)
        self.live: dict[str, _Live] = {}

    async def setup(self, state: DebateGraphState) -> dict[str, Any]:
        # The flag in the state, and the protocol's own `enabled: false` (seed 003), both skip.
        enabled = state.get("debate_mode", True) and self.debate.protocol.enabled
        if self.human_review is not None:
            require_checkpointer(f"debate graph {self.debate.protocol.name}")
        run = self.debate.start(
            state.get("topic") or "",
            context=state.get("context"),
            initial_answer=state.get("initial_answer"),
            on_event=self.on_event,
            resolve=enabled,
        )
        self.live[run.id] = _Live(run, skipped=not enabled)
        fresh = {"run_id": run.id, "turns": _overwrite([]), "fallback": _overwrite(""), "elapsed_s": 0.0}
        if not enabled:
            info = {"skipped": True, "started_at": run.result.timings.started_at, "deadline_s": None}
            return {**fresh, "run": info, "round": 0, "concluded": True}
        with _cross_reference():
            await run.begin()
        info = {"skipped": False, "started_at": time.time(), "deadline_s": run.result.timings.deadline_s}
        return {**fresh, "run": info, "round": 1, "concluded": False, "stopped_early": False}

    def _live(self, state: DebateGraphState) -> _Live:
        """The live run for this state; rebuilt from the state when this process has none."""
        run_id = state["run_id"]
        live = self.live.get(run_id)
        recorded = len(state.get("turns") or [])
        # A live run behind the state, or ahead of it by more than one superstep (time travel to
        # an earlier checkpoint), is not this state's run.
        if live is None or not recorded <= len(live.published) <= recorded + sum(self.sizes) + 1:
            live = self.live[run_id] = self._restore(state)
        return live

    def _restore(self, state: DebateGraphState) -> _Live:
        info = state.get("run") or {}
        skipped = bool(info.get("skipped"))
        run = self.debate.start(
            state.get("topic") or "",
            context=state.get("context"),
            initial_answer=state.get("initial_answer"),
            on_event=self.on_event,
            resolve=not skipped,
        )
        run.id = run.result.id = state["run_id"]
        turns = [(Turn.model_validate(t), int(t.get("stage", 0))) for t in state.get("turns") or []]
        run.restore(
            turns,
            rounds=state.get("round", 0),
            fallback=state.get("fallback") or None,
            stopped_early=bool(state.get("stopped_early")),
            deadline_s=info.get("deadline_s"),
            elapsed_s=float(state.get("elapsed_s") or 0.0),
            started_at=float(info.get("started_at") or time.time()),
        )
        # Observed from here on under the state's id: a recorder reopens the stored run (begun by
        # another process, or by this one before a node failed) rather than losing the rest of it.
        run.observe(resumed=True)
        live = _Live(run, skipped=skipped)
        live.published = {id(turn) for turn, _ in turns}
        return live

    def _update(self, live: _Live, **fields: Any) -> dict[str, Any]:
        """The node's state update: the turns it finished, the fallback once there is one."""
        update = {"turns": live.new_turns(), **fields}
        if live.run.fallback is not None:
            update["fallback"] = live.run.fallback
        return update

    def _step(self, action: Callable[[_Live, DebateGraphState], Awaitable[dict[str, Any]]]) -> NodeAction:
        """A node running ``action`` on the live run; a node cut short drops its live run.

        What a cancelled or failed node did is not in the state (LangGraph reruns the node), so the
        next node rebuilds the run from the state instead of trusting the live one.
        """

        async def node(state: DebateGraphState) -> dict[str, Any]:
            live = self._live(state)
            try:
                return await action(live, state)
            except BaseException as exc:
                self.live.pop(state["run_id"], None)
                live.run.fail(exc)  # the stored run says so; a rerun of the node reopens it
                raise

        return node

    def speaker(self, index: int, position: int, key: str) -> NodeAction:
        async def speak(live: _Live, state: DebateGraphState) -> dict[str, Any]:
            number = state["round"]
            if self.sizes[index] > 1:
                await live.take_turn(number, index, position, self.sizes[index])
            await live.run.speak(key, number, index)
            return self._update(live)

        return self._step(speak)

    async def _close_round(self, live: _Live, state: DebateGraphState) -> dict[str, Any]:
        run, number = live.run, state["round"]
        await run.moderate(number)
        if run.next_round(number):
            return self._update(live, round=number + 1, concluded=False, elapsed_s=run.elapsed_s())
        return self._update(
            live, concluded=True, stopped_early=run.result.stopped_early, elapsed_s=run.elapsed_s()
        )

    async def _judge(self, live: _Live, state: DebateGraphState) -> dict[str, Any]:
        await live.run.judge()
        return self._update(live, elapsed_s=live.run.elapsed_s())

    async def _finalize(self, live: _Live, state: DebateGraphState) -> dict[str, Any]:
        result = await (live.run.skip() if live.skipped else live.run.finish())
        self.live.pop(state["run_id"], None)
        return self._update(live, result=result.model_dump(mode="json"))

    async def review(self, state: DebateGraphState) -> dict[str, Any]:
        """Pause for a human when ``human_review`` says so (this node reruns alone on resume)."""
        result = DebateResult.model_validate(state["result"])
        if not _lg_review.review(result, self.human_review):
            return {}
        _record_review(self.debate, result)
        return {"result": result.model_dump(mode="json")}

    @property
    def close_round(self) -> NodeAction:
        return self._step(self._close_round)

    @property
    def judge(self) -> NodeAction:
        return self._step(self._judge)

    @property
    def finalize(self) -> NodeAction:
        return self._step(self._finalize)


def build_debate_graph(
    protocol: ProtocolSpec,
    *,
    model: ModelLike | None = None,
    role_models: Mapping[str, RoleModel] | None = None,
    on_event: EventCallback | None = None,
    checkpointer: Any = None,
    human_review: ReviewMode | None = None,
    store: Any = None,
    budget_usd: float | None = None,
    judge_blind: bool | None = None,
    judge_shuffle: bool | None = None,
    judge_audit: bool | None = None,
    judge_swap_robust: bool | None = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Compile a protocol into a LangGraph subgraph with one node per speaker (seed 002).

    Nodes: ``setup``; one per speaker slot of ``order``, named by persona key (a key
    that appears twice gets ``_2``); ``moderator`` when the protocol has one, else a
    call-free ``end_round`` barrier; ``judge`` when it has one; ``finalize``. Edges:
    each stage to the next (a concurrent group fans out from the previous stage and
    fans in to the next, so its speakers run in parallel); the last stage to the
    moderator; a conditional edge from the moderator, ``continue`` back to the first
    stage or ``conclude`` to the judge (or ``finalize``); ``setup`` goes straight to
    ``finalize`` when ``debate_mode`` is false.

    A round concludes when it is the last one, when the early-stop rule fires (e.g.
    moderator confidence > 0.8) or after a fallback condition (timeout, budget,
    failed turn under ``on_turn_failure: fallback``). After a fallback the remaining
    nodes pass through without calling a model and ``finalize`` falls back as
    :meth:`Debate.run` does.

    Input state: :class:`DebateGraphInput` (``topic`` required). Output state:
    :class:`DebateGraphOutput`, i.e. ``{"result": {...}}`` (the DebateResult as JSON
    data), so the compiled graph can be added as a node to a parent graph whose state
    has those keys. The state is plain data throughout (:class:`DebateGraphState`):
    compile with any checkpointer, or none.

    Args:
        protocol: a Protocol, preset name, YAML path or dict.
        model: the default model spec or instance (None: ``local``).
        role_models: per-persona models, as for :class:`~moot.Debate`.
        on_event: called with every event of every run (besides the custom stream).
        checkpointer: a LangGraph checkpointer when the debate is the top-level graph (as a
            node of a parent graph it uses the parent's).
        human_review: ``"split"`` or ``"always"``: a ``review`` node after ``finalize``
            pauses with ``interrupt()`` as :func:`debate_node` does. Needs a checkpointer.
        store: record each run of the graph in a run store, as :class:`~moot.Debate`'s ``store=``
            does: the run starts at ``setup`` and ends at ``finalize``.
        budget_usd: a US-dollar cap per run, as :class:`~moot.Debate`'s ``budget_usd=``.
        judge_blind: blind deciding steps (the ``judge`` and ``moderator`` nodes), as
            :class:`~moot.Debate`'s ``judge_blind=`` (docs/judging.md).
        judge_shuffle: shuffled deciding steps (``judge_shuffle=``).
        judge_audit: the swap audit (``judge_audit=``), in the result's ``metrics["judge_audit"]``.
        judge_swap_robust: position-sensitive decisions made undecided (``judge_swap_robust=``).

    Returns:
        The compiled graph; run it with ``await graph.ainvoke({"topic": ...})``.

    Raises:
        MissingDependencyError: LangGraph is not installed.
        ConfigError: the protocol is invalid or ``role_models`` names an unknown persona.
        UsageError: (when invoked) the topic is empty or a model spec cannot be resolved.
    """
    state_graph, start, end = _require_langgraph()
    debate = Debate(
        protocol,
        model=model,
        role_models=role_models,
        store=store,
        budget_usd=budget_usd,
        judge_blind=judge_blind,
        judge_shuffle=judge_shuffle,
        judge_audit=judge_audit,
        judge_swap_robust=judge_swap_robust,
    )
    p = debate.protocol
    stages, fixed = _node_names(p)
    mode = check_mode(human_review)
    nodes = _DebateNodes(debate, stages, on_event, mode)
    closer, finalize = fixed["closer"], fixed["finalize"]

    graph = state_graph(DebateGraphState, input_schema=DebateGraphInput, output_schema=DebateGraphOutput)
    graph.add_node(fixed["setup"], nodes.setup)
    for index, position, key, name in _iter_slots(p, stages):
        graph.add_node(name, nodes.speaker(index, position, key))
    graph.add_node(closer, nodes.close_round)
    after_rounds = finalize
    if p.judge is not None:
        after_rounds = fixed["judge"]
        graph.add_node(after_rounds, nodes.judge)
        graph.add_edge(after_rounds, finalize)
    graph.add_node(finalize, nodes.finalize)

    graph.add_edge(start, fixed["setup"])
    for prev, nxt in zip(stages, [*stages[1:], [closer]], strict=True):
        for name in nxt:  # a list of sources waits for all of them (fan-in)
            graph.add_edge(prev if len(prev) > 1 else prev[0], name)
    _branch(graph, fixed["setup"], "debate", stages[0], "skip", finalize)
    _branch(graph, closer, "continue", stages[0], "conclude", after_rounds)
    if mode is None:
        graph.add_edge(finalize, end)
    else:
        graph.add_node(fixed["review"], nodes.review)
        graph.add_edge(finalize, fixed["review"])
        graph.add_edge(fixed["review"], end)
    name = f"debate_{p.name}".replace("-", "_")
    return graph.compile(name=name, checkpointer=checkpointer)  # type: ignore[no-any-return]


def _branch(graph: Any, source: str, go: str, first: list[str], stop: str, stop_node: str) -> None:
    """Conditional edge from ``source``: ``stop`` when ``concluded`` is set, else ``go`` to ``first``.

    With a one-speaker first stage the edge carries the labels (``continue``/``conclude``);
    a concurrent first stage is a fan-out, which LangGraph expresses as a list of targets.
    """
    if len(first) == 1:
        labels = {go: first[0], stop: stop_node}

        def label(state: DebateGraphState) -> str:
            return stop if state.get("concluded") else go

        graph.add_conditional_edges(source, label, labels)
        return

    def targets(state: DebateGraphState) -> list[str]:
        return [stop_node] if state.get("concluded") else list(first)

    graph.add_conditional_edges(source, targets, [*first, stop_node])
