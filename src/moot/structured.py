"""One structured model call: ask for JSON, validate it, repair once, or record the failure.

This is the only place model output becomes data. The rule is strict: the
first reply is validated against the schema; if it fails, exactly one repair
request carries the validation error back to the model; if that fails too,
the outcome is a failure with the raw text kept for audit. Nothing is ever
guessed or filled in.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from .deadline import Deadline
from .errors import ModelError, ModelHTTPError, UsageError, error_text
from .jsontext import extract_json, parse_partial
from .models.base import CallStats, Message, Model, ModelRequest, ModelResponse, Usage, public_endpoint
from .models.retry import RetryPolicy, call_model
from .transcript import RequestRecord, RetryRecord

__all__ = ["OnRequest", "Outcome", "ask", "extract_json", "json_schema", "schema_hint"]

OnRequest = Callable[[RequestRecord], Awaitable[None] | None]
"""Called by :func:`ask` as each model request ends (answered, invalid or failed); may be async."""

logger = logging.getLogger(__name__)

_CAP_LIMIT = 131_072  # moot.protocol.MAX_TOKENS_PER_CALL (protocol imports this module's layer)


@functools.cache
def json_schema(output_type: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema of ``output_type``, computed once per type.

    Generating it costs ~10 ms, far more than the rest of a turn's bookkeeping,
    so it must not happen per call. Treat the returned dict as read-only.
    """
    return output_type.model_json_schema()


@functools.cache
def schema_hint(output_type: type[BaseModel]) -> str:
    """A compact field list for prompts, e.g. ``{"answer": string, "confidence": number}``.

    Prompt-only endpoints need it; constrained decoders get the full schema too.
    """
    schema = json_schema(output_type)
    props: dict[str, Any] = schema.get("properties", {})
    parts = []
    for name, prop in props.items():
        parts.append(f'"{name}": {_type_name(prop, schema)}')
    return "{" + ", ".join(parts) + "}"


def _type_name(prop: dict[str, Any], root: dict[str, Any]) -> str:
    if "enum" in prop:
        return " | ".join(json.dumps(v) for v in prop["enum"])
    if "const" in prop:
        return json.dumps(prop["const"])
    if "$ref" in prop:
        ref = prop["$ref"].split("/")[-1]
        sub = root.get("$defs", {}).get(ref, {})
        if "enum" in sub:
            return _type_name(sub, root)
        inner = ", ".join(f'"{k}": {_type_name(v, root)}' for k, v in sub.get("properties", {}).items())
        return "{" + inner + "}"
    if "anyOf" in prop:
        return " | ".join(_type_name(p, root) for p in prop["anyOf"])
    kind = prop.get("type", "any")
    if kind == "array":
        return f"[{_type_name(prop.get('items', {}), root)}, ...]"
    return str(kind)


@dataclass
class Outcome:
    """What one structured call produced."""

    value: BaseModel | None = None
    """The validated output, or None on failure."""
    raw: str = ""
    """The last raw text from the model."""
    error: str | None = None
    """Why it failed (validation or backend), or None."""
    exception: Exception | None = None
    """The backend exception, when the failure was a ModelError."""
    usage: Usage = field(default_factory=Usage)
    """Usage summed over the call and its repair (``attempts``: requests sent, retries included)."""
    latency_ms: float = 0.0
    """Wall time, retries and repair included, time waiting for the model's concurrency gate not."""
    queue_ms: float = 0.0
    """Time spent waiting for the model's concurrency gate."""
    repaired: bool = False
    """True when the repair request produced the valid value."""
    trimmed: bool = False
    """True when the value was read from a reply cut at the token cap (its last string may be cut)."""
    finish_reason: str | None = None
    """The last response's finish reason."""
    model: str = ""
    """The model name that answered."""

    @property
    def ok(self) -> bool:
        """True when a valid value was produced."""
        return self.value is not None


def _cut_decisive(partial: dict[str, Any], complete: dict[str, Any], decisive: Collection[str]) -> str | None:
    """The first decisive field ``partial`` holds cut short (absent or other in ``complete``), or None."""
    for name in decisive:
        if name in partial and partial[name] != complete.get(name, _ABSENT):
            return name
    return None


_ABSENT = object()


def _validate(
    output_type: type[BaseModel],
    text: str,
    finish_reason: str | None = None,
    context: dict[str, Any] | None = None,
    decisive: Collection[str] = (),
) -> tuple[BaseModel | None, str | None, bool]:
    """``(value, None, trimmed)`` or ``(None, error, False)``.

    A reply cut at the token cap whose complete part still holds every required field
    is accepted as ``trimmed`` (issue: answers longer than the cap are trimmed, not lost),
    unless the string cut short is one of the ``decisive`` fields (a judge's answer: issue 32,
    ``{"final_answer": "S`` is no decision), which makes the reply invalid.
    """
    try:
        data = extract_json(text)
    except ValueError as exc:
        if finish_reason == "length":
            readings = parse_partial(text)
            complete = readings[-1] if readings else {}  # the last reading drops the cut string
            cut: str | None = None
            for partial in readings:
                name = _cut_decisive(partial, complete, decisive)
                if name is not None:
                    cut = cut or name
                    continue
                try:
                    return output_type.model_validate(partial, context=context), None, True
                except ValidationError:
                    continue
            if cut is not None:
                return None, f"the decisive field {cut!r} was cut off at the token limit", False
        return None, str(exc), False
    if not isinstance(data, dict):
        return None, "the reply must be a JSON object", False
    try:
        return output_type.model_validate(data, context=context), None, False
    except ValidationError as exc:
        return None, _short_errors(exc), False


def _short_errors(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors()[:8]:
        loc = ".".join(str(p) for p in err["loc"]) or "(root)"
        lines.append(f"{loc}: {err['msg'].removeprefix('Value error, ')}")  # the rule's own words
    return "; ".join(lines)


async def ask(
    model: Model,
    messages: list[Message],
    output_type: type[BaseModel],
    *,
    max_tokens: int | None = None,
    temperature: float | None = None,
    seed: int | None = None,
    metadata: dict[str, Any] | None = None,
    retry: RetryPolicy | None = None,
    before_call: Callable[[], None] | None = None,
    on_retry: Callable[[int, ModelError, float], None] | None = None,
    stats: CallStats | None = None,
    validation_context: dict[str, Any] | None = None,
    on_request: OnRequest | None = None,
    deadline: Deadline | None = None,
    decisive: Collection[str] = (),
) -> Outcome:
    """Ask ``model`` for one ``output_type`` object; validate, repair once, or fail.

    Args:
        model: the backend.
        messages: the prompt.
        output_type: the pydantic model the reply must match.
        max_tokens: generation cap per request.
        temperature: sampling temperature.
        seed: sampling seed.
        metadata: passed to the backend (test doubles route on ``speaker``/``phase``).
        retry: policy for transient backend errors.
        before_call: called before each request (budgets raise from here).
        on_retry: called before each retry wait.
        stats: kept up to date while the call runs (so a cancelled caller knows what was spent).
        validation_context: passed to pydantic as ``context`` (e.g. ``{"topic": ...}`` for
            schemas whose rules depend on the topic); a violation gets the one repair.
        on_request: called with a :class:`~moot.transcript.RequestRecord` as each request
            ends (the first, and the repair if one is sent); not for a request cut short by
            cancellation. None (the default) builds no record.
        deadline: the caller's deadline: a rate limit whose pause would outlast it fails
            the call at once (:class:`~moot.errors.RateLimited`, with the reason).
        decisive: the output fields a decision is read from (a judge's answer field): a reply
            cut at the token cap inside one of them is invalid, never read as far as it got,
            and its repair request may write twice as many tokens (room to finish).

    Returns:
        An Outcome. Backend failures after retries, and unexpected exceptions from
        the backend (a bug; logged with its traceback), are returned as failed
        outcomes (``exception`` set), never raised.

    Raises:
        UsageError: the call cannot work at all (e.g. ModelRequestsBlocked).
        BudgetExceeded: raised by ``before_call``.
    """
    meta = dict(metadata or {})
    schema = json_schema(output_type)
    out = Outcome()
    stats = stats if stats is not None else CallStats()
    started = time.perf_counter()
    convo = list(messages)
    cap = max_tokens
    for attempt in (0, 1):
        if before_call is not None:
            before_call()
        request = ModelRequest(
            messages=convo,
            json_schema=schema,
            schema_name=output_type.__name__,
            max_tokens=cap,
            temperature=temperature,
            seed=seed,
            metadata={**meta, "attempt": attempt},
        )
        watch = _RequestWatch(model, request, stats, on_retry) if on_request is not None else None
        try:
            response: ModelResponse = await call_model(
                model,
                request,
                retry,
                on_retry=watch.on_retry if watch else on_retry,
                stats=stats,
                deadline=deadline,
            )
        except ModelError as exc:
            out.error, out.exception = error_text(exc), exc
            if watch is not None:
                await _report(on_request, watch.record(None, type(exc).__name__, out.error))
            break
        except UsageError:
            raise
        except Exception as exc:  # noqa: BLE001 - a backend bug must fail this turn, not vanish
            logger.exception("%s raised an unexpected %s", model.name, type(exc).__name__)
            out.error, out.exception = f"unexpected {type(exc).__name__} from {model.name}: {exc}", exc
            if watch is not None:
                await _report(on_request, watch.record(None, type(exc).__name__, out.error))
            break
        out.raw, out.finish_reason, out.model = response.text, response.finish_reason, response.model
        stats.raw, stats.error = response.text, None
        value, error, trimmed = _validate(
            output_type, response.text, response.finish_reason, validation_context, decisive
        )
        if watch is not None:
            kind, why = (None, None) if value is not None else ("invalid_output", f"invalid output: {error}")
            await _report(on_request, watch.record(response, kind, why))
        if value is not None:
            out.value, out.error, out.repaired, out.trimmed = value, None, attempt == 1, trimmed
            break
        out.error = stats.error = f"invalid output: {error}"
        logger.info("%s: invalid output (attempt %d): %s", model.name, attempt + 1, error)
        if response.finish_reason == "length":
            error = f"{error} (the reply was cut off at the token limit: answer more briefly)"
            if decisive and cap is not None:
                cap = min(cap * 2, _CAP_LIMIT)  # the decision was cut: room to finish it
        convo = [
            *messages,
            Message(role="assistant", content=response.text),
            Message(
                role="user",
                content=(
                    f"Your reply did not match the required JSON schema: {error}. "
                    f"Reply again with only one JSON object of the form {schema_hint(output_type)}."
                ),
            ),
        ]
    out.usage = stats.usage.model_copy()
    out.queue_ms = stats.queue_s * 1000
    out.latency_ms = (time.perf_counter() - started) * 1000 - out.queue_ms
    return out


class _RequestWatch:
    """What one request did, gathered for :class:`~moot.transcript.RequestRecord` (only when asked)."""

    def __init__(
        self,
        model: Model,
        request: ModelRequest,
        stats: CallStats,
        on_retry: Callable[[int, ModelError, float], None] | None,
    ) -> None:
        self.model, self.request, self.stats, self._on_retry = model, request, stats, on_retry
        self.started = time.time()
        self._before = stats.usage.model_copy()
        self.retries: list[RetryRecord] = []

    def on_retry(self, attempt: int, err: ModelError, wait: float) -> None:
        status = err.status_code if isinstance(err, ModelHTTPError) else None
        self.retries.append(
            RetryRecord.model_construct(
                time=time.time(), error_kind=type(err).__name__, status=status, wait_s=wait
            )
        )
        if self._on_retry is not None:
            self._on_retry(attempt, err, wait)

    def record(
        self, response: ModelResponse | None, error_kind: str | None, error: str | None = None
    ) -> RequestRecord:
        req = self.request
        # Validated construction: pydantic-core checks these typed fields in ~6 us, where
        # model_construct's Python loop over them takes ~11 (one record a request while traced).
        return RequestRecord(
            model=self.model.name,
            response_model=response.model if response is not None else "",
            attempt=int(req.metadata.get("attempt", 0)),
            started=self.started,
            ended=time.time(),
            max_tokens=req.max_tokens,
            temperature=req.temperature,
            output=req.schema_name,
            usage=self.stats.usage.minus(self._before),
            finish_reason=response.finish_reason if response is not None else None,
            error_kind=error_kind,
            error=error,
            retries=self.retries,
            endpoint=public_endpoint(self.model),
            messages=req.messages,
            reply=response.text if response is not None else None,
        )


async def _report(on_request: OnRequest | None, record: RequestRecord) -> None:
    if on_request is None:
        return
    out = on_request(record)
    if inspect.isawaitable(out):
        await out
