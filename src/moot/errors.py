"""The exceptions moot raises, all under one root.

Usage errors mean the caller asked for something that cannot work (fix the
input and try again); run-time errors happen while a debate runs and carry
structured fields so callers can react without parsing messages::

    MootError
    ├── UsageError                     the caller's mistake; the CLI exits with code 2
    │   ├── ConfigError                bad protocol/config data (.key names the offending key)
    │   ├── UnknownProviderError       a model spec names no known provider
    │   ├── MissingDependencyError     an optional extra is not installed (.extra)
    │   ├── MissingCredentialsError    an API key is missing (.env_var)
    │   └── ModelRequestsBlocked       a real model was called while requests are disabled
    └── RunError                       something failed while running
        ├── ResourceError              disk full or permission lost after work started (.path); exit 1
        ├── ModelError                 the backend failed (.model)
        │   ├── ModelHTTPError         HTTP error status (.status_code, .body, .retry_after)
        │   │   └── ContextLengthExceeded  the prompt is longer than the model's window (.window)
        │   ├── ModelResponseError     a 200 whose body cannot be read (not JSON, no choices)
        │   ├── ReplayMissingError     a replayed run never recorded the reply asked for (.request)
        │   ├── EndpointDown           an endpoint answered nothing for a while: circuit open (.endpoint)
        │   ├── RateLimited            still 429/503 when the retry time ran out (.seconds)
        │   └── ModelConnectionError   endpoint unreachable / connection dropped
        │       └── ModelTimeoutError  one request exceeded its time limit (.seconds)
        ├── OutputValidationError      output still invalid after the repair request (.raw, .errors)
        ├── BudgetExceeded             a call, token or US-dollar budget ran out (.kind, .limit, .used)
        └── DebateTimeout              the overall timeout elapsed (.seconds)
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = [
    "BudgetExceeded",
    "ConfigError",
    "ContextLengthExceeded",
    "DebateTimeout",
    "EndpointDown",
    "MissingCredentialsError",
    "MissingDependencyError",
    "ModelConnectionError",
    "ModelError",
    "ModelHTTPError",
    "ModelRequestsBlocked",
    "ModelResponseError",
    "ModelTimeoutError",
    "MootError",
    "OutputValidationError",
    "ReplayMissingError",
    "RateLimited",
    "ResourceError",
    "RunError",
    "UnknownProviderError",
    "UsageError",
    "context_window_in",
    "error_text",
    "never_sent",
    "redact",
]

REDACTED = "***"

#: Exception class names (httpx, httpx2, aiohttp) that mean a connection was never made,
#: so no request reached the server; SDKs wrap them in their own connection errors.
_NEVER_CONNECTED = frozenset({"ConnectError", "ConnectTimeout", "ClientConnectorError"})


def error_text(kind: str | BaseException | None, message: str | None = None) -> str:
    """``"Kind: message"`` with the kind named once: ``error_text(exc)`` or ``error_text(kind, text)``.

    A message that already starts with its kind (``ModelConnectionError: ...``, ``cancelled: ...``)
    is returned as is, so no error reads ``ModelConnectionError: ModelConnectionError: ...``.
    """
    if isinstance(kind, BaseException):
        kind, message = type(kind).__name__, str(kind) if message is None else message
    text = (message or "").strip()
    if not kind or text == kind or text.startswith(f"{kind}:"):
        return text or (kind or "")
    return f"{kind}: {text}" if text else kind


def never_sent(err: BaseException) -> bool:
    """Whether ``err`` (or what it wraps) says the connection was never made."""
    seen: BaseException | None = err
    for _ in range(8):  # exception chains are short; the bound guards against a cycle
        if seen is None:
            return False
        if type(seen).__name__ in _NEVER_CONNECTED:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


#: A credential header or field and its value, as servers echo them: ``Authorization: Bearer X``,
#: ``"api-key": "X"``, ``x-api-key=X``. The value ends at whitespace, a quote, a comma or a brace.
_CREDENTIAL = re.compile(
    r"(?i)\b((?:proxy-)?authorization|x-api-key|api[-_]?key)(\\?[\"']?\s*[:=]\s*\\?[\"']?)"
    r"((?:bearer|basic|token)\s+)?([^\s\"'\\,;}\]]+)"
)


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with credentials replaced by ``***``.

    Replaced: every value of an ``Authorization``, ``x-api-key`` or ``api-key`` header or
    field, and every occurrence of ``secrets``. Backends run every server error body
    through this before it is stored in an error, a turn, an event or a file: a server
    (or proxy) that echoes the request headers must not put the key into results.

    Args:
        text: the text to clean.
        secrets: the configured keys (empty or very short values are ignored).
    """
    for secret in secrets:
        if secret and len(secret) >= 6:
            text = text.replace(secret, REDACTED)
    return _CREDENTIAL.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3) or ''}{REDACTED}", text)


class MootError(Exception):
    """Root of every exception moot raises on purpose."""


class UsageError(MootError):
    """The caller asked for something that cannot work; fixing the input fixes it."""


class ConfigError(UsageError):
    """Invalid protocol or pipeline configuration.

    Attributes:
        key: dotted path of the offending key, when one key is to blame.
    """

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class UnknownProviderError(UsageError):
    """A model spec such as ``foo:bar`` names a provider moot does not know."""

    def __init__(self, provider: str, known: list[str]) -> None:
        super().__init__(f"unknown model provider {provider!r}; known providers: {', '.join(sorted(known))}")
        self.provider = provider
        self.known = known


class MissingDependencyError(UsageError):
    """An optional dependency is missing; ``extra`` names the pip extra that installs it."""

    def __init__(self, package: str, extra: str, hint: str = "") -> None:
        msg = f"{package} is not installed: pip install 'moot[{extra}]'"
        super().__init__(msg + (f" ({hint})" if hint else ""))
        self.package = package
        self.extra = extra


class MissingCredentialsError(UsageError):
    """A provider needs an API key that is not set."""

    def __init__(self, provider: str, env_var: str) -> None:
        super().__init__(f"no API key for {provider}: set {env_var} (or pass api_key=...)")
        self.provider = provider
        self.env_var = env_var


class ModelRequestsBlocked(UsageError):
    """A real model was called while ``moot.models.ALLOW_MODEL_REQUESTS`` is False (unit tests)."""


class RunError(MootError):
    """Something failed while a debate was running."""


class ResourceError(RunError):
    """A file could not be written after the work started (disk full, permission lost).

    What was done before is kept; the message names the file and says how to continue.
    The CLI exits 1 (a partial result was written), not 2.

    Attributes:
        path: the file that could not be written.
    """

    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(message)
        self.path = path


class ModelError(RunError):
    """The model backend failed.

    Attributes:
        model: the model spec that failed, e.g. ``openai:gpt-4o-mini``.
        retryable: whether retrying the same request may succeed.
    """

    def __init__(self, message: str, *, model: str = "", retryable: bool = False) -> None:
        super().__init__(message)
        self.model = model
        self.retryable = retryable


class ModelHTTPError(ModelError):
    """The backend answered with an HTTP error status.

    Attributes:
        status_code: the HTTP status.
        body: the response body (truncated), for diagnosis.
        retry_after: seconds the server asked us to wait, if it said so.
    """

    def __init__(
        self,
        status_code: int,
        body: str = "",
        *,
        model: str = "",
        retry_after: float | None = None,
    ) -> None:
        retryable = status_code == 429 or status_code >= 500
        super().__init__(
            f"HTTP {status_code} from {model or 'model'}: {body[:300]}", model=model, retryable=retryable
        )
        self.status_code = status_code
        self.body = body
        self.retry_after = retry_after


#: How servers word a prompt longer than the window: OpenAI and vLLM ("This model's maximum
#: context length is N tokens"; vLLM also "longer than the maximum model length of N"), llama.cpp's
#: server ("the request exceeds the available context size"), llama-cpp-python ("Requested tokens
#: (N) exceed context window of M"), Anthropic ("prompt is too long"), OpenAI's error code.
_CONTEXT_LENGTH = re.compile(
    r"(?i)maximum context length is (\d+)|maximum model length of (\d+)|exceeds? the available context size"
    r"|exceed context window of (\d+)|context_length_exceeded|prompt is too long|exceed_context_size"
)


def context_window_in(status_code: int | None, body: str) -> tuple[bool, int | None]:
    """Whether an error (status, body) says the prompt passed the window, and the window it names."""
    if status_code not in (None, 400, 413):
        return False, None
    match = _CONTEXT_LENGTH.search(body)
    if match is None:
        return False, None
    number = next((g for g in match.groups() if g), None)
    return True, int(number) if number else None


class ContextLengthExceeded(ModelHTTPError):
    """The prompt and its reply do not fit in the model's context window (a server's 400 saying so).

    Not retryable as it is: the same prompt fails the same way. A debate retries the turn once
    with a shorter history (:mod:`moot.history`).

    Attributes:
        window: the window in tokens the server named, or None.
    """

    def __init__(
        self,
        status_code: int,
        body: str = "",
        *,
        model: str = "",
        retry_after: float | None = None,
        window: int | None = None,
    ) -> None:
        super().__init__(status_code, body, model=model, retry_after=retry_after)
        self.retryable = False
        self.window = window


class ModelConnectionError(ModelError):
    """The endpoint could not be reached or dropped the connection.

    Attributes:
        sent: False when the request provably never reached the server (connection
            refused or unreachable); such an attempt is not counted in ``usage.attempts``.
    """

    def __init__(self, message: str, *, model: str = "", sent: bool = True) -> None:
        super().__init__(message, model=model, retryable=True)
        self.sent = sent


class ModelResponseError(ModelError):
    """The server answered with success, but the body could not be read (not JSON, wrong shape).

    A proxy or server cut off mid-body produces this; retrying usually works.
    """

    def __init__(self, message: str, *, model: str = "") -> None:
        super().__init__(message, model=model, retryable=True)


class ReplayMissingError(ModelError):
    """A replay was asked for a reply its recorded run does not hold; no request is ever sent instead.

    Attributes:
        request: who asked: ``speaker``, ``round`` and ``phase``.
    """

    def __init__(self, message: str, *, request: dict[str, object], model: str = "") -> None:
        super().__init__(message, model=model, retryable=False)
        self.request = request


class EndpointDown(ModelError):
    """An endpoint answered none of its recent requests: moot stopped sending to it for a while.

    Raised at once, for every request waiting for that endpoint, instead of letting each
    one wait out its own timeout (see :mod:`moot.models.limits`). Not retryable: the
    circuit stays open until its probe gets an answer.

    Attributes:
        endpoint: the endpoint's URL (or model spec).
    """

    def __init__(self, message: str, *, endpoint: str = "", model: str = "") -> None:
        super().__init__(message, model=model, retryable=False)
        self.endpoint = endpoint


class RateLimited(ModelError):
    """A request was still answered 429/503 when its retry time ran out.

    Attributes:
        seconds: how long it was retried.
        last: the last rate-limit answer.
    """

    def __init__(
        self, seconds: float, last: ModelError, *, model: str = "", deadline_left: float | None = None
    ) -> None:
        why = (
            f"the deadline left {deadline_left:.1f} s, less than the server's pause"
            if deadline_left is not None
            else f"retried for {seconds:.0f} s"
        )
        super().__init__(
            f"{model or 'model'}: still rate limited ({why}): {last}", model=model, retryable=False
        )
        self.seconds = seconds
        self.last = last


class ModelTimeoutError(ModelConnectionError):
    """One request took longer than its time limit (the whole request, not one read).

    Attributes:
        seconds: the limit that elapsed.
    """

    def __init__(self, seconds: float, *, model: str = "") -> None:
        super().__init__(f"{model or 'model'}: no complete answer within {seconds:g} s", model=model)
        self.seconds = seconds


class OutputValidationError(RunError):
    """The model's output did not match the schema, even after one repair request.

    Attributes:
        raw: the last raw output.
        errors: the validation error text.
    """

    def __init__(self, message: str, *, raw: str = "", errors: str = "") -> None:
        super().__init__(message)
        self.raw = raw
        self.errors = errors


class BudgetExceeded(RunError):
    """A budget (``calls``, ``tokens`` or ``usd``) ran out before the debate finished.

    ``would``: what the refused call could have taken (a reservation refused before it
    started: the budget is a bound, never passed); None when the budget is simply spent.
    """

    def __init__(self, kind: str, limit: float, used: float, *, would: float | None = None) -> None:
        if would is None:
            message = f"{kind} budget exhausted: used {used} of {limit}"
        elif kind == "usd":
            message = (
                f"usd budget: the next call could cost up to ${would:.5f}, and ${used:.5f} of "
                f"${limit:g} is spent or reserved"
            )
        else:
            message = (
                f"{kind} budget: the next call could take up to {would:g} {kind}, and {used:g} of "
                f"{limit:g} are spent or reserved"
            )
        super().__init__(message)
        self.kind = kind
        self.limit = limit
        self.used = used
        self.would = would


class DebateTimeout(RunError):
    """The debate's overall timeout elapsed."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"debate timed out after {seconds:g} s")
        self.seconds = seconds
