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
``json_schema`` once will reject it again), so later requests skip the probe, and
so do later processes: the mode an endpoint settled on is written to
``structured-modes.json`` in moot's cache folder (:func:`moot.paths.cache_dir`),
per endpoint URL and model, for :data:`MEMORY_TTL_S` (7 days). Behind a proxy that
retries the server's 500 (LiteLLM does, three times: ~4.7 s a request), a probe
costs more than a short deadline allows, so a fresh process must not pay it
again. The file is replaced atomically under a lock (concurrent writers keep each
other's entries); an unreadable one counts as empty. A mode set by config
(``structured_mode=``, ``MOOT_OPENAI_STRUCTURED_MODE``) is never replaced by a
remembered one. Deleting the file (or one entry) makes moot probe again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, Literal, get_args

from ..errors import ModelHTTPError, UsageError
from ..paths import cache_dir
from .base import ModelRequest, ModelResponse, note_extra_request

__all__ = [
    "MEMORY_FILE",
    "MEMORY_TTL_S",
    "MODES",
    "ModeMemory",
    "ModeSelector",
    "StructuredMode",
    "proves_unsupported",
    "response_format",
]

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


MEMORY_FILE = "structured-modes.json"
"""The file in :func:`moot.paths.cache_dir` holding each endpoint's remembered mode."""
MEMORY_TTL_S = 7 * 24 * 3600.0
"""Seconds a remembered mode is trusted (a server upgraded since then is probed again)."""


class ModeMemory:
    """The structured modes endpoints settled on, kept across processes (module docstring).

    Entries are keyed ``"<endpoint URL> <model>"`` and hold the mode and when it was learnt.

    Args:
        path: the JSON file; default ``structured-modes.json`` in :func:`moot.paths.cache_dir`.
        ttl_s: seconds an entry is trusted.
        clock: UNIX time (tests pass a fake one).
    """

    def __init__(
        self, path: Path | None = None, ttl_s: float = MEMORY_TTL_S, clock: Callable[[], float] = time.time
    ) -> None:
        self.path = path if path is not None else cache_dir() / MEMORY_FILE
        self.ttl_s = ttl_s
        self.clock = clock

    def _entries(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # missing, unreadable or torn: nothing remembered
            return {}
        return data if isinstance(data, dict) else {}

    def recall(self, key: str) -> StructuredMode | None:
        """The mode remembered for ``key``, or None (never learnt, expired, or unreadable)."""
        entry = self._entries().get(key)
        if not isinstance(entry, dict) or entry.get("mode") not in MODES:
            return None
        if not _fresh(entry, self.clock(), self.ttl_s):
            return None
        mode: StructuredMode = entry["mode"]
        return mode

    def remember(self, key: str, mode: StructuredMode, why: str) -> None:
        """Record that ``key`` settled on ``mode`` (read-modify-write under a lock, replaced atomically).

        A cache folder that cannot be written is logged and skipped: the run goes on; the
        next process probes again.
        """
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with _locked(self.path.with_name(self.path.name + ".lock")):
                entries = self._entries()
                now = self.clock()
                # Expired entries go; the rest (other endpoints, other processes' writes) stay.
                entries = {
                    k: v
                    for k, v in entries.items()
                    if isinstance(v, dict)
                    and isinstance(v.get("at"), int | float)
                    and now - v["at"] <= self.ttl_s
                }
                entries[key] = {"mode": mode, "at": now, "why": why}
                fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name, suffix=".tmp")
                try:
                    with os.fdopen(fd, "w", encoding="utf-8") as out:
                        json.dump(entries, out, indent=1, sort_keys=True)
                    os.replace(tmp, self.path)
                except BaseException:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp)
                    raise
        except OSError as err:
            logger.warning("cannot remember the structured mode of %s in %s: %s", key, self.path, err)


def _fresh(entry: object, now: float, ttl_s: float) -> bool:
    """Whether a stored entry has a time and it is within ``ttl_s`` of ``now``."""
    at = entry.get("at") if isinstance(entry, dict) else None
    return isinstance(at, int | float) and 0 <= now - at <= ttl_s


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    """An exclusive lock between processes (``flock``; where there is none, only the atomic replace)."""
    try:
        import fcntl
    except ImportError:  # Windows: os.replace still keeps the file whole
        yield
        return
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class ModeSelector:
    """The structured mode of one endpoint, and the downgrade-on-proof loop.

    Args:
        mode: a fixed mode (no downgrade ever), or None to start at ``json_schema``
            (or at the mode ``memory`` remembers for ``key``) and downgrade on proof.
        name: the model spec and its endpoint, for log lines.
        key: the endpoint and model, as :class:`ModeMemory` keys them (None: nothing is
            recalled or remembered).
        memory: where modes are remembered across processes (default: the cache folder's).

    Raises:
        UsageError: ``mode`` is not a known mode.
    """

    def __init__(
        self,
        mode: str | None,
        name: str = "model",
        *,
        key: str | None = None,
        memory: ModeMemory | None = None,
    ) -> None:
        if mode is not None and mode not in MODES:
            raise UsageError(f"unknown structured mode {mode!r}; choose one of {', '.join(MODES)}")
        self.fixed = mode is not None
        """True when the mode was set explicitly, which disables downgrades."""
        self.mode: StructuredMode = mode or "json_schema"
        """The mode of the next structured request (lowered only on proof)."""
        self.name = name
        self.key = key
        self.memory = memory if memory is not None or key is None else ModeMemory()
        """Modes remembered across processes (None: this selector keeps its own only)."""
        self.recalled = False
        """True when the mode came from :attr:`memory` (a refusal a previous process saw)."""
        if not self.fixed and self.key is not None and self.memory is not None:
            remembered = self.memory.recall(self.key)
            if remembered is not None and remembered != self.mode:
                self.mode, self.recalled = remembered, True
                logger.info(
                    "%s: structured mode %s, as remembered in %s (delete it to probe again)",
                    self.name,
                    remembered,
                    self.memory.path,
                )

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
                    if self.memory is not None and self.key is not None:
                        why = f"HTTP {err.status_code} to {mode}"
                        # Off the event loop: a file lock another process holds must not stall it.
                        await asyncio.to_thread(self.memory.remember, self.key, lower, why)
