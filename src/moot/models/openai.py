"""OpenAI-compatible chat backend: OpenAI itself, vLLM, Ollama, llama.cpp's server.

Spec: ``openai:MODEL`` (e.g. ``openai:gpt-4o-mini``). The endpoint and key come
from ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` or the constructor, or from the spec's
options: ``openai:MODEL?base_url=URL&api_key_env=VAR`` reads the key from ``$VAR``, so
one debate can route personas to different servers.

Servers disagree on how to ask for schema-constrained JSON, so each instance
has a *structured mode* (``json_schema``, ``json_object`` or ``prompt``; see
:mod:`moot.models.structured_mode`), fixed by ``structured_mode=`` or
``MOOT_OPENAI_STRUCTURED_MODE``. When neither is given the instance starts at
``json_schema`` and moves down only on a response that proves the server does
not support the mode; transient errors are retried in the same mode and leave
no trace.

HTTP stacks (``http=`` or ``MOOT_OPENAI_HTTP``; ``docs/http.md``):

================  ==========================================================================
``aiohttp``       the default: one aiohttp session per event loop (:mod:`moot.models.transport`)
                  + orjson; proxies from ``HTTP(S)_PROXY`` / ``NO_PROXY``, redirects,
                  ``SSL_CERT_FILE``, Happy Eyeballs, a bound on the decoded body
                  (``lean``, its name before, is taken as ``aiohttp``)
``sdk``           the ``openai`` SDK over its default HTTP stack, for what only the SDK does
                  (Azure auth, organisation and project headers, a custom ``http_client``);
                  needs ``pip install 'moot[openai]'``
``sdk-aiohttp``   the SDK over its aiohttp stack (``DefaultAioHttpClient``; ``moot[aiohttp]``)
================  ==========================================================================

Both speak the same wire format and share everything above the socket: the
request body, the structured-mode rule, usage, ``finish_reason``, error
statuses mapped to :class:`~moot.errors.ModelHTTPError` with ``Retry-After``
(:func:`http_error`), failures to connect mapped to
:class:`~moot.errors.ModelConnectionError`, time-outs to
:class:`~moot.errors.ModelTimeoutError`, unreadable bodies to
:class:`~moot.errors.ModelResponseError`. The SDK path uses the SDK's generic
``client.post("/chat/completions", body=..., cast_to=ChatCompletion)`` rather
than ``chat.completions.create``, whose recursive TypedDict transform of the
parameters costs about 1 ms per call on 2 cores and changes nothing for the
plain JSON moot sends.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import urllib.request
from collections.abc import Awaitable, Iterable, Mapping
from typing import Any, ClassVar, Literal, cast, get_args

import orjson

from ..errors import (
    ContextLengthExceeded,
    MissingCredentialsError,
    MissingDependencyError,
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelResponseError,
    ModelTimeoutError,
    UsageError,
    context_window_in,
    never_sent,
    redact,
)
from ..redact import text as redact_text
from ..redact import url as redact_url
from ._grammar import check_model_name
from ._sdk import SDKModel
from .base import (
    ModelRequest,
    ModelResponse,
    Sample,
    Usage,
    check_allow_model_requests,
    effective_cap,
    note_rate_limits,
    spec_cap,
    split_spec_options,
)
from .limits import Gate
from .pricing import COST_OPTIONS, apply_cost_options
from .replicas import ReplicaPool, split_endpoints
from .sampling import NSampler
from .structured_mode import ModeSelector, StructuredMode, response_format
from .transport import (
    RawResponse,
    ResponseTooLarge,
    Transport,
    TransportError,
    json_headers,
    parse_retry_after,
)

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_OPENAI_MODEL",
    "HttpBackend",
    "OpenAIModel",
    "StructuredMode",
    "map_openai_error",
    "parse_retry_after",
]

logger = logging.getLogger(__name__)

HttpBackend = Literal["aiohttp", "sdk", "sdk-aiohttp"]
"""The HTTP stack of an instance; see the module docstring."""

DEFAULT_BASE_URL = "https://api.openai.com/v1"
"""OpenAI's own endpoint; the only one that requires a real key."""
DEFAULT_OPENAI_MODEL = "gpt-4o-mini"
"""Model used for a bare ``openai`` / ``openai:`` spec."""
_PLACEHOLDER_KEY = "not-needed"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MAX_BODY = 2000


def _status_body(err: Any) -> str:
    """The error response's body as text, for ModelHTTPError.body."""
    try:
        text = str(err.response.text)
    except Exception:  # noqa: BLE001 - a streamed or unread body; fall back to the parsed one
        body = getattr(err, "body", None)
        text = json.dumps(body) if body is not None else str(err)
    return text


def http_error(
    status: int,
    body: str,
    headers: Mapping[str, str] | None,
    model: str,
    secrets: Iterable[str | None] = (),
) -> ModelHTTPError:
    """The ModelHTTPError for an error status, whichever HTTP stack received it.

    Args:
        status: the HTTP status.
        body: the response body as text (redacted, then truncated, here).
        headers: the response headers (``Retry-After``).
        model: the model spec, recorded on the error.
        secrets: the configured key(s); they and any credential header a server echoes
            become ``***`` (:func:`moot.errors.redact`) before the body is stored.
    """
    # Redacted before truncation: a key cut in two by the truncation would no longer match.
    text = redact(body, secrets)[:_MAX_BODY]
    too_long, window = context_window_in(status, text)
    if too_long:  # its own kind: not retried as it is (a debate retries with a shorter history)
        return ContextLengthExceeded(status, text, model=model, window=window)
    return ModelHTTPError(status, text, model=model, retry_after=parse_retry_after(headers))


def map_openai_error(err: Exception, model: str, secrets: Iterable[str | None] = ()) -> ModelError:
    """Translate an exception from the ``openai`` SDK into moot's error tree.

    Args:
        err: the SDK exception.
        model: the model spec, recorded on the error.
        secrets: the configured key(s), removed from every text the error carries.
    """
    import openai

    if isinstance(err, openai.APIStatusError):
        headers = getattr(err.response, "headers", None)
        return http_error(err.status_code, _status_body(err), headers, model, secrets)
    if isinstance(err, openai.APIConnectionError):  # APITimeoutError is a subclass
        return ModelConnectionError(redact(f"{model}: {err}", secrets), model=model, sent=not never_sent(err))
    if isinstance(err, json.JSONDecodeError | openai.APIResponseValidationError):
        # A 200 whose body was cut short or mangled (a proxy, a crashed worker): transient.
        return ModelResponseError(redact(f"{model}: unreadable response body: {err}", secrets), model=model)
    return ModelError(redact(f"{model}: {type(err).__name__}: {err}", secrets), model=model)


class OpenAIModel(SDKModel):
    """A model behind an OpenAI-compatible ``/chat/completions`` endpoint.

    The default HTTP stack is aiohttp (module docstring): one session of
    keep-alive connections per event loop. With ``http="sdk"`` one
    ``openai.AsyncOpenAI`` client is created per event loop instead (pools are
    bound to the loop that opened them, and ``run_sync`` uses a fresh loop per
    call), unless ``http_client`` is given. Neither stack retries by itself:
    :func:`moot.models.call_model` retries, honouring ``Retry-After``.

    Args:
        model: the model name sent to the server.
        base_url: endpoint; default ``$OPENAI_BASE_URL`` or OpenAI's. A comma-separated
            list (or a list) names replicas of one model, routed by :mod:`moot.models.replicas`
            (aiohttp stack only).
        api_key: key; default ``$OPENAI_API_KEY``. Required only for OpenAI's
            own endpoint; other endpoints get a placeholder.
        structured_mode: ``json_schema``, ``json_object`` or ``prompt``; default
            ``$MOOT_OPENAI_STRUCTURED_MODE``, else ``json_schema``, lowered on proof.
        http_client: an ``httpx.AsyncClient`` / ``httpx2.AsyncClient`` for the SDK
            (implies ``http="sdk"``); moot never closes it.
        http: ``aiohttp`` (default), ``sdk`` or ``sdk-aiohttp``; default
            ``$MOOT_OPENAI_HTTP``, else ``aiohttp``.
        max_concurrency: cap of each endpoint's adaptive concurrency limit (None: the limit
            adapts up to :data:`~moot.models.limits.DEFAULT_CAP`; :mod:`moot.models.limits`).
        timeout: seconds one whole request may take; default ``$MOOT_REQUEST_TIMEOUT``, else 60
            (:data:`~moot.models.base.DEFAULT_REQUEST_TIMEOUT`).
        max_per_endpoint: the same cap, per endpoint (the smaller of the two applies).

    Raises:
        MissingDependencyError: the SDK path is asked for and the ``openai`` package
            (or, for ``sdk-aiohttp``, the SDK's aiohttp support) is not installed.
        MissingCredentialsError: OpenAI's endpoint and no key.
        UsageError: an unknown structured mode or HTTP stack, or ``http_client``
            with the aiohttp stack.
    """

    sdk_client = ("openai", "AsyncOpenAI")
    default_base_url = DEFAULT_BASE_URL
    supports_n = True

    def __init__(
        self,
        model: str = DEFAULT_OPENAI_MODEL,
        *,
        base_url: str | list[str] | None = None,
        api_key: str | None = None,
        structured_mode: StructuredMode | None = None,
        http_client: Any = None,
        http: HttpBackend | None = None,
        max_concurrency: int | None = None,
        timeout: float | None = None,
        max_per_endpoint: int | None = None,
    ) -> None:
        super().__init__(http_client=http_client, timeout=timeout, max_concurrency=max_concurrency)
        self.model = model or DEFAULT_OPENAI_MODEL
        self.name = f"openai:{self.model}"
        self.endpoints = split_endpoints(base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL)
        """Every endpoint serving this model (replicas; :mod:`moot.models.replicas`)."""
        self.base_url = self.endpoints[0]
        key = api_key or os.environ.get("OPENAI_API_KEY")
        if not key:
            if DEFAULT_BASE_URL in self.endpoints:
                raise MissingCredentialsError("openai", "OPENAI_API_KEY")
            key = _PLACEHOLDER_KEY  # local servers ignore the key, but the SDK insists on one
        self._api_key = key
        self.modes = ModeSelector(
            structured_mode or os.environ.get("MOOT_OPENAI_STRUCTURED_MODE") or None,
            f"{self.name} at {', '.join(self.endpoints)}",
            # Remembered across processes per endpoint and model (credentials in a URL masked).
            key=f"{redact_url(','.join(self.endpoints))} {self.model}",
        )
        """The endpoint's structured mode; lowered only on proof (:mod:`moot.models.structured_mode`)."""
        self.sampler = NSampler(self.name)
        """Sends ``n > 1`` requests; knows whether the server samples n at once (:mod:`.sampling`)."""
        self.http: HttpBackend = _http_stack(http, http_client)
        """The HTTP stack of this instance; see the module docstring."""
        if len(self.endpoints) > 1 and self.http != "aiohttp":
            raise UsageError(f"several endpoints need the aiohttp HTTP stack, not http={self.http!r}")
        # No key configured: an entry for the endpoint's host in ~/.netrc supplies the credentials.
        self._transport = Transport(json_headers(key), timeout=self.timeout, netrc=key == _PLACEHOLDER_KEY)
        self.pool = ReplicaPool(
            self.endpoints,
            "/chat/completions",
            max_per_replica=max_per_endpoint,
            window=min(10.0, self.timeout),
        )
        """Routes the aiohttp stack's requests over :attr:`endpoints`, one adaptive limit each."""
        self._pool_cap = max_concurrency
        self.pool.set_cap(max_concurrency)
        self._served_window: int | None = None  # max_model_len from /v1/models, once asked (0: none)

    def gate(self) -> Gate | None:
        """None on the aiohttp stack: its pool gates (and times) each endpoint's requests itself."""
        if self.http != "aiohttp":
            return super().gate()
        want = effective_cap(self)
        if want != self._pool_cap:  # a cap set after construction (--model-concurrency)
            self._pool_cap = want
            self.pool.set_cap(want)
        return None

    def _live_gate(self) -> Gate | None:
        """The aiohttp stack's pool gate (its endpoints' limits, pauses and schedules); else the SDK's."""
        return self.pool.gate if self.http == "aiohttp" else super()._live_gate()

    def _own_http_client(self) -> Any:
        """The SDK's aiohttp-backed client for ``http="sdk-aiohttp"``, else the SDK's default."""
        if self.http != "sdk-aiohttp":
            return None
        import openai

        return openai.DefaultAioHttpClient(timeout=self.timeout)

    spec_options: ClassVar[tuple[str, ...]] = (
        "timeout",
        "base_url",
        "endpoints",
        "max_concurrency",
        "max_per_endpoint",
        "api_key_env",
        "structured_mode",
        *COST_OPTIONS,
    )
    """The ``?key=value`` options an ``openai:`` spec accepts (any other is a usage error)."""

    @classmethod
    def from_spec(cls, rest: str) -> OpenAIModel:
        """Build from the part of the spec after ``openai:``: ``MODEL``, replicas and options.

        ``MODEL@URL1,URL2`` names the endpoints (replicas) as ``?endpoints=URL1,URL2`` does.
        Options (:attr:`spec_options`): ``timeout`` (seconds per request), ``base_url`` (or
        ``endpoints``: a comma-separated list of replicas), ``max_concurrency`` (cap of each
        endpoint's adaptive limit), ``max_per_endpoint`` (the same), ``api_key_env`` (the
        variable holding the key), ``structured_mode``, ``price`` (USD per million input/output
        tokens, ``price=0.15/0.60``) and ``context_window`` (tokens), e.g.
        ``openai:llama3?base_url=http://gpu-box:8000/v1&api_key_env=GPU_BOX_KEY`` or
        ``openai:llama3@http://gpu-1:8000/v1,http://gpu-2:8000/v1?max_per_endpoint=32``.
        Every part is read strictly (:mod:`moot.models._grammar`).

        Raises:
            UsageError: a part of the spec moot does not read (an unknown option, a model name
                with a URL or whitespace in it, an endpoint that is not an http(s) URL...), a
                bad timeout, cap or structured mode.
            MissingCredentialsError: ``api_key_env`` names an unset variable.
        """
        name, options = split_spec_options(rest, cls.spec_options)
        name, at, replicas = name.partition("@")
        given = [f"?{k}=" for k in ("base_url", "endpoints") if k in options] + (["@URL"] if at else [])
        if len(given) > 1:
            raise UsageError(f"give the endpoint(s) once: {' or '.join(given)}, not both")
        if at:
            if not name:
                raise UsageError("no model name before '@' (the replica form is openai:MODEL@URL[,URL...])")
            if not replicas:
                raise UsageError(f"no endpoint after 'openai:{name}@' (give openai:MODEL@URL[,URL...])")
            options["endpoints"] = replicas  # checked URL by URL (split_endpoints)
        if "," in options.get("endpoints", "") and "" in options["endpoints"].split(","):
            raise UsageError(f"an empty endpoint in {redact_text(options['endpoints'])!r} (a stray ',')")
        check_model_name("openai", name, replicas=True)
        if "api_key_env" in options and not _ENV_NAME.fullmatch(options["api_key_env"]):
            raise UsageError(f"api_key_env must name an environment variable, got {options['api_key_env']!r}")
        cap = spec_cap(options, "max_per_endpoint")
        api_key = None
        if "api_key_env" in options:
            api_key = os.environ.get(options["api_key_env"])
            if not api_key:
                raise MissingCredentialsError("openai", options["api_key_env"])
        model = cls(
            name or DEFAULT_OPENAI_MODEL,
            base_url=options.get("base_url") or options.get("endpoints"),
            api_key=api_key,
            max_per_endpoint=cap,
            max_concurrency=spec_cap(options, "max_concurrency"),
            # The constructor checks the mode and names the choices.
            structured_mode=cast("StructuredMode | None", options.get("structured_mode")),
            timeout=float(options["timeout"]) if "timeout" in options else None,
        )
        return apply_cost_options(model, options)

    async def window(self) -> int | None:
        """The context window: ``?context_window=N``, else the server's, else the price table's.

        The server's is its ``max_model_len`` (vLLM lists it in ``/v1/models``), asked once per
        instance; None when nobody says.
        """
        if self.context_window is None and self._served_window is None:
            self._served_window = await asyncio.to_thread(self._max_model_len)
        return self.known_window()

    def known_window(self) -> int | None:
        """``?context_window=N``, else the server's ``max_model_len`` once asked, else the price table's."""
        return self.context_window or self._served_window or super().known_window()

    def _max_model_len(self) -> int:
        """This model's ``max_model_len`` in the endpoint's ``/v1/models`` (0: not listed, or no answer).

        One small GET (in a worker thread, 5 s at most), asked once per instance and only when a
        prompt could need the window (:mod:`moot.history`).
        """
        if self.base_url == DEFAULT_BASE_URL:
            return 0  # OpenAI's own list has no window: the price table's serves
        url = f"{(self.base_url or DEFAULT_BASE_URL).rstrip('/')}/models"
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {self._api_key}"})
        try:
            with urllib.request.urlopen(request, timeout=5.0) as answer:  # noqa: S310 - the user's endpoint
                data = json.loads(answer.read())
            for entry in data.get("data") or []:
                if isinstance(entry, dict) and entry.get("id") == self.model:
                    value = entry.get("max_model_len")
                    return value if isinstance(value, int) and value > 0 else 0
        except (OSError, ValueError, AttributeError) as err:  # no /v1/models: the window stays unknown
            logger.info("%s: no window from %s: %s", self.name, redact(url, (self._api_key,)), err)
        return 0

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Send one chat completion.

        Raises:
            ModelRequestsBlocked: real requests are disabled.
            ModelHTTPError: the server answered with an error status.
            ModelConnectionError: the server could not be reached or timed out.
            ModelError: anything else the SDK raised, or an empty answer.
        """
        check_allow_model_requests()
        if request.n > 1:
            return await self.sampler.sample(request, self._send_structured)
        if request.json_schema is None:  # a plain request has no structured mode to choose
            return await self._send(request, None)
        return await self.modes.send(request, self._send)

    def _send_structured(self, request: ModelRequest) -> Awaitable[ModelResponse]:
        if request.json_schema is None:
            return self._send(request, None)
        return self.modes.send(request, self._send)

    @property
    def structured_mode(self) -> StructuredMode:
        """The mode of the next structured request."""
        return self.modes.mode

    @property
    def mode_fixed(self) -> bool:
        """True when the structured mode was set explicitly (no downgrade)."""
        return self.modes.fixed

    def _body(self, request: ModelRequest, mode: StructuredMode | None) -> dict[str, Any]:
        """The JSON body of one ``/chat/completions`` request."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": m.role, "content": m.content} for m in request.messages],
        }
        if request.max_tokens is not None:
            body["max_tokens"] = request.max_tokens
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.seed is not None:
            body["seed"] = request.seed
        if request.n > 1:
            body["n"] = request.n
        if request.json_schema is not None and mode is not None:
            fmt = response_format(mode, request.json_schema, request.schema_name)
            if fmt is not None:
                body["response_format"] = fmt
        return body

    async def _send(self, request: ModelRequest, mode: StructuredMode | None) -> ModelResponse:
        body = self._body(request, mode)
        if self.http != "aiohttp":
            return await self._send_sdk(body)
        # POST over aiohttp; no response at all becomes a ModelConnectionError.
        try:
            payload = orjson.dumps(body)
            # What a token-per-minute limit counts (OpenAI's rule of thumb): the messages at about
            # 4 characters a token, and max_tokens.
            chars = sum(len(m.content) for m in request.messages)
            tokens = chars / 4 + (request.max_tokens or 0) * max(1, request.n)
            raw = await self.pool.post(self._transport, payload, tokens)
        except ResponseTooLarge as err:  # the same request would get the same body: not retried
            raise ModelError(redact(f"{self.name}: {err}", (self._api_key,)), model=self.name) from err
        except TransportError as err:
            if err.timeout and not err.connect:
                raise ModelTimeoutError(self.timeout, model=self.name) from err
            message = redact(f"{self.name}: {err}", (self._api_key,))
            raise ModelConnectionError(message, model=self.name, sent=not err.connect) from err
        return self._decode(raw)

    def _decode(self, raw: RawResponse) -> ModelResponse:
        """Decode an aiohttp-stack response, reading only the fields moot uses."""
        if raw.status >= 400:
            body = raw.body.decode("utf-8", "replace")
            raise http_error(raw.status, body, raw.headers, self.name, (self._api_key,))
        try:
            data = orjson.loads(raw.body)
            choices = data["choices"]
            if not choices:
                raise ModelResponseError(f"{self.name}: the server returned no choices", model=self.name)
            choice = choices[0]
            text = choice["message"].get("content") or ""
            # Every choice of an n > 1 request (a vote's samples); one choice needs no list.
            samples = [_sample(c.get("message") or {}, c.get("finish_reason")) for c in choices[1:]]
            usage_data = data.get("usage") or {}
            usage = Usage(
                calls=1,
                prompt_tokens=usage_data.get("prompt_tokens") or 0,
                completion_tokens=usage_data.get("completion_tokens") or 0,
            )
        except (orjson.JSONDecodeError, LookupError, TypeError, AttributeError) as err:
            # A 200 whose body was cut short or mangled (a proxy, a crashed worker): transient.
            snippet = redact(raw.body.decode("utf-8", "replace"), (self._api_key,))[:300]
            raise ModelResponseError(
                f"{self.name}: unreadable response body: {snippet!r}", model=self.name
            ) from err
        return ModelResponse(
            text=text,
            usage=usage,
            model=f"openai:{data.get('model') or self.model}",
            finish_reason=choice.get("finish_reason"),
            samples=[Sample(text=text, finish_reason=choice.get("finish_reason")), *samples]
            if samples
            else [],
        )

    async def _send_sdk(self, body: dict[str, Any]) -> ModelResponse:
        from openai.types.chat import ChatCompletion

        try:
            # The SDK's generic route: the same request, errors and response model as
            # chat.completions.create, without its per-call parameter transform (module docstring).
            completion = await self._client().post("/chat/completions", body=body, cast_to=ChatCompletion)
        except Exception as err:  # noqa: BLE001 - every SDK failure becomes a ModelError
            # A refusal's headers announce the limits too (an answer's are not read on this route).
            note_rate_limits(getattr(getattr(err, "response", None), "headers", None))
            raise map_openai_error(err, self.name, (self._api_key,)) from err
        if not completion.choices:
            raise ModelResponseError(f"{self.name}: the server returned no choices", model=self.name)
        try:
            # The SDK builds its response model without validation: a wrong shape shows up here.
            choice = completion.choices[0]
            text = choice.message.content or ""
            samples = [
                Sample(text=c.message.content or "", finish_reason=c.finish_reason)
                for c in completion.choices
            ]
            usage = Usage(calls=1)
            if completion.usage is not None:
                usage = Usage(
                    calls=1,
                    prompt_tokens=completion.usage.prompt_tokens or 0,
                    completion_tokens=completion.usage.completion_tokens or 0,
                )
        except (AttributeError, LookupError, TypeError) as err:
            message = f"{self.name}: unreadable response body: {type(err).__name__}: {err}"
            raise ModelResponseError(message, model=self.name) from err
        return ModelResponse(
            text=text,
            usage=usage,
            model=f"openai:{completion.model or self.model}",
            finish_reason=choice.finish_reason,
            samples=samples if len(samples) > 1 else [],
        )

    async def aclose(self) -> None:
        """Close the running loop's connections (the SDK client's, the aiohttp session's)."""
        await super().aclose()
        await self._transport.aclose()


def _sample(message: Mapping[str, Any], finish_reason: str | None) -> Sample:
    return Sample(text=message.get("content") or "", finish_reason=finish_reason)


def _http_stack(http: str | None, http_client: Any) -> HttpBackend:
    """The HTTP stack asked for, checked: the SDK path needs the SDK (and its aiohttp extra)."""
    if http_client is not None and http not in (None, "sdk"):
        raise UsageError("http_client= is the SDK's HTTP client: use it with http='sdk' (or no http=)")
    stack = "sdk" if http_client is not None else (http or os.environ.get("MOOT_OPENAI_HTTP") or "aiohttp")
    if stack == "lean":  # the default stack's name while it was moot's own client
        stack = "aiohttp"
    if stack not in get_args(HttpBackend):
        choices = ", ".join(get_args(HttpBackend))
        raise UsageError(f"unknown HTTP stack {stack!r}; choose one of {choices}")
    if stack != "aiohttp":
        try:
            import openai
        except ImportError as err:
            raise MissingDependencyError(
                "the openai SDK", "openai", f"needed for http={stack!r}; the default http=aiohttp needs none"
            ) from err
        if stack == "sdk-aiohttp" and not hasattr(openai, "DefaultAioHttpClient"):
            raise MissingDependencyError(
                "a newer openai", "aiohttp", f"openai {openai.__version__} has no DefaultAioHttpClient"
            )
    return stack  # type: ignore[return-value]
