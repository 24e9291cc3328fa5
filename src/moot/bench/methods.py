"""The methods a benchmark compares, and how each answers one item.

Method specs (``--methods``, comma-separated):

============================  ================================================================
``single``                    one call; the reply is parsed
``vote:K``                    self-consistency: K independent samples, plurality vote
``society:N:T``               Du et al.'s simultaneous debate: N agents, T rounds in total
                              (round 0 = independent answers, then T-1 debate rounds), so N*T
                              calls, as Du's ``rounds`` setting. In round r every agent sees
                              its own conversation plus *all* peers' replies of round r-1
                              (never a mix of rounds). Final answer: plurality of the last
                              round.
``society:N:T:early_stop``    stop after any round in which all agents agree
``society:N:T:debate_if_disagree``  debate only when round 0 is not unanimous
PRESET                        a preset name (``answer``, ``adversarial``...) run through the
                              engine; its ``final_answer`` and every speaker turn are parsed
                              with the task's parser
============================  ================================================================

A preset runs as it is deployed, under its production deadline (the one ``moot run``
would use, :mod:`moot.deadline`: ``answer`` has seed 000's 10 s on a remote backend),
unless the bench sets another (``MethodContext.deadlines``, ``moot bench --deadline
[PRESET=]SECONDS``). A unit whose debate fell back (its deadline, a budget, a failed
turn) is recorded with ``fallback`` set and is not the method's answer: it is never
scored, and the report counts it per method.

History (``MethodContext.history``, ``moot bench --history window:N``): each society agent's
chat keeps the question and the latest exchanges (its answer, then the debate prompt with its
peers' answers) whose text fits ``N`` tokens (:func:`moot.history.fit_exchanges`), the oldest
left out first and the latest always whole; the debate prompt then says how many earlier
exchanges were left out. Without the option, a society prompt that would pass the model's
window (when :meth:`~moot.models.Model.known_window` knows it, never asked of a server) less
the reply's ``max_tokens`` is shortened the same way, with one warning. Round 0 is never
shortened. A preset gets the option as its protocol's ``history`` (``summarize`` too, which
a society cannot have: each agent holds its own chat). ``single`` and ``vote:K`` have no
history. Each record counts the calls whose history was shortened
(``ItemRecord.history_shortened``).

``K`` and ``N`` are at most 64, ``T`` at most 50 (:data:`MAX_AGENTS`, :data:`MAX_ROUNDS`).

Every plain call (single, vote, society) goes through :func:`moot.models.call_model`
with ``metadata = {"speaker": "agentI", "round": r, "method": NAME, "item": ID,
"phase": "bench"}`` and a seed derived from ``(run seed, item, agent, round)``,
the same for every method: ``single``, agent 0 of ``vote:K`` and agent 0 of
a society's round 0 get the same seed (common random numbers, which make the
paired comparisons sharper on backends that honour seeds).

Round 0 is shared: agent ``i``'s first sample of an item is the same call in ``single``,
``vote:K`` and ``society:N:T`` (same prompt, same seed), so a run generates it once and
hands it to each of them (:meth:`MethodContext.share_first_round`). A society's round 0 is
then exactly the vote's samples, on every backend, and ``--matched`` pays for them once.
Units run elsewhere (Ray workers) cannot share; there the seed alone must make the sample
the same, which the ``local`` backend guarantees by reading a seeded prompt afresh.

On a model that samples several completions per request (``supports_n``: the
``openai:`` backend against OpenAI or vLLM), the K samples of ``vote:K`` and the
N answers of a society's round 0, which all answer the same prompt, are one
request with ``n=K`` made as agent 0: the server reads the prompt once and
batches the samples. The record then counts the requests really sent (``calls``
1 for that round), with the tokens the server reported (see
:mod:`moot.models.sampling` for servers without ``n``).

Every answer keeps its transcript: the messages its agent was sent (each distinct message
stored once per unit, in ``ItemRecord.messages``; ``AgentAnswer.sent`` lists the ones it was
sent), the request's usage, latency, gate wait and retries. A preset's answers keep their
turn's messages as the engine sent them (system prompt included).
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import moot.observe as observe

from ..errors import (
    ConfigError,
    ModelError,
    ModelHTTPError,
    ModelResponseError,
    RunError,
    UsageError,
    error_text,
)
from ..history import Fitted, fit_exchanges
from ..models.base import CallStats, Message, Model, ModelRequest, ModelResponse, Usage, public_endpoint
from ..models.retry import RetryPolicy, call_model
from ..observe import PipelineEvent
from ..protocol import HistorySpec
from ..transcript import RequestRecord, RetryRecord
from .records import MIN_QUOTE, AgentAnswer, ItemRecord, SentMessage
from .stats import majority, unanimous
from .tasks import Item, Task

__all__ = [
    "MAX_AGENTS",
    "MAX_ROUNDS",
    "MethodContext",
    "MethodSpec",
    "call_seed",
    "history_override",
    "matched_vote",
    "parse_method",
    "rescore",
    "run_method",
    "score_reply",
]

MAX_AGENTS = 64
"""Most samples of ``vote:K`` and agents of ``society:N:T`` (each holds its replies in memory)."""
MAX_ROUNDS = 50
"""Most rounds of ``society:N:T``, the same cap as a protocol's ``rounds``."""
REPLY_RESERVE = 512
"""Tokens a society prompt leaves in the window for the reply when ``max_tokens`` is the
backend's (None): the embedded model's default cap."""

_log = logging.getLogger(__name__)

MethodKind = Literal["single", "vote", "society", "preset"]
_SOCIETY_OPTIONS = ("early_stop", "debate_if_disagree")


@dataclass(frozen=True)
class MethodSpec:
    """A parsed method spec.

    Attributes:
        name: canonical name (records and reports key on it).
        kind: ``single``, ``vote``, ``society`` or ``preset``.
        agents: agents (samples) per round.
        rounds: rounds in total.
        option: ``early_stop``, ``debate_if_disagree`` or "" (society only).
        nominal_calls: calls per item without early stopping (for presets: speakers x rounds,
            plus the moderator per round and the judge, repairs not included).
        matches: for a matched vote (``--matched``), the debate method it is matched to.
    """

    name: str
    kind: MethodKind
    agents: int = 1
    rounds: int = 1
    option: str = ""
    nominal_calls: int = 1
    matches: str = ""

    @property
    def is_debate(self) -> bool:
        """True for methods whose agents see each other (society and presets)."""
        return self.kind in ("society", "preset")


def _positive(text: str, what: str, spec: str, most: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"method {spec!r}: {what} must be a positive integer, got {text!r}") from None
    if not 1 <= value <= most:
        raise UsageError(f"method {spec!r}: {what} must be a positive integer, at most {most}; got {value}")
    return value


def _preset(name: str) -> MethodSpec:
    try:
        from ..protocol import load_protocol
    except ImportError as err:  # pragma: no cover - the engine ships with moot
        raise UsageError(f"method {name!r}: presets need moot.protocol ({err})") from None
    try:
        proto = load_protocol(name)
    except ConfigError as err:
        raise UsageError(
            f"unknown method {name!r}: use single, vote:K, society:N:T[:early_stop|:debate_if_disagree] "
            f"or a preset ({err})"
        ) from None
    speakers = len(proto.speakers())
    nominal = speakers * proto.rounds + (proto.rounds if proto.moderator else 0) + (1 if proto.judge else 0)
    return MethodSpec(name=name, kind="preset", agents=speakers, rounds=proto.rounds, nominal_calls=nominal)


def parse_method(text: str) -> MethodSpec:
    """Parse one method spec (see the module docstring).

    Raises:
        UsageError: malformed spec or unknown preset.
    """
    spec = text.strip()
    parts = spec.split(":")
    head = parts[0]
    if head == "single" and len(parts) == 1:
        return MethodSpec(name="single", kind="single")
    if head == "vote" and len(parts) == 2:
        k = _positive(parts[1], "K", spec, MAX_AGENTS)
        return MethodSpec(name=f"vote:{k}", kind="vote", agents=k, nominal_calls=k)
    if head == "society" and len(parts) in (3, 4):
        n = _positive(parts[1], "N", spec, MAX_AGENTS)
        t = _positive(parts[2], "T", spec, MAX_ROUNDS)
        if n < 2:
            raise UsageError(f"method {spec!r}: a society needs at least 2 agents")
        option = parts[3] if len(parts) == 4 else ""
        if option and option not in _SOCIETY_OPTIONS:
            raise UsageError(
                f"method {spec!r}: unknown option {option!r}; use {' or '.join(_SOCIETY_OPTIONS)}"
            )
        name = f"society:{n}:{t}" + (f":{option}" if option else "")
        return MethodSpec(name=name, kind="society", agents=n, rounds=t, option=option, nominal_calls=n * t)
    if head in ("single", "vote", "society"):
        raise UsageError(f"malformed method {spec!r}: use single, vote:K or society:N:T[:early_stop]")
    if not spec:
        raise UsageError("empty method name")
    return _preset(spec)


def matched_vote(spec: MethodSpec, k: int | None = None) -> MethodSpec | None:
    """The vote matched to debate ``spec`` (None for non-debates).

    ``k`` samples, by default as many as the debate's calls (``--matched-by cost`` gives the ``k``
    that costs what the debate does).
    """
    if not spec.is_debate:
        return None
    k = k or spec.nominal_calls
    return MethodSpec(name=f"vote:{k}", kind="vote", agents=k, nominal_calls=k, matches=spec.name)


def history_override(history: HistorySpec) -> dict[str, Any]:
    """A preset's ``history`` override from the bench's option (``MethodContext.history``).

    Its strategy and budget always, and any other field the option sets (otherwise a preset's
    own ``summarizer`` is kept).
    """
    return history.model_dump(exclude_defaults=True) | {
        "max_tokens": history.max_tokens,
        "strategy": history.strategy,
    }


def call_seed(seed: int, item_id: str, agent: int, round_: int) -> int:
    """The sampling seed of one call: a CRC-32 of ``seed:item:agent:round`` (31 bits)."""
    return zlib.crc32(f"{seed}:{item_id}:{agent}:{round_}".encode()) & 0x7FFFFFFF


def score_reply(
    task: Task, item: Item, agent: str, text: str, finish: str | None = None, **transcript: Any
) -> AgentAnswer:
    """Parse and score one reply (a reply cut at the token cap is parsed as truncated).

    ``transcript``: the answer's transcript fields (``sent``, ``usage``, ``latency_s``...), kept as given.
    """
    parsed = task.parse(text, item, truncated=finish == "length")
    return AgentAnswer(
        agent=agent,
        answer=parsed.value,
        correct=task.is_correct(parsed.value, item),
        rule=parsed.rule,
        in_format=parsed.rule == task.format_rule,
        lenient=parsed.value if parsed.value is not None else task.lenient(text, item),
        text=text,
        finish=finish,
        **transcript,
    )


@dataclass(frozen=True)
class _Asked:
    """One reply with what produced it: the messages sent, the request's cost, time and retries."""

    response: ModelResponse
    messages: list[Message]
    usage: Usage
    latency_s: float
    queue_s: float = 0.0
    retries: tuple[RetryRecord, ...] = ()


def _request_event(item: Item, method: str, agent: int, round_: int, record: RequestRecord) -> PipelineEvent:
    return PipelineEvent(
        kind="model_request",
        unit=item.id,
        part=method,
        request=record,
        data={"agent": agent, "round": round_},
    )


class _SentTable:
    """The distinct messages sent to one unit's agents, each once (``ItemRecord.messages``).

    ``rounds`` is the unit's answers so far: a new message that quotes one of their replies
    whole keeps a reference to it instead of its text (:class:`~moot.bench.records.SentMessage`).
    """

    def __init__(self, rounds: list[list[AgentAnswer]]) -> None:
        self.messages: list[SentMessage] = []
        self._index: dict[tuple[str, str], int] = {}
        self._rounds = rounds

    def refs(self, messages: Iterable[Message]) -> list[int]:
        """The indices of ``messages`` in the table (new ones appended)."""
        out = []
        for m in messages:
            key = (m.role, m.content)
            at = self._index.get(key)
            if at is None:
                at = self._index[key] = len(self.messages)
                self.messages.append(self._stored(m))
            out.append(at)
        return out

    def _stored(self, m: Message) -> SentMessage:
        parts: list[str | tuple[int, int]] = [m.content]
        quoted = [
            (a.text, (r, i))
            for r, answers in enumerate(self._rounds)
            for i, a in enumerate(answers)
            if len(a.text) >= MIN_QUOTE
        ]
        for text, ref in sorted(quoted, key=lambda q: -len(q[0])):
            cut: list[str | tuple[int, int]] = []
            for part in parts:
                if not isinstance(part, str) or text not in part:
                    cut.append(part)
                    continue
                pieces = part.split(text)
                for k, piece in enumerate(pieces):
                    if k:
                        cut.append(ref)
                    if piece:
                        cut.append(piece)
            parts = cut
        if parts == [m.content]:
            return SentMessage(role=m.role, content=m.content)
        joined = "".join(p if isinstance(p, str) else self._rounds[p[0]][p[1]].text for p in parts)
        if joined != m.content:  # never: but a record must hold what was sent
            return SentMessage(role=m.role, content=m.content)
        return SentMessage(role=m.role, parts=parts)


def _traced(
    ctx: MethodContext,
    item: Item,
    agent: str,
    text: str,
    finish: str | None,
    asked: _Asked,
    table: _SentTable | None,
) -> AgentAnswer:
    """The reply scored, with its transcript (``table`` None: the messages sent are not known)."""
    return ctx.score(
        item,
        agent,
        text,
        finish,
        sent=table.refs(asked.messages) if table is not None else None,
        usage=asked.usage,
        latency_s=round(asked.latency_s, 4),
        queue_s=round(asked.queue_s, 4),
        retries=list(asked.retries),
    )


@dataclass
class MethodContext:
    """What every method call needs.

    Attributes:
        model: the backend.
        task: the task (prompts, parser).
        seed: the run seed.
        temperature: sampling temperature; None keeps the backend's default.
        max_tokens: cap on generated tokens per plain call; None keeps the backend's.
        policy: retry policy for plain calls.
        deadlines: seconds each unit of a preset may take, by preset name (``"*"``: every
            preset), instead of the preset's production deadline.
        judging: the presets' deciding-step options (``blind``, ``shuffle``, ``audit``,
            ``swap_robust``), given to each preset's ``Debate`` as ``judge_<option>=``.
        history: the history option (``--history``): a society agent's prompt carries at most
            its ``max_tokens`` of history (``window`` only); a preset gets it as its protocol's
            ``history``. None: only the model's known window bounds a society prompt.
    """

    model: Model
    task: Task
    seed: int = 0
    temperature: float | None = None
    max_tokens: int | None = None
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    deadlines: dict[str, float] = field(default_factory=dict)
    judging: dict[str, bool] = field(default_factory=dict)
    history: HistorySpec | None = None
    _debates: dict[str, Any] = field(default_factory=dict)
    _window: list[int | None] = field(default_factory=list)  # the model's known window, once read
    _warned_window: bool = False
    _samples: dict[tuple[str, int], asyncio.Future[_Asked]] = field(default_factory=dict)
    _uses: dict[tuple[str, int], int] = field(default_factory=dict)

    def share_first_round(self, units: Iterable[tuple[Item, MethodSpec]]) -> None:
        """Let the plain methods among ``units`` share their round-0 samples (module docstring).

        Agent ``i``'s round-0 sample of an item is the same call (same prompt and seed) in
        ``single``, ``vote:K`` and ``society:N:T``; it is generated once and handed to each of
        these units, then forgotten after its last use.
        """
        for item, spec in units:
            if spec.kind != "preset":
                for agent in range(spec.agents):
                    key = (item.id, agent)
                    self._uses[key] = self._uses.get(key, 0) + 1

    async def first_round(
        self, item: Item, method: str, n: int, messages: list[Message]
    ) -> list[ModelResponse]:
        """Round 0's ``n`` samples (see :meth:`_first_round`)."""
        return [a.response for a in await self._first_round(item, method, n, messages)]

    async def _first_round(self, item: Item, method: str, n: int, messages: list[Message]) -> list[_Asked]:
        """Round 0's ``n`` samples: shared ones where :meth:`share_first_round` planned their use.

        Samples not yet generated are asked for (as one ``n``-sample request where the model
        supports it); a failed request fails every unit waiting for it, and is asked again by
        the next one. A reused sample's usage is counted by each unit that uses it: a method's
        cost stays what it would be alone.
        """
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[_Asked]] = []
        missing: list[int] = []
        for agent in range(n):
            key = (item.id, agent)
            future = self._samples.get(key)
            if future is None:
                future = loop.create_future()
                missing.append(agent)
                if self._uses.get(key, 0) > 1:  # someone else will use it: keep it
                    self._samples[key] = future
            futures.append(future)
        if missing:
            try:
                replies = await self._ask_samples(item, method, missing, messages)
            except BaseException as err:
                for agent in missing:
                    self._samples.pop((item.id, agent), None)
                    future = futures[agent]
                    if isinstance(err, Exception):
                        future.set_exception(err)
                        future.exception()  # retrieved here: waiting units re-raise it themselves
                    else:
                        future.cancel()
                raise
            for agent, reply in zip(missing, replies, strict=True):
                futures[agent].set_result(reply)
        out = [await future for future in futures]
        for agent in range(n):
            key = (item.id, agent)
            left = self._uses.get(key, 0) - 1
            if left > 0:
                self._uses[key] = left
            else:
                self._uses.pop(key, None)
                self._samples.pop(key, None)
        return out

    async def _ask_samples(
        self, item: Item, method: str, agents: list[int], messages: list[Message]
    ) -> list[_Asked]:
        if len(agents) > 1 and getattr(self.model, "supports_n", False):
            # n samples of one prompt: one request with n, read once by the server.
            return _split(await self._ask(item, method, agents[0], 0, messages, n=len(agents)), len(agents))
        return await _gather([self._ask(item, method, i, 0, messages) for i in agents])

    async def ask(
        self, item: Item, method: str, agent: int, round_: int, messages: list[Message], n: int = 1
    ) -> ModelResponse:
        """One plain call through :func:`call_model` with bench metadata and a derived seed.

        With ``n > 1`` (a model whose ``supports_n`` is True) the call asks for ``n``
        completions of the same prompt; ``agent`` is then the first of them.
        """
        return (await self._ask(item, method, agent, round_, messages, n)).response

    async def _ask(
        self, item: Item, method: str, agent: int, round_: int, messages: list[Message], n: int = 1
    ) -> _Asked:
        request = ModelRequest(
            messages=messages,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            seed=call_seed(self.seed, item.id, agent, round_),
            n=n,
            metadata={
                "speaker": f"agent{agent}",
                "round": round_,
                "method": method,
                "item": item.id,
                "phase": "bench",
            },
        )
        stats = CallStats()
        retries: list[RetryRecord] = []

        def on_retry(attempt: int, err: ModelError, wait: float) -> None:
            status = err.status_code if isinstance(err, ModelHTTPError) else None
            retries.append(
                RetryRecord(
                    time=time.time(), error_kind=type(err).__name__, status=status, wait_s=round(wait, 3)
                )
            )

        handle = observe.current()
        listened = handle is not None and handle.wants("model_request")
        at = time.time()
        started = time.perf_counter()
        try:
            response = await call_model(self.model, request, self.policy, on_retry=on_retry, stats=stats)
        except Exception as exc:
            if listened:
                assert handle is not None
                record = self._request_record(request, stats, retries, at, None, exc)
                handle.emit(_request_event(item, method, agent, round_, record))
            raise
        if listened:  # a tracer makes the unit's chat spans from these (never stored)
            assert handle is not None
            record = self._request_record(request, stats, retries, at, response, None)
            handle.emit(_request_event(item, method, agent, round_, record))
        return _Asked(
            response,
            list(messages),
            stats.usage,  # this call's own (call_model made it; nothing changes it after the call)
            time.perf_counter() - started - stats.queue_s,
            stats.queue_s,
            tuple(retries),
        )

    def _request_record(
        self,
        request: ModelRequest,
        stats: CallStats,
        retries: list[RetryRecord],
        started: float,
        response: ModelResponse | None,
        error: Exception | None,
    ) -> RequestRecord:
        """What one plain request did, as a debate turn's requests are recorded (only while listened)."""
        return RequestRecord(
            model=self.model.name,
            response_model=response.model if response is not None else "",
            started=started,
            ended=time.time(),
            max_tokens=request.max_tokens,
            temperature=request.temperature,
            usage=stats.usage,  # this call's own, as _Asked keeps it (a copy cost ~1.4 us a call)
            finish_reason=response.finish_reason if response is not None else None,
            error_kind=type(error).__name__ if error is not None else None,
            error=error_text(error) if error is not None else None,
            retries=list(retries),
            endpoint=public_endpoint(self.model),
            messages=request.messages,
            reply=response.text if response is not None else None,
        )

    def fit_history(self, method: str, messages: list[Message]) -> Fitted:
        """A society agent's chat (the question, then answer and debate prompt pairs) fitted.

        Bounded by :attr:`history` and by the model's known window less the reply's
        ``max_tokens`` (see the module docstring); as it is when neither is set or known.
        """
        if not self._window:  # read once: a price-table lookup is not free on every call
            self._window.append(self.model.known_window())
        window = self._window[0]
        limit = None if window is None else window - (self.max_tokens or REPLY_RESERVE)
        cap = self.history.max_tokens if self.history is not None else None
        if limit is None and cap is None:
            return Fitted(messages, 0, 0)
        rest = messages[1:]
        pairs = [(rest[k], rest[k + 1]) for k in range(0, len(rest) - 1, 2)]
        fitted = fit_exchanges(self.model, messages[:1], pairs, prompt_limit=limit, max_tokens=cap)
        if fitted.left_out and self.history is None and not self._warned_window:
            self._warned_window = True
            _log.warning(
                "bench %s: prompts would pass %s's %s-token context window: their earliest exchanges "
                "are left out (the window strategy; set --history window:N to choose)",
                method,
                self.model.name,
                window,
            )
        return fitted

    def score(
        self, item: Item, agent: str, text: str, finish: str | None = None, **transcript: Any
    ) -> AgentAnswer:
        """Parse and score one reply (see :func:`score_reply`)."""
        return score_reply(self.task, item, agent, text, finish, **transcript)

    def debate(self, preset: str) -> Any:
        """The engine's ``Debate`` for a preset, built once per context, under its unit deadline."""
        if preset not in self._debates:
            from ..engine import Debate

            overrides: dict[str, Any] = {}
            if self.temperature is not None:
                overrides["temperature"] = self.temperature
            seconds = self.deadlines.get(preset, self.deadlines.get("*"))
            if seconds is not None:
                overrides["timeout"] = seconds
            if self.history is not None:
                overrides["history"] = history_override(self.history)
            j = self.judging
            self._debates[preset] = Debate(
                preset,
                model=self.model,
                overrides=overrides or None,
                judge_blind=j.get("blind"),
                judge_shuffle=j.get("shuffle"),
                judge_audit=j.get("audit"),
                judge_swap_robust=j.get("swap_robust"),
            )
        return self._debates[preset]


def _record(
    spec: MethodSpec,
    item: Item,
    ctx: MethodContext,
    rounds: list[list[AgentAnswer]],
    final: str | None,
    lenient: str | None,
    usage: Usage,
    started: float,
    **extra: Any,
) -> ItemRecord:
    return ItemRecord(
        item_id=item.id,
        method=spec.name,
        gold=item.gold,
        final=final,
        correct=ctx.task.is_correct(final, item),
        parse_failed=final is None,
        lenient=lenient,
        rounds=rounds,
        calls=usage.calls,
        cached=usage.cached,
        nominal_calls=spec.nominal_calls,
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        cost_usd=usage.cost_usd,
        cost_source=usage.cost_source,
        wall_s=round(time.perf_counter() - started, 4),
        **extra,
    )


async def _gather(calls: list[Any]) -> list[_Asked]:
    # A TaskGroup cancels the sibling calls when one fails, so no request outlives its item;
    # the caller gets the first error itself, not an ExceptionGroup.
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(c) for c in calls]
    except BaseExceptionGroup as group_error:
        raise group_error.exceptions[0] from None
    return [t.result() for t in tasks]


def _split(asked: _Asked, n: int) -> list[_Asked]:
    """One reply per sample of an ``n > 1`` call; the call's usage (and retries) stay on the first."""
    reply = asked.response
    if len(reply.samples) != n:
        raise ModelResponseError(f"asked for {n} samples, got {len(reply.samples)}", model=reply.model)
    first = reply.usage
    return [
        _Asked(
            ModelResponse(
                text=s.text, finish_reason=s.finish_reason, model=reply.model, usage=Usage() if i else first
            ),
            asked.messages,
            Usage() if i else asked.usage,
            asked.latency_s,
            asked.queue_s,
            () if i else asked.retries,
        )
        for i, s in enumerate(reply.samples)
    ]


async def _plain(spec: MethodSpec, item: Item, ctx: MethodContext) -> ItemRecord:
    """single, vote:K and society:N:T."""
    if spec.kind == "society" and ctx.history is not None and ctx.history.strategy == "summarize":
        raise UsageError(
            f"method {spec.name} cannot summarize its history (each society agent holds its own chat): "
            "summarize needs a preset; use window:N"
        )
    started = time.perf_counter()
    n = spec.agents
    histories = [[Message(role="user", content=item.prompt)] for _ in range(n)]
    rounds: list[list[AgentAnswer]] = []
    table = _SentTable(rounds)
    spent: list[Usage] = []  # every reply's usage, added up once at the end
    texts: list[str] = []
    stopped = False
    shortened = left_out = 0
    for r in range(spec.rounds):
        if r > 0:
            for i in range(n):
                peers = [texts[j] for j in range(n) if j != i]
                histories[i].append(Message(role="assistant", content=texts[i]))
                histories[i].append(Message(role="user", content=ctx.task.debate_prompt(item, peers)))
        if r == 0:  # n samples of one prompt, shared with the other plain methods on this item
            asked = await ctx._first_round(item, spec.name, n, histories[0])
        else:
            fitted = [ctx.fit_history(spec.name, histories[i]) for i in range(n)]
            shortened += sum(f.left_out > 0 for f in fitted)
            left_out += sum(f.left_out for f in fitted)
            asked = await _gather(
                [ctx._ask(item, spec.name, i, r, list(fitted[i].messages)) for i in range(n)]
            )
        replies = [a.response for a in asked]
        spent.extend(reply.usage for reply in replies)
        texts = [reply.text for reply in replies]
        answers = [
            _traced(ctx, item, f"agent{i}", a.response.text, a.response.finish_reason, a, table)
            for i, a in enumerate(asked)
        ]
        rounds.append(answers)
        last = r == spec.rounds - 1
        agree = unanimous([a.answer for a in answers])
        if (
            not last
            and agree
            and (spec.option == "early_stop" or (spec.option == "debate_if_disagree" and r == 0))
        ):
            stopped = True
            break
    final = majority([a.answer for a in rounds[-1]])
    lenient = majority([a.lenient for a in rounds[-1]])
    return _record(
        spec,
        item,
        ctx,
        rounds,
        final,
        lenient,
        Usage.sum_of(spent),
        started,
        stopped_early=stopped,
        messages=table.messages,
        history_shortened=shortened,
        history_left_out=left_out,
    )


# Turn error kinds that mean the backend failed (after its retries), not that the model answered badly.
_BACKEND_FAILURES = (
    "ModelError",
    "ModelHTTPError",
    "ModelResponseError",
    "ModelConnectionError",
    "ModelTimeoutError",
)


async def _run_preset(spec: MethodSpec, item: Item, ctx: MethodContext) -> ItemRecord:
    started = time.perf_counter()
    debate = ctx.debate(spec.name)
    retried: dict[tuple[int, str], list[RetryRecord]] = {}

    def on_event(event: Any) -> None:  # each speaker turn's retries, from its model_request events
        request = getattr(event, "request", None)
        if event.kind == "model_request" and request is not None and (event.phase or "turn") == "turn":
            retried.setdefault((event.round or 0, event.speaker or ""), []).extend(request.retries)

    def decision_key(text: str) -> str | None:  # "the same decision" is the answer the task scores
        return ctx.task.parse(text, item).value

    result = await debate.run(item.prompt, on_event=on_event, decision_key=decision_key)
    judged = [t.judging for t in result.turns(include_judge=True) if t.judging is not None]
    judging = judged if any(ctx.judging.values()) else []
    # An outage (unreachable endpoint, refused key, a server failing past its retries) means the
    # method did not run as specified: a failed unit that --resume retries, never a wrong answer.
    turns = result.turns(include_judge=True)
    outage = [t for t in turns if t.error_kind in _BACKEND_FAILURES]
    if outage:
        raise RunError(f"preset {spec.name}: the backend failed on {len(outage)} turns: {outage[0].error}")
    # A deadline that cut every turn short (a hung server) measured nothing either.
    if result.fallback and not any(t.ok for t in turns) and all(t.cancelled for t in turns):
        raise RunError(f"preset {spec.name}: no turn finished ({result.fallback})")
    fitted = result.metrics.get("history") or {}  # calls whose history the engine shortened
    history = {
        "history_shortened": int(fitted.get("calls", 0)),
        "history_left_out": int(fitted.get("turns_left_out", 0)),
    }
    order = {key: i for i, key in enumerate(debate.protocol.speakers())}
    answer_field = debate.protocol.answer_field
    rounds: list[list[AgentAnswer]] = []
    table = _SentTable(rounds)
    for rnd in result.rounds:
        answers = []
        for turn in sorted(rnd.turns, key=lambda t: order.get(t.speaker, len(order))):
            value = turn.get(answer_field)
            text = value if isinstance(value, str) and value else turn.text
            if not turn.ok:
                text = turn.raw or ""
            asked = _Asked(
                ModelResponse(text=text),
                list(turn.sent or []),
                turn.usage,
                turn.latency_ms / 1000,
                turn.queue_ms / 1000,
                tuple(retried.get((turn.round, turn.speaker), ())),
            )
            kept = table if turn.sent is not None else None  # None: the turn's messages were not kept
            answers.append(_traced(ctx, item, turn.speaker, text, None, asked, kept))
        rounds.append(answers)
    if result.fallback:  # kept for audit, never the method's answer (see the module docstring)
        record = _record(
            spec,
            item,
            ctx,
            rounds,
            None,
            None,
            result.usage,
            started,
            final_text=result.final_answer,
            messages=table.messages,
            judging=judging,
            judge_shares_model_with=result.judge_shares_model_with,
            **history,
        )
        return record.model_copy(update={"parse_failed": False, "fallback": result.fallback})
    final = ctx.task.parse(result.final_answer or "", item).value
    lenient = final if final is not None else ctx.task.lenient(result.final_answer or "", item)
    return _record(
        spec,
        item,
        ctx,
        rounds,
        final,
        lenient,
        result.usage,
        started,
        stopped_early=result.stopped_early,
        final_text=result.final_answer,
        messages=table.messages,
        judging=judging,
        judge_shares_model_with=result.judge_shares_model_with,
        **history,
    )


def _rescored(task: Task, item: Item, answer: AgentAnswer) -> AgentAnswer:
    """``answer`` parsed again; its transcript (messages sent, usage, time, retries) kept."""
    fresh = score_reply(task, item, answer.agent, answer.text, answer.finish)
    kept = ("sent", "usage", "latency_s", "queue_s", "retries")
    return fresh.model_copy(update={k: getattr(answer, k) for k in kept})


def rescore(record: ItemRecord, item: Item, task: Task) -> ItemRecord:
    """``record`` with every stored reply parsed again by ``task``'s current parser.

    The replies, their finish reasons, calls and tokens are kept; answers, the final and
    its lenient reading are recomputed, as a live run would have: for plain methods the
    plurality of the last round, for presets the engine's final answer text (``final_text``).

    A fallen-back unit (``fallback`` set) is returned as is: it has no answer to parse.

    Raises:
        UsageError: a preset's record written before ``final_text`` was stored.
    """
    if record.fallback is not None:
        return record
    preset = bool(record.rounds and record.rounds[0] and not record.rounds[0][0].agent.startswith("agent"))
    if preset and record.final_text is None:
        raise UsageError(
            f"{record.method}: this preset record cannot be rescored: it was written before moot "
            "stored a preset's final answer text"
        )
    rounds = [[_rescored(task, item, a) for a in rnd] for rnd in record.rounds]
    if preset:
        text = record.final_text or ""
        final = task.parse(text, item).value
        lenient = final if final is not None else task.lenient(text, item)
    else:
        final = majority([a.answer for a in rounds[-1]]) if rounds else None
        lenient = majority([a.lenient for a in rounds[-1]]) if rounds else None
    return record.model_copy(
        update={
            "rounds": rounds,
            "final": final,
            "correct": task.is_correct(final, item),
            "parse_failed": final is None,
            "lenient": lenient,
        }
    )


async def run_method(spec: MethodSpec, item: Item, ctx: MethodContext) -> ItemRecord:
    """Run one method on one item.

    Raises:
        RunError: a call failed after its retries, or a preset's backend failed on any turn
            (the item is not recorded, so a resume retries it).
    """
    if spec.kind == "preset":
        return await _run_preset(spec, item, ctx)
    return await _plain(spec, item, ctx)
