"""Anthropic Messages API backend (extra ``moot[anthropic]``).

Spec: ``anthropic:MODEL`` (e.g. ``anthropic:claude-haiku-4-5``); the key comes
from ``ANTHROPIC_API_KEY`` or ``api_key=``.

Structured output uses a forced tool call: the schema becomes the tool's
``input_schema``, ``tool_choice`` names that tool, and the tool call's
``input`` is returned as JSON text. That is the way to get schema-shaped
output that works on every Claude model.
"""

from __future__ import annotations

import inspect
import json
import os
import re
from collections.abc import Iterable
from typing import Any, ClassVar

from ..errors import (
    MissingCredentialsError,
    MissingDependencyError,
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelResponseError,
    never_sent,
    redact,
)
from ._grammar import check_model_name
from ._sdk import SDKModel
from .base import (
    Message,
    ModelRequest,
    ModelResponse,
    Usage,
    check_allow_model_requests,
    note_rate_limits,
    spec_cap,
    split_spec_options,
)
from .pricing import COST_OPTIONS, apply_cost_options
from .transport import parse_retry_after

__all__ = ["DEFAULT_ANTHROPIC_MODEL", "DEFAULT_MAX_TOKENS", "AnthropicModel", "map_anthropic_error"]

DEFAULT_ANTHROPIC_MODEL = "claude-haiku-4-5"
"""Model used for a bare ``anthropic`` / ``anthropic:`` spec."""
DEFAULT_MAX_TOKENS = 1024
"""Anthropic requires ``max_tokens``; used when the request leaves it unset."""
_MAX_BODY = 2000


def map_anthropic_error(err: Exception, model: str, secrets: Iterable[str | None] = ()) -> ModelError:
    """Translate an exception from the ``anthropic`` SDK into moot's error tree.

    Args:
        err: the SDK exception.
        model: the model spec, recorded on the error.
        secrets: the configured key(s), removed from every text the error carries.
    """
    import anthropic

    if isinstance(err, anthropic.APIStatusError):
        try:
            body = str(err.response.text)  # redacted before truncation: a cut key would not match
        except Exception:  # noqa: BLE001 - unread body; the parsed one will do
            body = json.dumps(err.body) if err.body is not None else str(err)
        headers = getattr(err.response, "headers", None)
        return ModelHTTPError(
            err.status_code,
            redact(body, secrets)[:_MAX_BODY],
            model=model,
            retry_after=parse_retry_after(headers),
        )
    if isinstance(err, anthropic.APIConnectionError):  # APITimeoutError is a subclass
        return ModelConnectionError(redact(f"{model}: {err}", secrets), model=model, sent=not never_sent(err))
    if isinstance(err, json.JSONDecodeError | anthropic.APIResponseValidationError):
        return ModelResponseError(redact(f"{model}: unreadable response body: {err}", secrets), model=model)
    return ModelError(redact(f"{model}: {type(err).__name__}: {err}", secrets), model=model)


def _tool_name(schema_name: str) -> str:
    # Tool names must match ^[a-zA-Z0-9_-]{1,64}$.
    return re.sub(r"[^A-Za-z0-9_-]", "_", schema_name)[:64] or "output"


def _split_messages(messages: list[Message]) -> tuple[str, list[dict[str, str]]]:
    """System text, and the turns with consecutive same-role messages merged.

    The Messages API takes the system prompt separately and rejects two turns
    in a row from the same role, which a debate transcript can produce.
    """
    system = "\n\n".join(m.content for m in messages if m.role == "system")
    turns: list[dict[str, str]] = []
    for m in messages:
        if m.role == "system":
            continue
        if turns and turns[-1]["role"] == m.role:
            turns[-1]["content"] += "\n\n" + m.content
        else:
            turns.append({"role": m.role, "content": m.content})
    if not turns or turns[0]["role"] != "user":
        # The API wants the conversation to open with a user turn.
        turns.insert(0, {"role": "user", "content": "Begin."})
    return system, turns


class AnthropicModel(SDKModel):
    """A Claude model through ``anthropic.AsyncAnthropic``.

    One client is created per event loop (see :class:`~moot.models.openai.OpenAIModel`)
    unless ``http_client`` is given; SDK retries are off (``max_retries=0``)
    because :func:`moot.models.call_model` retries.

    Args:
        model: the Claude model name.
        api_key: key; default ``$ANTHROPIC_API_KEY``.
        base_url: endpoint; default ``$ANTHROPIC_BASE_URL`` or the SDK's.
        http_client: an ``httpx2.AsyncClient`` (``httpx.AsyncClient`` for
            anthropic < 1) to use, e.g. with a ``MockTransport`` in tests.
        max_concurrency: cap of the adaptive concurrency limit (None: it adapts; :mod:`moot.models.limits`).
        timeout: seconds one whole request may take; default ``$MOOT_REQUEST_TIMEOUT``, else 60
            (:data:`~moot.models.base.DEFAULT_REQUEST_TIMEOUT`).
        send_temperature: send ``request.temperature`` when set. Recent SDKs
            dropped the parameter from their signature, so it goes in the body;
            turn this off for models that reject it.

    Raises:
        MissingDependencyError: the ``anthropic`` package is not installed.
        MissingCredentialsError: no key.
    """

    sdk_client = ("anthropic", "AsyncAnthropic")
    default_base_url = "https://api.anthropic.com"

    def __init__(
        self,
        model: str = DEFAULT_ANTHROPIC_MODEL,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        http_client: Any = None,
        max_concurrency: int | None = None,
        timeout: float | None = None,
        send_temperature: bool = True,
    ) -> None:
        super().__init__(http_client=http_client, timeout=timeout, max_concurrency=max_concurrency)
        try:
            import anthropic  # noqa: F401 - fail at resolve time, not at the first call
        except ImportError as err:
            raise MissingDependencyError("anthropic", "anthropic") from err
        self.model = model or DEFAULT_ANTHROPIC_MODEL
        self.name = f"anthropic:{self.model}"
        key = api_key or os.environ.get("ANTHROPIC_API_KEY")
        if not key:
            raise MissingCredentialsError("anthropic", "ANTHROPIC_API_KEY")
        self._api_key = key
        self.base_url = base_url or os.environ.get("ANTHROPIC_BASE_URL") or None
        self.send_temperature = send_temperature

    spec_options: ClassVar[tuple[str, ...]] = ("timeout", "max_concurrency", *COST_OPTIONS)
    """The ``?key=value`` options an ``anthropic:`` spec accepts (any other is a usage error)."""

    @classmethod
    def from_spec(cls, rest: str) -> AnthropicModel:
        """Build from the part of the spec after ``anthropic:``: ``MODEL?timeout=S&max_concurrency=N``.

        Raises:
            UsageError: a part of the spec moot does not read (an unknown option, a model name
                with a URL, ``@`` or whitespace in it), a bad timeout or cap.
        """
        name, options = split_spec_options(rest, cls.spec_options)
        check_model_name("anthropic", name)
        timeout = float(options["timeout"]) if "timeout" in options else None
        model = cls(name or DEFAULT_ANTHROPIC_MODEL, timeout=timeout, max_concurrency=spec_cap(options))
        return apply_cost_options(model, options)

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Send one Messages API call.

        Raises:
            ModelRequestsBlocked: real requests are disabled.
            ModelHTTPError: the API answered with an error status.
            ModelConnectionError: the API could not be reached or timed out.
            ModelError: anything else the SDK raised.
        """
        check_allow_model_requests()
        system, turns = _split_messages(request.messages)
        kwargs: dict[str, Any] = {
            "model": self.model,
            "max_tokens": request.max_tokens or DEFAULT_MAX_TOKENS,
            "messages": turns,
        }
        if system:
            kwargs["system"] = system
        if request.temperature is not None and self.send_temperature:
            kwargs["extra_body"] = {"temperature": request.temperature}
        tool = None
        if request.json_schema is not None:
            tool = _tool_name(request.schema_name)
            kwargs["tools"] = [
                {
                    "name": tool,
                    "description": f"Record the answer as a {request.schema_name} object.",
                    "input_schema": request.json_schema,
                }
            ]
            kwargs["tool_choice"] = {"type": "tool", "name": tool}
        try:
            # The raw response (the SDK's documented way to its headers): the rate limits it
            # announces pace the endpoint before anything is refused.
            raw = await self._client().messages.with_raw_response.create(**kwargs)
            note_rate_limits(raw.headers)
            parsed = raw.parse()  # a coroutine from anthropic 2 on (its raw responses are async)
            message = await parsed if inspect.isawaitable(parsed) else parsed
        except Exception as err:  # noqa: BLE001 - every SDK failure becomes a ModelError
            note_rate_limits(getattr(getattr(err, "response", None), "headers", None))
            raise map_anthropic_error(err, self.name, (self._api_key,)) from err
        text = ""
        for block in message.content:
            if tool is not None and block.type == "tool_use" and block.name == tool:
                text = json.dumps(block.input, ensure_ascii=False)
                break
        else:
            # No tool call (plain request, or the model ignored tool_choice): use the text.
            text = "".join(block.text for block in message.content if block.type == "text")
        usage = Usage(
            calls=1,
            prompt_tokens=message.usage.input_tokens or 0,
            completion_tokens=message.usage.output_tokens or 0,
        )
        return ModelResponse(
            text=text,
            usage=usage,
            model=f"anthropic:{message.model or self.model}",
            finish_reason=_FINISH.get(message.stop_reason or "", message.stop_reason),
        )


#: Anthropic stop reasons in OpenAI's vocabulary, which ModelResponse.finish_reason uses.
_FINISH: dict[str, str | None] = {"end_turn": "stop", "tool_use": "stop", "max_tokens": "length"}
