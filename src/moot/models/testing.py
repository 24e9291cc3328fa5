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
from typing import Any

from ..errors import UsageError
from .base import Model, ModelRequest, ModelResponse, Usage

__all__ = ["FunctionModel", "Reply", "SchemaModel", "ScriptedModel", "from_spec", "schema_instance"]

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
