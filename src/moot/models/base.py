"""The one-method model contract every backend implements."""

from __future__ import annotations

import asyncio
import os
import weakref
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

import moot.redact as redact

from ..errors import ModelRequestsBlocked
from ._grammar import parse_options
from .limits import DEFAULT_CAP, Announced, Endpoint, Gate, announced_limits, shared_gate

if TYPE_CHECKING:
    from .pricing import Price, Pricing

__all__ = [
    "ALLOW_MODEL_REQUESTS",
    "CallStats",
    "Message",
    "Model",
    "ModelRequest",
    "ModelResponse",
    "Sample",
    "Usage",
    "DEFAULT_REQUEST_TIMEOUT",
    "cap_concurrency",
    "check_allow_model_requests",
    "concurrency_cap",
    "current_unit",
    "default_request_timeout",
    "effective_cap",
    "endpoint_stats",
    "model_info",
    "note_cached_reply",
    "note_extra_request",
    "note_not_sent",
    "public_endpoint",
    "spec_cap",
    "split_spec_options",
    "unit_scope",
]

#: Global kill switch. Unit tests set it to False so that any real backend call
#: raises ModelRequestsBlocked instead of silently touching a network or a model.
ALLOW_MODEL_REQUESTS = True


DEFAULT_REQUEST_TIMEOUT = 60.0
"""Seconds one request to a remote backend may take as a whole, connect to last byte.

Long enough for a reply of a few thousand tokens from a hosted model; short enough that a
hung or dripping server costs a minute per attempt, not the SDKs' 10 minutes per read.
Override with ``MOOT_REQUEST_TIMEOUT``, a backend's ``timeout=``, or ``?timeout=S`` in its spec.
"""


def default_request_timeout() -> float:
    """``$MOOT_REQUEST_TIMEOUT`` if set (seconds), else :data:`DEFAULT_REQUEST_TIMEOUT`.

    Raises:
        UsageError: the variable is not a positive number.
    """
    raw = os.environ.get("MOOT_REQUEST_TIMEOUT", "").strip()
    if not raw:
        return DEFAULT_REQUEST_TIMEOUT
    return _positive_seconds(raw, "MOOT_REQUEST_TIMEOUT")


def _positive_seconds(raw: str, what: str) -> float:
    from ..errors import UsageError

    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise UsageError(f"{what} must be a positive number of seconds, got {raw!r}")
    return value


def split_spec_options(rest: str, allowed: tuple[str, ...] = ("timeout",)) -> tuple[str, dict[str, str]]:
    """Split ``name?key=value&...`` (the part of a spec after ``provider:``) into name and options.

    The options are read strictly (:func:`moot.models._grammar.parse_options`): each one
    ``key=value``, known, given once, with a value. ``timeout`` is checked to be a positive
    number of seconds. The name is returned as written; the backend checks it.

    Raises:
        UsageError: an option not in ``allowed``, one that cannot be read, or a bad timeout.
    """
    name, sep, query = rest.partition("?")
    options = parse_options(query, allowed) if sep else {}
    if "timeout" in options:
        _positive_seconds(options["timeout"], "timeout")
    return name, options


_CONCURRENCY_CAP: ContextVar[int | None] = ContextVar("moot_concurrency_cap", default=None)


def cap_concurrency(cap: int | None) -> None:
    """Cap the requests in flight of every adaptive model, per endpoint, in the current context.

    The CLI's ``--model-concurrency N`` calls it once per command (each command runs in a
    context of its own); a model's own ``max_concurrency`` (``?max_concurrency=N``) still
    applies, the smaller cap winning. The embedded model keeps its 1.
    """
    _CONCURRENCY_CAP.set(cap)


def concurrency_cap() -> int | None:
    """The cap :func:`cap_concurrency` set in the current context (None: none)."""
    return _CONCURRENCY_CAP.get()


def effective_cap(model: Model) -> int | None:
    """``model.max_concurrency``, lowered to the context's cap (:func:`cap_concurrency`) if adaptive."""
    own = model.max_concurrency
    cap = _CONCURRENCY_CAP.get()
    if cap is None or not model.adaptive_concurrency:
        return own
    return cap if own is None else min(own, cap)


def spec_cap(options: dict[str, str], key: str = "max_concurrency") -> int | None:
    """A spec's concurrency cap option (``?max_concurrency=N``), checked; None when absent.

    Raises:
        UsageError: not a positive integer.
    """
    from ..errors import UsageError

    raw = options.get(key)
    if raw is None:
        return None
    if not (raw.strip().isdigit() and int(raw) > 0):
        raise UsageError(f"{key} must be a positive integer, got {raw!r}")
    return int(raw)


def check_allow_model_requests() -> None:
    """Raise ModelRequestsBlocked if real model requests are disabled.

    Every real backend calls this first; test doubles do not.
    """
    # A global of this module: monkeypatching moot.models.base.ALLOW_MODEL_REQUESTS changes it.
    if not ALLOW_MODEL_REQUESTS:
        raise ModelRequestsBlocked(
            "real model requests are disabled (moot.models.ALLOW_MODEL_REQUESTS is False); "
            "use ScriptedModel/FunctionModel or enable requests for this test"
        )


class Message(BaseModel):
    """One chat message."""

    model_config = ConfigDict(frozen=True)

    role: Literal["system", "user", "assistant"]
    """Who speaks."""
    content: str
    """The text."""


class Usage(BaseModel):
    """Token and call counts, and what they cost, summable.

    ``calls`` counts requests the server answered (what a provider bills);
    ``attempts`` counts every request sent, answered or not: retries, structured-mode
    probes, and requests of turns cancelled while in flight, but not a request cancelled
    while it waited for a slot of its endpoint, which sent nothing (:func:`note_not_sent`).
    ``attempts`` is what a server's own request log shows. Backends report ``calls=1`` per response;
    :func:`moot.models.call_model` counts ``attempts`` and prices each answer
    (:mod:`moot.models.pricing`).

    ``cost_usd`` is None when some of the calls were made to a model with no known price
    (``cost_note`` says which and why): an unknown cost is never a silent 0, and a sum
    with an unknown part is unknown.
    """

    calls: int = 0
    """Requests answered by the model."""
    prompt_tokens: int = 0
    """Prompt (input) tokens."""
    completion_tokens: int = 0
    """Completion (output) tokens."""
    attempts: int = 0
    """Requests sent (retries and unanswered ones included; a refused connection sent nothing)."""
    cached: int = 0
    """Replies served from a response cache (:mod:`moot.models.cache`): no request was sent, so
    they count in neither ``calls`` nor ``attempts``."""
    cost_usd: float | None = 0.0
    """What the calls cost in US dollars; None when a model's price is unknown (see ``cost_note``)."""
    cost_source: str = ""
    """Where the prices came from: ``genai-prices X.Y.Z``, ``price=`` (the spec or config), ``local``
    or ``test`` (free), ``cache`` or ``replay`` (no request billed); several joined by ``, ``."""
    cost_note: str | None = None
    """Why ``cost_usd`` is None (the unpriced model), else None."""

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens

    @classmethod
    def sum_of(cls, usages: Iterable[Usage]) -> Usage:
        """The sum of ``usages``, built once (``+`` in a loop builds one Usage per addition)."""
        totals = dict.fromkeys(_COUNTS, 0)
        cost: float | None = 0.0
        sources: dict[str, None] = {}
        notes: dict[str, None] = {}
        for usage in usages:
            for name in _COUNTS:
                totals[name] += getattr(usage, name)
            cost = None if cost is None or usage.cost_usd is None else cost + usage.cost_usd
            _merge(sources, usage.cost_source, ", ")
            _merge(notes, usage.cost_note, "; ")
        return cls(
            **totals, cost_usd=cost, cost_source=", ".join(sources), cost_note="; ".join(notes) or None
        )

    def __add__(self, other: Usage) -> Usage:
        return Usage.sum_of((self, other))

    def minus(self, before: Usage) -> Usage:
        """What was added to ``before`` to make this usage (a request's share of a call's)."""
        counts = {name: getattr(self, name) - getattr(before, name) for name in _COUNTS}
        cost = None if self.cost_usd is None or before.cost_usd is None else self.cost_usd - before.cost_usd
        return Usage(**counts, cost_usd=cost, cost_source=self.cost_source, cost_note=self.cost_note)


_COUNTS = ("calls", "prompt_tokens", "completion_tokens", "attempts", "cached")


def _merge(seen: dict[str, None], text: str | None, sep: str) -> None:
    """Add each ``sep``-separated part of ``text`` to the ordered set ``seen`` (sums name each once)."""
    if text:
        seen.update(dict.fromkeys(text.split(sep)))


@dataclass
class CallStats:
    """What one logical call cost so far, kept up to date while it runs.

    :func:`moot.models.call_model` and :func:`moot.structured.ask` update it as
    requests go out and answers come back, so a caller that is cancelled midway
    (a deadline, a sibling's failure) still knows what was spent.
    """

    usage: Usage = field(default_factory=Usage)
    """Answers received (calls, tokens) and requests sent (attempts)."""
    queue_s: float = 0.0
    """Seconds spent waiting for the model's concurrency gate (not model time)."""
    raw: str | None = None
    """The text of the last answer received (set by :func:`moot.structured.ask`), so a call
    cut short while repairing an invalid answer still keeps what the model said."""
    error: str | None = None
    """Why that last answer was rejected, if it was."""
    announced: Announced | None = None
    """The rate limits the last answer's headers announced (:func:`note_rate_limits`)."""


_CURRENT_STATS: ContextVar[CallStats | None] = ContextVar("moot_call_stats", default=None)


def note_extra_request() -> None:
    """Count one more request sent within the current ``Model.request`` call.

    :func:`moot.models.call_model` counts one attempt per ``request()``; a backend
    that sends a second HTTP request inside one call (a structured-mode probe)
    calls this so ``usage.attempts`` still matches the server's log.
    """
    stats = _CURRENT_STATS.get()
    if stats is not None:
        stats.usage.attempts += 1


_UNIT: ContextVar[str | None] = ContextVar("moot_request_unit", default=None)


@contextmanager
def unit_scope(unit: str | None) -> Iterator[None]:
    """Requests made inside the block belong to the batch unit ``unit`` (an ABSA sentence's id).

    A request's metadata says who asks (a speaker, a round); in a batch the same speaker asks
    once per unit, so a model answering from a record (:class:`moot.models.testing.ReplayModel`)
    reads :func:`current_unit` to give each unit its own recorded replies. Nothing is sent on.
    """
    token = _UNIT.set(unit)
    try:
        yield
    finally:
        _UNIT.reset(token)


def current_unit() -> str | None:
    """The batch unit of the requests made now (see :func:`unit_scope`), or None outside a batch."""
    return _UNIT.get()


def note_not_sent() -> None:
    """Say that the request the current ``Model.request`` call was about to send was never sent.

    :func:`moot.models.call_model` counts an attempt before the backend runs; a request
    cancelled while it waited for a slot of its endpoint (``--model-concurrency``, a replica's
    limit) or for its connection to open sent nothing, so this takes that attempt back:
    ``usage.attempts`` counts what the server's log shows.
    """
    stats = _CURRENT_STATS.get()
    if stats is not None:
        stats.usage.attempts -= 1


def note_rate_limits(headers: Any) -> None:
    """Hand the rate limits in an answer's headers to the endpoint's pacer.

    For backends whose gate :func:`moot.models.call_model` holds (an SDK's client: Anthropic's
    ``anthropic-ratelimit-*``, OpenAI's ``x-ratelimit-*``); the ``openai:`` aiohttp stack reads
    them itself. ``headers``: a case-insensitive mapping (httpx's), or None.
    """
    stats = _CURRENT_STATS.get()
    if stats is not None and headers is not None:
        stats.announced = announced_limits(headers)


def note_cached_reply() -> None:
    """Say that the current ``Model.request`` call was answered from a response cache.

    :func:`moot.models.call_model` counts one attempt per ``request()``; a cached reply sent
    no request, so this takes that attempt back and the server's log still matches.
    """
    stats = _CURRENT_STATS.get()
    if stats is not None:
        stats.usage.attempts -= 1


class ModelRequest(BaseModel):
    """Everything a backend needs for one call."""

    messages: list[Message]
    """The conversation, system message first."""
    json_schema: dict[str, Any] | None = None
    """If set, the reply must be one JSON object matching this schema."""
    schema_name: str = "output"
    """A short name for the schema (OpenAI's json_schema.name)."""
    max_tokens: int | None = None
    """Cap on generated tokens."""
    temperature: float | None = None
    """Sampling temperature; None keeps the backend's default."""
    seed: int | None = None
    """Sampling seed, where the backend supports one."""
    n: int = Field(1, ge=1)
    """Completions wanted from this one call (sampling K answers to one prompt, as a vote does).
    Send ``n > 1`` only to a model whose ``supports_n`` is True; the reply's ``samples`` hold them."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Who is asking: ``speaker``, ``round``, ``phase``, ``attempt``. Test doubles route on it."""


class Sample(BaseModel):
    """One of the completions of an ``n > 1`` request."""

    text: str
    """The generated text."""
    finish_reason: str | None = None
    """``stop``, ``length`` or backend specific."""


class ModelResponse(BaseModel):
    """A backend's reply."""

    text: str
    """The generated text (JSON text for structured calls)."""
    usage: Usage = Field(default_factory=lambda: Usage(calls=1))
    """Reported usage for this call (``calls`` is 1)."""
    model: str = ""
    """The model that answered."""
    finish_reason: str | None = None
    """``stop``, ``length`` (cut at max_tokens) or backend specific."""
    samples: list[Sample] = Field(default_factory=list)
    """Every completion of an ``n > 1`` request, ``samples[0]`` being ``text``; empty when n is 1.
    ``usage`` covers them all (``calls`` counts the HTTP requests it took, one where the server
    samples n at once)."""


class Model(ABC):
    """A chat model: one async method, ``request``.

    Subclasses set ``name`` (the ``provider:model`` spec) and may set
    ``max_concurrency``: a cap on the requests in flight at once for this
    instance, shared by every debate in the process (None: the limit adapts per
    endpoint up to :data:`~moot.models.limits.DEFAULT_CAP`, see :mod:`moot.models.limits`;
    ``adaptive_concurrency = False`` keeps exactly the cap, as the embedded model's 1);
    ``request_timeout``: seconds that bound one whole request (None: unbounded);
    and ``tokens_per_second``: the
    expected generation speed, which sizes default deadlines (None: a remote
    service, fast enough for the protocols' own deadlines). ``supports_n``: the
    model answers a request with ``n > 1`` with that many ``samples`` (one prompt,
    K completions: a vote's samples in one call).
    """

    name: str = "model"
    max_concurrency: int | None = None
    adaptive_concurrency: bool = True
    request_timeout: float | None = None
    tokens_per_second: float | None = None
    supports_n: bool = False
    price: Price | None = None
    """US dollars per million input/output tokens (``?price=IN/OUT``); None: the price table's."""
    context_window: int | None = None
    """Tokens a prompt and its reply may hold (``?context_window=N``); None: ask :meth:`window`."""
    free_cost_source: str | None = None
    """Set on models whose calls cost nothing (``local``, ``test``): the cost source they report."""

    def __init__(self) -> None:
        self._gate: Gate | None = None
        self._gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Gate] = weakref.WeakKeyDictionary()

    @abstractmethod
    async def request(self, request: ModelRequest) -> ModelResponse:
        """Send one request and return the reply.

        Raises:
            ModelError: the backend failed (``retryable`` says whether to retry).
        """

    def gate(self) -> Gate | None:
        """The concurrency gate of the running event loop that :func:`~moot.models.call_model` uses.

        One endpoint named after the model, its limit capped by ``max_concurrency`` (read
        again on every call, so a cap set after construction applies). One gate per event
        loop, as asyncio objects belong to one loop (``run_sync`` uses a fresh loop per call;
        threads each run their own). A backend that routes over endpoints of its own (the
        ``openai:`` aiohttp stack) returns None and gates each endpoint itself.
        """
        loop = asyncio.get_running_loop()
        gates = self.__dict__.get("_gates")  # a subclass may not call super().__init__()
        if gates is None:
            gates = self._gates = weakref.WeakKeyDictionary()
        gate = gates.get(loop)
        if gate is None:
            url = self.endpoint_url()
            window = min(10.0, self.request_timeout or 10.0)

            def build() -> Gate:
                name = redact.url(url) if url is not None else self.name
                cap = effective_cap(self)
                return Gate([Endpoint(name, cap, adaptive=self.adaptive_concurrency, window=window)])

            gate = gates[loop] = shared_gate([url], build) if url is not None else build()
        self._gate = gate  # the latest, for endpoint_stats()
        limit = gate.endpoints[0].limit
        want = effective_cap(self)
        if (want if want is not None else DEFAULT_CAP) != limit.cap:
            limit.set_cap(want)
        return gate

    def endpoint_url(self) -> str | None:
        """The endpoint this model sends to; None (the default): a gate of its own, named after it.

        Every model object sending to one endpoint shares its concurrency gate
        (:func:`~moot.models.limits.shared_gate`).
        """
        return None

    def _live_gate(self) -> Gate | None:
        """The gate whose endpoints this model's requests go to: the latest built (None before any)."""
        return getattr(self, "_gate", None)  # a subclass may not call super().__init__()

    def pause_left(self) -> float:
        """Seconds until an endpoint of this model takes requests again after a Retry-After (0: now)."""
        gate = self._live_gate()
        return gate.pause_left() if gate is not None else 0.0

    def paced(self) -> bool:
        """True while this model's endpoints send on a rate schedule (a rate limit measured or announced)."""
        gate = self._live_gate()
        return gate.paced() if gate is not None else False

    def endpoint_stats(self) -> list[dict[str, object]]:
        """Per endpoint: requests in flight, current limit and its range, 429s, time-outs, circuit.

        Empty before the first request. Progress displays and run records read it.
        """
        gate = self._live_gate()
        return gate.snapshot() if gate is not None else []

    async def expected_speed(self) -> float | None:
        """Tokens per second this model is expected to generate, or None for a remote service.

        Sizes default deadlines (:mod:`moot.deadline`). The default returns
        ``tokens_per_second``; the local backend measures itself when it loads.
        """
        return self.tokens_per_second

    async def aclose(self) -> None:
        """Release resources bound to the running event loop (HTTP connection pools).

        ``Debate.run_sync`` calls it before its event loop closes; the model stays usable.
        """
        return None

    def count_tokens(self, text: str) -> int | None:
        """Count tokens of ``text`` with the model's tokenizer, or None if unknown."""
        return None

    def pricing(self) -> Pricing:
        """How this model's calls are priced (:func:`moot.models.pricing.pricing_of`)."""
        from .pricing import pricing_of

        return pricing_of(self)

    def known_window(self) -> int | None:
        """The context window in tokens when it is known without asking a server, else None.

        ``context_window`` (``?context_window=N``) if set, else what the backend holds (the
        embedded model's ``n_ctx``: subclasses override), else the price table's field.
        """
        if self.context_window is not None:
            return self.context_window
        from .pricing import table_window

        return table_window(self)

    async def window(self) -> int | None:
        """The context window in tokens, asking the server if it must (vLLM's ``max_model_len``).

        The default is :meth:`known_window`; a backend whose server lists its window overrides it.
        """
        return self.known_window()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


def endpoint_stats(models: Iterable[Model]) -> list[dict[str, object]]:
    """The endpoints of ``models`` (:meth:`Model.endpoint_stats`), each once (models may share one).

    What a run records in its summary (``endpoints``) and a progress line shows: requests in
    flight, the limit now and its range, requests sent, 429/503 answers and time-outs, counted
    since the endpoint's first request in this event loop.
    """
    seen: dict[object, dict[str, object]] = {}
    for model in models:
        for stats in model.endpoint_stats():
            seen.setdefault(stats["endpoint"], stats)
    return list(seen.values())


def public_endpoint(model: Model) -> str | None:
    """The endpoint ``model`` sends to, as every record, event, span and line shows it; None if none.

    Its user-info and credential query parameters are masked (:func:`moot.redact.url`): this is
    the one place the endpoint leaves a backend for what a run writes, so a key in the URL
    (``?api_key=K``) is gone before any event carries it (``model_request``, a run's ``models``).
    """
    endpoint = getattr(model, "base_url", None)
    return redact.url(endpoint) if isinstance(endpoint, str) and endpoint else None


def model_info(model: Model) -> dict[str, Any]:
    """A model's spec and endpoint (:func:`public_endpoint`), as a run records it (never its key)."""
    info: dict[str, Any] = {"spec": model.name}
    endpoint = public_endpoint(model)
    if endpoint is not None:
        info["endpoint"] = endpoint
    return info
