"""Typed records of a debate: personas, turns, rounds, events and the result.

Everything here is a pydantic model, so a ``DebateResult`` serialises to JSON
and back without loss (``DebateResult.model_validate_json(r.model_dump_json()) == r``).
"""

from __future__ import annotations

from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator

from .models import spec_from_mapping
from .models.base import Message, Usage

__all__ = [
    "Decision",
    "DebateResult",
    "Event",
    "EventKind",
    "FailedModel",
    "JudgingRecord",
    "Persona",
    "RequestRecord",
    "RetryRecord",
    "Round",
    "Timings",
    "Turn",
]

Stance = Literal["pro", "con", "neutral"]


class Persona(BaseModel):
    """One participant: a speaker, a moderator or a judge."""

    model_config = ConfigDict(extra="forbid")

    key: str = ""
    """Identifier used in ``order`` and events (filled from the mapping key when loaded from config)."""
    name: str = ""
    """Display name (defaults to the key)."""
    role: str = ""
    """What this participant is, e.g. "Evidence-Polarity Mapper"."""
    goal: str = ""
    """What it tries to achieve."""
    stance: Stance | None = None
    """pro, con or neutral; None when the protocol has no sides."""
    style: str | None = None
    """How it speaks, e.g. "dry and evidence-driven"."""
    instructions: str | None = None
    """Extra instructions for this participant only."""
    model: str | None = None
    """A ``provider:model`` spec for this participant (multi-model routing); None uses the debate's model.
    In YAML it may be a mapping with the spec's options, e.g.
    ``{spec: "openai:llama3", base_url: "http://gpu-box:8000/v1", api_key_env: GPU_BOX_KEY}``."""
    output: str | None = None
    """Output schema name for this participant's turns; None uses the protocol's ``turn_output``."""

    @field_validator("model", mode="before")
    @classmethod
    def _model_mapping(cls, value: Any) -> Any:
        # A mapping is the readable form of a spec with options; store the one-line spec. A list
        # names a deciding role's failover models, in order (stored comma-separated).
        if isinstance(value, list):
            return ",".join(spec_from_mapping(v) if isinstance(v, dict) else str(v) for v in value)
        return spec_from_mapping(value) if isinstance(value, dict) else value

    @field_validator("stance", "style", mode="before")
    @classmethod
    def _blank_is_none(cls, value: Any) -> Any:
        # Seed 003 writes deprecated stance/style as "" - treat that as absent.
        return None if value == "" else value

    def prompt_view(self) -> dict[str, Any]:
        """The persona as shown to models in ``[PERSONA]`` (no routing or schema internals)."""
        return self.model_dump(exclude={"model", "output"}, exclude_none=True)


class FailedModel(BaseModel):
    """A deciding role's model that failed before another ruled (judge failover)."""

    model: str
    """The model's spec name."""
    error: str
    """Why it failed, after its retries."""


class JudgingRecord(BaseModel):
    """How a deciding step saw its candidates, and what its audit found (docs/judging.md)."""

    order: list[str] = Field(default_factory=list)
    """The candidates (speaker persona keys) in the order shown, first-shown first."""
    blind: bool = False
    """True when the candidates were shown as ``Speaker A``, ``Speaker B``... (``labels``)."""
    shuffled: bool = False
    """True when ``order`` was drawn from the seeded generator, not the persona order."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Label -> persona key, for a blind call (the content is mapped back to persona keys)."""
    decision: str | None = None
    """The decisive value of this step ("same decision", docs/judging.md), normalised."""
    sided_with: str | None = None
    """The candidate the decision names or repeats (persona key); None when it names none."""
    first_slot: bool | None = None
    """True when the decision went to the first-shown candidate; None when it names none."""
    reversed_order: list[str] | None = None
    """The order of the audit's (or swap-robust) second call: reversed, or rotated for 3+."""
    reversed_decision: str | None = None
    """The decisive value of that call (None: not asked, or it failed)."""
    blind_decision: str | None = None
    """The decisive value of the audit's blind call (asked when ``blind`` was off)."""
    position_flip: bool | None = None
    """True when the decision changed with the order alone (None: not measured)."""
    identity_flip: bool | None = None
    """True when the decision changed when the names were hidden (None: not measured)."""
    position_sensitive: bool = False
    """True when ``swap_robust`` made this decision undecided because the orders disagreed."""
    extra_calls: int = 0
    """Requests the audit sent, never counted in the method's cost (``usage``)."""
    extra_usage: Usage = Field(default_factory=Usage)
    """The audit's tokens and requests, apart from the turn's ``usage``."""
    audit_errors: list[str] = Field(default_factory=list)
    """Why an audit call gave no decision (its own failures never fail the debate)."""
    ruled_by: str | None = None
    """The model that made this decision (several may be named: judge failover)."""
    failed_models: list[FailedModel] = Field(default_factory=list)
    """The models tried before ``ruled_by``, each with its error."""


MAIN_TEXT_FIELDS = (
    "final_answer",
    "answer",
    "message",
    "content",
    "synthesis",
    "evaluation",
    "explanation",
    "consensus",
)
"""The fields that hold a turn's main text, in the order :attr:`Turn.text` looks for one."""


class Turn(BaseModel):
    """One model call's contribution: a speaker's turn, a moderator's evaluation or the judge's verdict."""

    speaker: str
    """Persona key."""
    round: int
    """1-based round number (the judge's turn carries the last round's number)."""
    phase: Literal["turn", "moderator", "judge", "human", "summary"] = "turn"
    """Which step produced it (``human``: a reviewer's decision, :mod:`moot.human_review`;
    ``summary``: the history summary of a round, :mod:`moot.history`)."""
    stance: Stance | None = None
    """The speaker's stance, if any."""
    output: str = ""
    """Name of the schema the content was validated against."""
    content: dict[str, Any] | None = None
    """The validated structured output; None when the turn failed."""
    raw: str | None = None
    """The raw model text, kept only when validation failed (for audit)."""
    error: str | None = None
    """Why the turn failed; None on success."""
    error_kind: str | None = None
    """``invalid_output``, ``cancelled``, or the backend exception's class name (``ModelTimeoutError``...)."""
    repaired: bool = False
    """True when the first output was invalid and the repair request fixed it."""
    trimmed: bool = False
    """True when the main text was cut to the per-turn token cap."""
    cancelled: bool = False
    """True when the debate stopped (deadline, a fallback) while this turn was in flight;
    its ``usage`` still counts the requests it had sent."""
    model: str = ""
    """The model that produced it."""
    usage: Usage = Field(default_factory=Usage)
    """Calls and tokens spent on this turn (the repair request included)."""
    latency_ms: float = 0.0
    """Wall time of the turn, retries included, waiting for the model's concurrency gate not."""
    queue_ms: float = 0.0
    """Time the turn waited for the model's concurrency gate (other calls were using the model)."""
    judging: JudgingRecord | None = None
    """For a deciding step (judge, moderator): the order and labels shown, the audit, failover."""
    sent: list[Message] | None = Field(default=None, exclude=True)
    """The messages this turn's model was sent, exactly as sent: the turn's request, in order.

    Format: a list of ``{"role": "system" | "user" | "assistant", "content": str}``. The
    system message is the persona's prompt template rendered for this call (``[TOPIC]``,
    ``[PERSONA]``, ``[SHARED_CONTEXT_JSON]`` and ``[HISTORY]`` or ``[ALL_TURNS]`` filled in: the
    turns this speaker was shown, after the protocol's visibility rule), then the user message
    with the task and the JSON schema hint, as :func:`moot.prompting.build_messages` builds them
    and the backend puts them on the wire. A repair request (``repaired``, or a turn whose
    first answer was invalid) sent these same messages followed by the invalid reply (role
    ``assistant``) and one ``user`` message naming the schema error. A cancelled turn keeps
    what it had sent. None in records written before moot kept them.

    Left out of the default JSON (``model_dump``: results, events, bench and ABSA records stay
    as they were); :meth:`DebateResult.record_json` includes them, and a debate's stored run
    keeps them with its result (``moot runs show --json``, :func:`moot.app.records.load_result`),
    where full-text search does not look (it would find every prompt template's words).
    """

    def __eq__(self, other: object) -> bool:
        """Equal outcomes, whether or not :attr:`sent` was kept (a result from ``--json`` has none)."""
        if not isinstance(other, Turn):
            return NotImplemented
        mine = {k: v for k, v in self.__dict__.items() if k != "sent"}
        return mine == {k: v for k, v in other.__dict__.items() if k != "sent"}

    __hash__ = None  # type: ignore[assignment]

    @property
    def ok(self) -> bool:
        """True if the turn produced valid content."""
        return self.content is not None and self.error is None

    def get(self, field: str, default: Any = None) -> Any:
        """A field of the content, or ``default``."""
        return (self.content or {}).get(field, default)

    @property
    def text(self) -> str:
        """The turn's main text: answer, message, argument or explanation, whichever it has."""
        for key in MAIN_TEXT_FIELDS:
            value = self.get(key)
            if isinstance(value, str) and value.strip():
                return value
        return ""


class Round(BaseModel):
    """The turns of one round, in completion order, and the moderator's evaluation if any."""

    number: int
    """1-based."""
    turns: list[Turn] = Field(default_factory=list)
    """Speaker turns."""
    moderator: Turn | None = None
    """The moderator's turn closing this round, if the protocol has one."""
    summary: Turn | None = None
    """The summary of the debate up to this round (``history: {strategy: summarize}``), which
    later prompts carry instead of this round's and earlier turns."""


class Decision(BaseModel):
    """The aggregated outcome, for protocols that decide by rule (vote, consensus strategy)."""

    strategy: str
    """Which aggregation produced it, e.g. ``confidence_weighted``."""
    label: str | None = None
    """The decided label, e.g. SUPPORT / OPPOSE / UNCERTAIN or the majority answer."""
    confidence: float | None = None
    """Confidence of the decision in [0, 1]."""
    details: dict[str, Any] = Field(default_factory=dict)
    """Scores and counts behind it."""
    warnings: list[str] = Field(default_factory=list)
    """Why the decision may claim more than it knows: failed turns left out, missing or
    degenerate evidence, missing votes (rules in ``moot.consensus``)."""


class Timings(BaseModel):
    """Wall-clock facts about a run."""

    started_at: float = 0.0
    """Unix time at start."""
    wall_ms: float = 0.0
    """Total wall time."""
    model_ms: float = 0.0
    """Sum of turn latencies (exceeds wall_ms when turns overlap)."""
    queue_ms: float = 0.0
    """Sum of the turns' waits for a model's concurrency gate."""
    deadline_s: float | None = None
    """The run's overall deadline in seconds (see :mod:`moot.deadline`), None for none."""


class DebateResult(BaseModel):
    """Everything a debate produced, auditable end to end."""

    topic: str
    """The question, claim or sentence debated."""
    id: str = ""
    """The run's id (a uuid4 hex, the ``debate_id`` of its events)."""
    protocol: str
    """The protocol's name."""
    personas: list[Persona]
    """Everyone who took part."""
    rounds: list[Round] = Field(default_factory=list)
    """The rounds that ran."""
    verdict: Turn | None = None
    """The judge's turn (summary, synthesis or patch), if the protocol has a judge."""
    decision: Decision | None = None
    """The rule-based aggregation, if any."""
    final_answer: str | None = None
    """The answer to hand on: the judge's answer, the decided label or the fallback."""
    fallback: str | None = None
    """None, or why the final answer is a fallback (timeout, backend failure, budget...)."""
    stopped_early: bool = False
    """True when the early-stop rule ended the debate before its last round."""
    skipped: bool = False
    """True when the debate did not run at all (e.g. ``debate_mode`` off)."""
    human_review: Turn | None = None
    """The human reviewer's turn (phase ``human``, content ``accepted``/``answer``/``note``/``reason``),
    when a LangGraph graph paused for one (:mod:`moot.human_review`)."""
    usage: Usage = Field(default_factory=Usage)
    """Calls and tokens over the whole debate."""
    timings: Timings = Field(default_factory=Timings)
    """Wall and model time."""
    metrics: dict[str, Any] = Field(default_factory=dict)
    """Protocol-specific quality metrics (documented where computed)."""
    failed_turns: int = 0
    """Turns recorded as failed (never invented); cancelled turns are not counted here."""
    cancelled_turns: int = 0
    """Turns cut short because the debate stopped while they were in flight."""
    judge_shares_model_with: list[str] = Field(default_factory=list)
    """Speakers (persona keys) whose model is also a deciding step's model (self-preference risk)."""

    @property
    def degraded(self) -> bool:
        """The result is not a clean one: it fell back, or a turn failed (a skipped run never is).

        The one rule behind a debate's exit code 1 and its stored status ``fell_back``.
        """
        return not self.skipped and (self.fallback is not None or self.failed_turns > 0)

    def __str__(self) -> str:
        """What ``print(result)`` shows: the answer, and why it is a fallback when it is one.

        The answer of a run that fell back is the initial answer or the best one so far, which
        reads like any other: the reason sits beside it, where a person looks.
        """
        head = f"{self.protocol} debate {self.id}: " + ("skipped; " if self.skipped else "")
        lines = [head + f"final answer {self.final_answer!r}"]
        if self.fallback is not None:
            lines.append(f"  FALLBACK, because {self.fallback}")
        if self.failed_turns:
            lines.append(f"  {self.failed_turns} failed turn(s): see result.turns() (each has .error)")
        lines.append(
            f"  {self.usage.calls} calls, {self.usage.prompt_tokens + self.usage.completion_tokens} tokens"
        )
        return "\n".join(lines)

    def record_json(self) -> str:
        """This result as JSON with each turn's :attr:`Turn.sent` messages (the stored record)."""
        data = self.model_dump(mode="json")

        def put(dumped: dict[str, Any] | None, turn: Turn | None) -> None:
            if dumped is not None and turn is not None and turn.sent is not None:
                dumped["sent"] = [m.model_dump(mode="json") for m in turn.sent]

        for rnd, out in zip(self.rounds, data["rounds"], strict=True):
            for turn, dumped in zip(rnd.turns, out["turns"], strict=True):
                put(dumped, turn)
            put(out.get("moderator"), rnd.moderator)
        put(data.get("verdict"), self.verdict)
        return orjson.dumps(data).decode()

    def turns(self, *, include_judge: bool = False) -> list[Turn]:
        """All speaker turns in round order (plus moderator turns and, if asked, the verdict)."""
        out: list[Turn] = []
        for rnd in self.rounds:
            out.extend(rnd.turns)
            if rnd.moderator is not None:
                out.append(rnd.moderator)
        if include_judge and self.verdict is not None:
            out.append(self.verdict)
        return out


class RetryRecord(BaseModel):
    """One transient failure of a model request that was retried (see :class:`RequestRecord`)."""

    time: float
    """Unix time the failure was seen (the wait starts then)."""
    error_kind: str
    """The error's class name, e.g. ``ModelHTTPError``."""
    status: int | None = None
    """The HTTP status, when the server answered."""
    wait_s: float = 0.0
    """Seconds waited before the next attempt."""


class RequestRecord(BaseModel):
    """One model request as a turn made it: the payload of a ``model_request`` event.

    A turn makes one request, or two when its first answer did not match the schema and the
    repair request was sent (``attempt`` 1). Transient failures retried inside one request
    are its ``retries``. ``messages`` and ``reply`` are the request's text: they are kept in
    memory for subscribers (a tracer with content capture on) and never serialised.
    """

    model: str
    """The requested model (its ``provider:model`` spec name)."""
    response_model: str = ""
    """The model the backend says answered ("" when it failed)."""
    attempt: int = 0
    """0 for the turn's first request, 1 for its repair request."""
    started: float = 0.0
    """Unix time the request was made (before waiting for the model's concurrency gate)."""
    ended: float = 0.0
    """Unix time the answer, or the final failure, came back."""
    max_tokens: int | None = None
    """The generation cap sent."""
    temperature: float | None = None
    """The sampling temperature sent (None: the backend's default)."""
    output: str = ""
    """The name of the schema the reply must match."""
    usage: Usage = Field(default_factory=Usage)
    """What this request cost (``attempts`` counts its retries)."""
    finish_reason: str | None = None
    """Why generation stopped (``stop``, ``length``...), when it answered."""
    error_kind: str | None = None
    """The failure: an exception class name, or ``invalid_output`` when the answer did not
    match the schema; None when the answer was valid."""
    error: str | None = None
    """The failure's text: the backend error, or the schema error of an invalid answer; None when valid."""
    retries: list[RetryRecord] = Field(default_factory=list)
    """Transient failures retried within this request."""
    endpoint: str | None = None
    """The backend's base URL, if it has one, credentials masked (:func:`moot.models.base.public_endpoint`;
    subscribers show only host and port)."""
    messages: list[Message] = Field(default_factory=list, exclude=True)
    """The messages sent (in memory only: never serialised)."""
    reply: str | None = Field(None, exclude=True)
    """The text received (in memory only: never serialised)."""


EventKind = Literal[
    "debate_started",
    "turn_started",
    "turn_completed",
    "round_completed",
    "judge_completed",
    "debate_completed",
    "model_request",
    "retry",
    "error",
]


class Event(BaseModel):
    """A progress event, delivered to callbacks and async iterators and written as JSON lines."""

    kind: EventKind
    """What happened."""
    debate_id: str = ""
    """Identifies the debate run (a uuid4 hex, unique across processes)."""
    time: float = 0.0
    """Unix time."""
    round: int | None = None
    """The round, where it applies."""
    speaker: str | None = None
    """The speaker, where it applies."""
    phase: str | None = None
    """``turn``, ``moderator`` or ``judge`` (turn_started, model_request)."""
    turn: Turn | None = None
    """The completed turn (turn_completed, judge_completed)."""
    result: DebateResult | None = None
    """The final result (debate_completed)."""
    message: str | None = None
    """Human-readable detail (errors, retries)."""
    request: RequestRecord | None = None
    """The model request that ended (model_request): one per request a turn sent."""
