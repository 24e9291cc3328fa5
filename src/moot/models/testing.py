"""Test doubles: models that never touch a network or weights.

They ship in the package so users can test their own debate code offline::

    from moot.models.testing import ScriptedModel

    model = ScriptedModel(["first reply", {"answer": "42", "confidence": 0.9}])
    result = Debate("answer", model=model).run_sync("What is 6 x 7?")
    assert model.requests[0].metadata["speaker"] == "affirmative"

Both doubles report usage as whitespace-separated word counts so budgets and
usage totals can be asserted exactly, and both record ``requests`` and the
largest number of requests that were in flight at once (``max_in_flight``),
which is how tests measure real concurrency instead of trusting sleeps.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import ModelResponseError, ReplayMissingError, UsageError
from .base import Model, ModelRequest, ModelResponse, Usage, current_unit, note_cached_reply

if TYPE_CHECKING:  # pragma: no cover - only for the annotation of ReplayModel.from_run
    from ..runs.store import RunStore

__all__ = [
    "FunctionModel",
    "ReplayModel",
    "Reply",
    "SchemaModel",
    "ScriptedModel",
    "from_spec",
    "schema_instance",
]

#: What a scripted or function model may produce for one call: text, a dict
#: (sent as JSON), a full ModelResponse, or an exception to raise.
Reply = str | Mapping[str, Any] | ModelResponse | BaseException


def _word_count(text: str) -> int:
    return len(text.split())


class _RecordingModel(Model):
    """Shared bookkeeping: request log, in-flight tracking, optional latency."""

    def __init__(self, name: str, delay: float) -> None:
        super().__init__()
        self.name = name
        self.delay = delay
        self.requests: list[ModelRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0

    async def request(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
            reply = await self._reply(request)
        finally:
            self.in_flight -= 1
        return self._to_response(request, reply)

    async def _reply(self, request: ModelRequest) -> Reply:
        raise NotImplementedError

    def _to_response(self, request: ModelRequest, reply: Reply) -> ModelResponse:
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, ModelResponse):
            return reply
        text = reply if isinstance(reply, str) else json.dumps(dict(reply), ensure_ascii=False)
        prompt_words = sum(_word_count(m.content) for m in request.messages)
        finish = "stop"
        if request.max_tokens is not None and _word_count(text) > request.max_tokens:
            finish = "length"
        return ModelResponse(
            text=text,
            usage=Usage(calls=1, prompt_tokens=prompt_words, completion_tokens=_word_count(text)),
            model=self.name,
            finish_reason=finish,
        )

    def count_tokens(self, text: str) -> int | None:
        """Words stand in for tokens, so caps and trims are exact in tests."""
        return _word_count(text)


class ScriptedModel(_RecordingModel):
    """Replays given replies in order.

    Args:
        replies: either one list consumed in call order, or a mapping from a
            speaker key (``request.metadata["speaker"]``) to that speaker's
            own list; the key ``"*"`` serves any speaker without a list.
        delay: seconds to sleep in each call (to simulate latency).
        name: the model name reported in responses.

    Raises:
        AssertionError: (at call time) when the script has run out, so a test
            that makes more calls than it expected fails loudly.
    """

    def __init__(
        self,
        replies: Iterable[Reply] | Mapping[str, Iterable[Reply]],
        *,
        delay: float = 0.0,
        name: str = "test:scripted",
    ) -> None:
        super().__init__(name, delay)
        self._by_speaker: dict[str, deque[Reply]] | None = None
        self._queue: deque[Reply] = deque()
        if isinstance(replies, Mapping):
            self._by_speaker = {str(k): deque(v) for k, v in replies.items()}
        else:
            self._queue = deque(replies)

    async def _reply(self, request: ModelRequest) -> Reply:
        if self._by_speaker is None:
            queue = self._queue
        else:
            speaker = str(request.metadata.get("speaker", "*"))
            queue = self._by_speaker.get(speaker) or self._by_speaker.get("*", deque())
        if not queue:
            raise AssertionError(
                f"ScriptedModel ran out of replies (call #{len(self.requests)}, {request.metadata})"
            )
        return queue.popleft()

    @property
    def remaining(self) -> int:
        """Replies not yet used."""
        if self._by_speaker is None:
            return len(self._queue)
        return sum(len(q) for q in self._by_speaker.values())


class FunctionModel(_RecordingModel):
    """Computes each reply with a function of the request (sync or async).

    Args:
        fn: ``fn(request) -> Reply``; may be ``async``.
        delay: seconds to sleep in each call.
        name: the model name reported in responses.
    """

    def __init__(
        self,
        fn: Callable[[ModelRequest], Reply | Awaitable[Reply]],
        *,
        delay: float = 0.0,
        name: str = "test:function",
    ) -> None:
        super().__init__(name, delay)
        self.fn = fn

    async def _reply(self, request: ModelRequest) -> Reply:
        out = self.fn(request)
        if inspect.isawaitable(out):
            out = await out
        return out


def schema_instance(schema: Mapping[str, Any], root: Mapping[str, Any] | None = None) -> Any:
    """The smallest value that satisfies a JSON schema (as pydantic emits them).

    Required properties only; strings are ``"x"``, numbers their minimum or
    0.5, arrays empty (or their ``minItems`` of items), enums their first value.
    """
    root = root or schema
    if "$ref" in schema:
        name = str(schema["$ref"]).split("/")[-1]
        return schema_instance(root.get("$defs", {})[name], root)
    if "enum" in schema:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            options = [o for o in schema[key] if o.get("type") != "null"] or schema[key]
            return schema_instance(options[0], root)
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        props = schema.get("properties", {})
        return {k: schema_instance(props[k], root) for k in schema.get("required", []) if k in props}
    if kind == "array":
        return [schema_instance(schema.get("items", {}), root) for _ in range(int(schema.get("minItems", 0)))]
    if kind == "string":
        return "x" * max(1, int(schema.get("minLength", 1)))
    if kind == "integer":
        return int(schema.get("minimum", 1))
    if kind == "number":
        return float(schema.get("minimum", 0.5))
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    return "x"


class SchemaModel(_RecordingModel):
    """Answers every structured request with the smallest valid instance of its schema.

    Like pydantic-ai's TestModel: exercises a whole protocol without writing a
    script. Plain-text requests get ``text``.

    Args:
        text: the reply to requests without a schema.
        delay: seconds to sleep in each call.
        name: the model name reported in responses.
    """

    def __init__(self, *, text: str = "ok", delay: float = 0.0, name: str = "test:schema") -> None:
        super().__init__(name, delay)
        self.text = text

    async def _reply(self, request: ModelRequest) -> Reply:
        if request.json_schema is None:
            return self.text
        return dict(schema_instance(request.json_schema))


def from_spec(rest: str) -> Model:
    """The ``test`` provider: ``test`` or ``test:schema`` is a :class:`SchemaModel`.

    It lets the CLI run a whole debate offline (``moot run "X" --model test``), e.g. to check an
    installation or a protocol file without a model.

    Raises:
        UsageError: any other name after ``test:``.
    """
    if rest not in ("", "schema"):
        raise UsageError(f"unknown test model {rest!r}; known: test:schema")
    return SchemaModel()


_Slot = tuple[str, int, str, str | None, str | None]
"""Who asked: speaker, round, phase, and for a batch's calls the item (a bench item, an ABSA
sentence's id) and the method (a bench's)."""


def _debate_turns(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A debate result's recorded turns (JSON data): every round's turns, moderators, the judge."""
    turns = [dict(t) for rnd in data.get("rounds") or [] for t in rnd.get("turns") or []]
    turns += [dict(rnd["moderator"]) for rnd in data.get("rounds") or [] if rnd.get("moderator")]
    if data.get("verdict"):
        turns.append(dict(data["verdict"]))
    return turns


def _replay_name(models: set[Any]) -> str:
    """``replay:<model>`` when the record has one model (a replay's: the one it replayed), else ``replay``."""
    names = {str(m).removeprefix("replay:") for m in models if m}
    return f"replay:{names.pop()}" if len(names) == 1 else "replay"


class ReplayModel(Model):
    """A recorded debate's replies as the model: re-run it, or re-decide it, with no request.

    Each request is answered with the reply the recorded run got for the same speaker, round
    and phase (a turn's validated content as JSON; a failed turn's raw text, or its error
    again). A reply the run never recorded (another protocol asks for a turn it never had) is
    a :class:`~moot.errors.ReplayMissingError` naming the request, never a silent call, unless
    ``live`` is given: then ``live`` answers it, and ``until_round`` sends every request after
    that round (the judge's included) to ``live`` ("replay up to here, continue live").

    Replies served from the record count as ``usage.cached``, not as calls; the turns they
    make carry the model name ``replay:<recorded model>``, so a record tells replayed turns
    from live ones. Turn a real run into a regression test of your own pipeline::

        model = ReplayModel.from_run(open_store("runs.db"), "3f2a9c")
        result = Debate("adversarial", model=model).run_sync(topic)  # no server needed

    Args:
        turns: the recorded turns (``Turn`` objects or their JSON dicts).
        live: the model for what the record does not hold (or holds past ``until_round``).
        until_round: replay rounds up to this one; later rounds and the judge go to ``live``.
        name: the model's name.
    """

    def __init__(
        self,
        turns: Iterable[Any],
        *,
        live: Model | None = None,
        until_round: int | None = None,
        name: str = "replay",
    ) -> None:
        super().__init__()
        if until_round is not None and live is None:
            raise UsageError("replaying up to a round needs a live model for the rounds after it")
        self.name = name
        self.live = live
        self.until_round = until_round
        self.requests: list[ModelRequest] = []
        self.replayed = 0
        """Requests answered from the record."""
        self._replies: dict[_Slot, deque[dict[str, Any]]] = {}
        self.sentences: dict[str | None, str] = {}
        """An ABSA record's sentences by unit id (None: a one-sentence run), to name what is missing."""
        self.missing: list[dict[str, Any]] = []
        """Who asked for a reply the record does not hold, each time (see ``ReplayMissingError``)."""
        self.last_round = 0
        for turn in turns:
            data = turn.model_dump(mode="json") if hasattr(turn, "model_dump") else dict(turn)
            item = data.get("item")
            slot = (
                str(data["speaker"]),
                int(data["round"]),
                str(data.get("phase") or "turn"),
                None if item is None else str(item),
                data.get("method"),
            )
            self._replies.setdefault(slot, deque()).append(data)
            self.last_round = max(self.last_round, slot[1])
        if live is not None:
            self.max_concurrency = live.max_concurrency
            self.request_timeout = live.request_timeout
            self.tokens_per_second = live.tokens_per_second

    @classmethod
    def from_result(cls, result: Any, **kwargs: Any) -> ReplayModel:
        """From a ``DebateResult`` (or its JSON data): every round's turns, moderators and the judge."""
        data = result.model_dump(mode="json") if hasattr(result, "model_dump") else result
        if not isinstance(data, dict) or "rounds" not in data:
            raise UsageError("not a debate result: a replay needs a debate run (moot run, Debate(store=))")
        turns = _debate_turns(data)
        kwargs.setdefault("name", _replay_name({t.get("model") for t in turns}))
        return cls(turns, **kwargs)

    @classmethod
    def from_absa(cls, results: Any, **kwargs: Any) -> ReplayModel:
        """From an ABSA run's record: its stage requests' replies and its debate's turns.

        ``results`` is one sentence's result (a ``FinalResult`` or its stored data, which keep
        ``stage_requests``), or a batch's ``{unit id: result}``; a batch is replayed with the
        same ids (``run_absa_batch(ids=...)``), each sentence getting its own replies. Each stage
        call gets its recorded replies in order (an invalid first answer, then its repair), and
        a request that failed fails again. A reply the record does not hold (a setting that asks
        for a stage or a turn the run never had) is a :class:`~moot.errors.ReplayMissingError`
        naming the stage and the sentence.

        Raises:
            UsageError: not an ABSA result, or one recorded before moot kept its stage requests.
        """
        single = hasattr(results, "record_data") or (isinstance(results, Mapping) and "sentence" in results)
        units: dict[str | None, Any] = {None: results} if single else dict(results)
        turns: list[dict[str, Any]] = []
        sentences: dict[str | None, str] = {}
        for unit, result in units.items():
            data = result.record_data() if hasattr(result, "record_data") else result
            where = "" if unit is None else f" of sentence {unit}"
            if not isinstance(data, Mapping) or "sentence" not in data:
                raise UsageError(f"not an ABSA result{where}: a replay needs an ABSA run (moot absa)")
            requests = data.get("stage_requests")
            if requests is None:
                raise UsageError(
                    f"the ABSA result{where} keeps no stage requests (recorded before moot kept them): "
                    "it cannot be replayed"
                )
            sentences[unit] = str(data["sentence"])
            for r in requests:
                turns.append(
                    {
                        "speaker": r["stage"],
                        "round": 0,
                        "phase": "absa",
                        "item": unit,
                        "raw": r.get("reply"),
                        "error": r.get("error") or r.get("error_kind"),
                        "finish_reason": r.get("finish_reason"),
                        "model": r.get("model"),
                    }
                )
            turns += [{**t, "item": unit} for t in _debate_turns(data.get("debate") or {})]
        # Named after the model the stages asked for (a debate turn names the one that answered).
        asked = {t.get("model") for t in turns if t["phase"] == "absa"}
        kwargs.setdefault("name", _replay_name(asked or {t.get("model") for t in turns}))
        replay = cls(turns, **kwargs)
        replay.sentences = sentences
        return replay

    @classmethod
    def from_bench(cls, records: Iterable[Any], **kwargs: Any) -> ReplayModel:
        """From a benchmark's unit records (``ItemRecord`` objects or their JSON data).

        Each agent's reply at each round of each unit is one recorded reply, keyed by item,
        method, agent and round; a round-0 sample also answers the same item and agent under
        another plain method (``single``, ``vote:K`` and ``society:N:T`` share round 0), so a
        replay with another method list reuses them and names any sample never recorded.
        A preset's units (debates inside the bench) keep no per-request replies: not replayable.
        """
        turns: list[dict[str, Any]] = []
        for record in records:
            data = record.model_dump(mode="json") if hasattr(record, "model_dump") else record
            for number, answers in enumerate(data.get("rounds") or []):
                for answer in answers:
                    turns.append(
                        {
                            "speaker": answer["agent"],
                            "round": number,
                            "phase": "bench",
                            "item": data["item_id"],
                            "method": data["method"],
                            "raw": answer.get("text", ""),
                        }
                    )
        kwargs.setdefault("name", "replay")
        return cls(turns, **kwargs)

    @classmethod
    def from_run(
        cls, store: RunStore, run_id: str, *, trust_edited: bool = False, **kwargs: Any
    ) -> ReplayModel:
        """From a run in a run store (its id or a unique prefix): a debate, or an ABSA run.

        An ABSA batch is replayed by sentence id (see :meth:`from_absa`). The record is checked
        first (:meth:`~moot.runs.RunStore.replayable`): one edited after it was recorded is
        refused unless ``trust_edited``; one recorded before moot kept digests is replayed with a
        warning on stderr that it cannot be checked.

        Raises:
            UsageError: no such run, the run is not a finished debate or ABSA run, or its record
                is damaged or was edited (and ``trust_edited`` is False).
        """
        record = store.replayable(run_id, trust_edited=trust_edited)
        if record.kind == "absa" and record.config.get("batch"):
            units = sorted(store.iter_items(record.id), key=lambda i: int(i.data.get("index", 0)))
            if not units:
                raise UsageError(f"run {record.id} has no stored sentence to replay (status {record.status})")
            return cls.from_absa({u.item: u.data["result"] for u in units}, **kwargs)
        if record.result is None:
            raise UsageError(f"run {record.id} has no stored result to replay (status {record.status})")
        if record.kind == "absa":
            return cls.from_absa(record.result, **kwargs)
        return cls.from_result(record.result, **kwargs)

    def _slot(self, request: ModelRequest) -> _Slot:
        meta = request.metadata
        speaker, phase = str(meta.get("speaker", "")), str(meta.get("phase") or "turn")
        item, method = meta.get("item", current_unit()), meta.get("method")
        return (
            speaker,
            int(meta.get("round", 0) or 0),
            phase,
            None if item is None else str(item),
            None if method is None else str(method),
        )

    def _recorded(self, slot: _Slot) -> dict[str, Any] | None:
        replies = self._replies.get(slot)
        if not replies and slot[2] == "judge":  # a judge is recorded with its last round's number
            judge = (slot[0], "judge", slot[3])
            replies = next((v for k, v in self._replies.items() if (k[0], k[2], k[3]) == judge), None)
        if not replies and slot[2] == "bench" and slot[1] == 0:
            # Round 0 is the same sample in every plain method: any method's recording serves.
            found = next((v for k, v in self._replies.items() if k[:4] == slot[:4] and v), None)
            return dict(found[0]) if found else None
        if not replies:
            return None
        # A bench's replies are served again for each unit that asks (shared round 0); a
        # debate's are used once each, in order.
        return dict(replies[0]) if slot[2] == "bench" else replies.popleft()

    async def request(self, request: ModelRequest) -> ModelResponse:
        """The recorded reply for this request's speaker, round and phase (or ``live``'s)."""
        self.requests.append(request)
        slot = self._slot(request)
        past = self.until_round is not None and (
            slot[1] > self.until_round or (slot[2] == "judge" and self.until_round < self.last_round)
        )
        recorded = None if past else self._recorded(slot)
        if recorded is None:
            if self.live is not None:
                return await self.live.request(request)
            who: dict[str, Any] = {"speaker": slot[0], "round": slot[1], "phase": slot[2]}
            where = f"round {slot[1]}, {slot[2]}"
            sentence = self.sentences.get(slot[3])
            if sentence is not None:  # an ABSA record: name the sentence (and its id in a batch)
                who |= {"item": slot[3], "sentence": sentence}
                short = sentence if len(sentence) <= 60 else sentence[:59] + "…"
                where += (", sentence" if slot[3] is None else f", sentence {slot[3]}") + f" {short!r}"
            elif slot[3] is not None:
                who |= {"item": slot[3], "method": slot[4]}
                where += f", item {slot[3]}, {slot[4]}"
            self.missing.append(who)
            raise ReplayMissingError(
                f"the recorded run has no reply for {slot[0]} ({where}); a replay sends no request",
                request=who,
                model=self.name,
            )
        self.replayed += 1
        note_cached_reply()
        if recorded.get("content") is not None:
            text = json.dumps(recorded["content"])
        elif recorded.get("raw") is not None:
            text = str(recorded["raw"])
        else:  # the recorded turn failed without a reply: it fails again, the same way
            why = recorded.get("error") or "no reply"
            failure = ModelResponseError(f"replayed failure: {why}", model=self.name)
            failure.retryable = False  # once: a retry would take the next recorded reply
            raise failure
        finish = recorded.get("finish_reason") or "stop"  # a reply cut at the cap is read as one again
        return ModelResponse(text=text, usage=Usage(cached=1), model=self.name, finish_reason=finish)
