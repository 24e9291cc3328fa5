"""How an OpenAI-compatible server is asked for schema-shaped JSON, independent of the HTTP transport.

Servers disagree on the dialect, so each endpoint has a *structured mode*:

=================  ==========================================================================
``json_schema``    ``response_format={"type": "json_schema", "json_schema": {name, schema}}``
                   (OpenAI, vLLM; the default)
``json_object``    ``response_format={"type": "json_object", "schema": schema}``
                   (llama.cpp's dialect; its servers answer ``json_schema`` with an error)
``prompt``         no ``response_format``; the prompt alone asks for JSON
=================  ==========================================================================

The rule for moving down this list: **only on proof**. A response proves that the
server does not support a mode when it is a 400/422 (or 501) whose body names
``response_format`` or the mode's type, or a 500 whose body does so (llama.cpp's
servers report an unknown ``response_format`` type as HTTP 500). Anything else,
a bare 500, a 502/503, a 429, a dropped connection, a malformed body, is
transient: it is raised unchanged for :func:`moot.models.call_model` to retry in
the *same* mode, and nothing about it is remembered. A soak against a server
failing 30% of requests showed why: when a transient 500 could downgrade the
mode, every later debate ran in prompt mode and 97% of them had failed turns.

A proven downgrade is remembered for the endpoint (a server that rejected
``json_schema`` once will reject it again), so later requests skip the probe.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Literal, get_args

from ..errors import ModelHTTPError, UsageError
from .base import ModelRequest, ModelResponse, note_extra_request

__all__ = ["MODES", "ModeSelector", "StructuredMode", "proves_unsupported", "response_format"]

logger = logging.getLogger(__name__)

StructuredMode = Literal["json_schema", "json_object", "prompt"]
"""How a structured request is sent; see the module docstring."""

MODES: tuple[StructuredMode, ...] = get_args(StructuredMode)
"""Every mode, most precise first: the order of downgrades."""

#: Statuses with which servers reject a request they do not understand.
_CLIENT_REJECTS = frozenset({400, 422, 501})
#: Words in an error body that tie the rejection to the response format.
_FORMAT_WORDS = ("response_format", "json_schema", "json_object", "response format")


def response_format(mode: StructuredMode, schema: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The ``response_format`` field for ``mode``, or None (prompt mode sends none)."""
    if mode == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}
    if mode == "json_object":
        return {"type": "json_object", "schema": schema}
    return None


def proves_unsupported(err: ModelHTTPError) -> bool:
    """Whether ``err`` proves the server rejects the structured mode that was sent.

    True for a 400/422/501 or a 500 whose body names the response format (see the
    module docstring); False for every other error, which is treated as transient.
    """
    if err.status_code not in _CLIENT_REJECTS and err.status_code != 500:
        return False
    body = err.body.lower()
    return any(word in body for word in _FORMAT_WORDS)


class ModeSelector:
    """The structured mode of one endpoint, and the downgrade-on-proof loop.

    Args:
        mode: a fixed mode (no downgrade ever), or None to start at ``json_schema``
            and downgrade on proof.
        name: the model spec and its endpoint, for log lines.

    Raises:
        UsageError: ``mode`` is not a known mode.
    """

    def __init__(self, mode: str | None, name: str = "model") -> None:
        if mode is not None and mode not in MODES:
            raise UsageError(f"unknown structured mode {mode!r}; choose one of {', '.join(MODES)}")
        self.fixed = mode is not None
        """True when the mode was set explicitly, which disables downgrades."""
        self.mode: StructuredMode = mode or "json_schema"
        """The mode of the next structured request (lowered only on proof)."""
        self.name = name

    async def send(
        self,
        request: ModelRequest,
        send: Callable[[ModelRequest, StructuredMode | None], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        """Send ``request`` through ``send(request, mode)``, downgrading the mode on proof only.

        Plain requests (no schema) go out with mode None. Each downgrade costs one
        extra request; a transient error is raised at once, the mode unchanged.

        Raises:
            ModelError: whatever ``send`` raised (after the last possible downgrade).
        """
        if request.json_schema is None:
            return await send(request, None)
        first = True
        while True:
            mode = self.mode
            if not first:
                note_extra_request()  # the probe that failed was a request the server logged
            first = False
            try:
                return await send(request, mode)
            except ModelHTTPError as err:
                index = MODES.index(mode)
                if self.fixed or index + 1 >= len(MODES) or not proves_unsupported(err):
                    raise
                lower = MODES[index + 1]
                # Another request may have downgraded already; never raise the mode back, and
                # say it once: only the request that lowered the mode warns.
                if MODES.index(self.mode) < index + 1:
                    self.mode = lower
                    logger.warning(
                        "%s: the server rejected structured mode %s (HTTP %s); using %s from now on",
                        self.name,
                        mode,
                        err.status_code,
                        self.mode,
                    )
