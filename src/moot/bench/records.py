"""The per-item result records written to ``results.jsonl`` (one JSON object per line)."""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from ..models.base import Message, Usage
from ..transcript import JudgingRecord, RetryRecord

__all__ = ["AgentAnswer", "ItemRecord", "SentMessage"]

MIN_QUOTE = 64
"""A reply this long or longer, quoted whole in a later message of its unit, is stored there as a
reference to the reply (:attr:`SentMessage.parts`)."""


class SentMessage(BaseModel):
    """One message sent to a unit's agents, as the record keeps it (:attr:`ItemRecord.messages`).

    A message that quotes earlier replies of the unit (a society's debate prompt holds the
    peers' answers; an agent's history holds its own) keeps its text in ``parts``: pieces of
    text and ``[round, index]`` references to ``ItemRecord.rounds[round][index].text``, so a
    reply is stored once however many prompts quote it. :meth:`ItemRecord.message` joins them.
    """

    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant"]
    """Who speaks."""
    content: str = ""
    """The text (empty when ``parts`` holds it)."""
    parts: list[str | tuple[int, int]] | None = None
    """The text as pieces: strings, and ``[round, index]`` for an earlier reply quoted whole."""

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            if data.get("parts") is None:
                data.pop("parts", None)
            elif not data.get("content"):
                data.pop("content", None)
        return data


class AgentAnswer(BaseModel):
    """One agent's reply in one round, parsed and scored."""

    model_config = ConfigDict(extra="ignore")

    agent: str
    """``agent0``, ``agent1``... (or the persona key for presets)."""
    answer: str | None
    """The parsed answer in canonical form; None is a parse failure."""
    correct: bool
    """Whether ``answer`` equals the gold answer (never true for a parse failure)."""
    rule: str = "none"
    """The parser rule that found the answer (``paren``, ``boxed``, ``last_number``...) or ``none``."""
    in_format: bool = False
    """The answer was written in the format the prompt asked for (the task's format rule)."""
    lenient: str | None = None
    """The answer a lenient parser would read (never scored; see :mod:`moot.bench.parsers`)."""
    text: str = ""
    """The raw reply, kept for audit."""
    finish: str | None = None
    """The backend's finish reason (``length`` means the reply was cut at max_tokens)."""
    sent: list[int] | None = None
    """The messages this agent was sent for this reply, in order, as indices into its unit's
    :attr:`ItemRecord.messages` (each distinct message is stored once per unit: round 0's
    prompt, which every agent is sent, once). None in records written before moot kept them."""
    usage: Usage | None = None
    """What the request behind this reply cost (``attempts`` counts its retries). The K samples
    of one ``n=K`` request carry its usage on the first; a round-0 sample shared by several
    methods carries it in each (as ``ItemRecord.calls`` counts it). None in older records."""
    latency_s: float | None = None
    """Seconds from sending the request to its answer, retries included, waiting for the
    model's concurrency gate not (``queue_s``). None in older records."""
    queue_s: float = 0.0
    """Seconds the request waited for the model's concurrency gate."""
    retries: list[RetryRecord] = Field(default_factory=list)
    """Transient failures retried within the request (kind, HTTP status, wait)."""

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler) -> Any:
        # A bench stores thousands of answers: the transcript fields are left out when empty.
        data = handler(self)
        if isinstance(data, dict):
            for key, empty in (("sent", None), ("usage", None), ("latency_s", None), ("queue_s", 0.0)):
                if key in data and data[key] == empty:
                    del data[key]
            if not data.get("retries", True):
                del data["retries"]
            if isinstance(data.get("usage"), dict):  # counts of 0 are the defaults
                data["usage"] = {k: v for k, v in data["usage"].items() if v}
        return data


class ItemRecord(BaseModel):
    """The outcome of one method on one item."""

    model_config = ConfigDict(extra="ignore")

    item_id: str
    """The item's stable id."""
    method: str
    """The canonical method name, e.g. ``society:3:2``."""
    gold: str
    """The correct answer."""
    final: str | None
    """The method's final answer (parsed); None is a parse failure."""
    correct: bool
    """Whether ``final`` is right; a parse failure is wrong."""
    parse_failed: bool
    """True when ``final`` is None."""
    lenient: str | None = None
    """The final answer had every reply been read by the lenient parser (reported, never scored)."""
    rounds: list[list[AgentAnswer]] = Field(default_factory=list)
    """Every agent's answer at every round that ran (round 0 first)."""
    calls: int = 0
    """Model calls actually made (requests a model served). A round-0 reply shared with another
    method on the same item (:mod:`moot.bench.methods`) counts in each method that used it, so a
    method's cost is what it would be alone."""
    cached: int = 0
    """Replies served from the response cache (``--cache``): no model call, never "saved"."""
    nominal_calls: int = 0
    """Calls the method makes without early stopping."""
    prompt_tokens: int = 0
    """Prompt tokens reported by the backend."""
    completion_tokens: int = 0
    """Completion tokens reported by the backend."""
    cost_usd: float | None = None
    """What the unit's calls cost in US dollars (:mod:`moot.models.pricing`); None when a model
    has no price, or in records written before moot kept costs."""
    cost_source: str = ""
    """Where the prices came from (``genai-prices 0.2.3``, ``price=``, ``local``, ``cache``...)."""
    wall_s: float = 0.0
    """Elapsed seconds for this item and method, waits at the model's concurrency gate included."""
    stopped_early: bool = False
    """True when ``early_stop`` or ``debate_if_disagree`` ended the debate before its last round."""
    note: str | None = None
    """Anything the reader should know."""
    fallback: str | None = None
    """Why a preset's debate fell back (``timeout: ...``, ``budget: ...``): the unit is kept for
    audit (its turns, calls, the fallback's text in ``final_text``) but is **not** the method's
    answer: never scored, never a parse failure, never saved calls; ``--resume`` runs it again."""
    final_text: str | None = None
    """A preset's final answer as the engine returned it, before parsing (None for plain
    methods, whose final is the plurality of ``rounds``): what a rescore parses again."""
    messages: list[SentMessage] = Field(default_factory=list)
    """Every distinct message sent to this unit's agents, once, in the order first sent; each
    answer's :attr:`AgentAnswer.sent` lists the ones it was sent, :meth:`message` reads one.
    A reply quoted whole in a later message is a reference there (:class:`SentMessage`).
    Empty in records written before moot kept them."""
    judging: list[JudgingRecord] = Field(default_factory=list)
    """A preset's deciding steps (order shown, labels, the swap audit), when the run set a
    judging option (``--judge-blind``, ``--judge-shuffle``, ``--judge-audit``, ``--judge-swap-robust``)."""
    judge_shares_model_with: list[str] = Field(default_factory=list)
    """A preset's speakers whose model is also the model that decided (docs/judging.md)."""
    history_shortened: int = 0
    """Calls whose prompt left out earlier history, to fit ``--history`` or the model's window
    (:mod:`moot.history`); 0 in records written before moot counted them."""
    history_left_out: int = 0
    """What those calls left out, added up: a society's exchanges (an answer and the debate
    prompt after it), a preset's turns."""
    sha256: str | None = None
    """SHA-256 of the record's JSON without this field, set when the runner writes its line
    (:meth:`sealed`); a line whose digest does not match was edited after it was recorded
    (:meth:`edited`). None in records written before moot sealed them."""

    @model_validator(mode="after")
    def _older_fallback(self) -> ItemRecord:
        # Records written before ``fallback`` existed kept the reason in the note and were scored.
        if self.fallback is None and self.note and self.note.startswith("fallback: "):
            self.fallback, self.note = self.note.removeprefix("fallback: "), None
        if self.fallback is not None:
            self.final, self.correct, self.parse_failed, self.lenient = None, False, False, None
        return self

    def sent_to(self, answer: AgentAnswer) -> list[Message] | None:
        """The messages ``answer``'s agent was sent, in order (None when the record kept none)."""
        if answer.sent is None:
            return None
        return [self.message(i) for i in answer.sent if 0 <= i < len(self.messages)]

    def message(self, index: int) -> Message:
        """Message ``index`` of :attr:`messages` with its text whole (quoted replies put back)."""
        stored = self.messages[index]
        if stored.parts is None:
            return Message(role=stored.role, content=stored.content)
        text = "".join(p if isinstance(p, str) else self.rounds[p[0]][p[1]].text for p in stored.parts)
        return Message(role=stored.role, content=text)

    def _digest(self) -> str:
        return hashlib.sha256(self.model_dump_json(exclude={"sha256"}).encode()).hexdigest()

    def sealed(self) -> ItemRecord:
        """This record with :attr:`sha256` set: what ``results.jsonl`` holds."""
        return self.model_copy(update={"sha256": self._digest()})

    @property
    def edited(self) -> bool:
        """True when the record carries a digest that its content no longer matches."""
        return self.sha256 is not None and self.sha256 != self._digest()

    @property
    def tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens
