"""Shared plumbing for backends built on a provider SDK's async client."""

from __future__ import annotations

import asyncio
import importlib
import weakref
from typing import Any, ClassVar

from .base import Model, default_request_timeout

__all__ = ["SDKModel"]


class SDKModel(Model):
    """A Model whose SDK client is created lazily, one per event loop.

    Connection pools belong to the loop that opened them, and ``run_sync`` uses a
    fresh loop per call, so a client is never shared across loops. A caller-given
    ``http_client`` is passed to every client and never closed by moot.
    """

    sdk_client: ClassVar[tuple[str, str]]
    """(module, class) of the SDK's async client, e.g. ``("openai", "AsyncOpenAI")``."""

    default_base_url: ClassVar[str]
    """The SDK's own endpoint, when ``base_url`` is None."""

    _api_key: str
    base_url: str | None

    def __init__(self, *, http_client: Any, timeout: float | None, max_concurrency: int | None) -> None:
        super().__init__()
        self.max_concurrency = max_concurrency
        self.timeout = timeout if timeout is not None else default_request_timeout()
        self.request_timeout = self.timeout
        self._http_client = http_client
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()

    def endpoint_url(self) -> str:
        """The endpoint: ``base_url``, else the SDK's own.

        Every model object sending there shares its concurrency gate, whichever HTTP stack it uses.
        """
        return (self.base_url or self.default_base_url).rstrip("/")

    def _new_client(self) -> Any:
        """Create the SDK client (called inside the running loop, SDK imported lazily).

        moot retries itself (with Retry-After and a shared gate), so the SDK's retries are off.
        """
        module, cls = self.sdk_client
        return getattr(importlib.import_module(module), cls)(
            api_key=self._api_key,
            base_url=self.base_url,
            max_retries=0,
            timeout=self.timeout,
            http_client=self._http_client or self._own_http_client(),
        )

    def _own_http_client(self) -> Any:
        """An HTTP client moot creates for the SDK client (None: the SDK's default).

        Called inside the running loop; the SDK client owns (and closes) what this returns.
        """
        return None

    def _client(self) -> Any:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = self._clients[loop] = self._new_client()
        return client

    async def aclose(self) -> None:
        """Close the client of the running event loop (a given ``http_client`` stays open)."""
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None and self._http_client is None:
            await client.close()
