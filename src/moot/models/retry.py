"""Retries with backoff and the per-model concurrency gate."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable

from pydantic import BaseModel, ConfigDict, Field

from ..errors import ModelConnectionError, ModelError, ModelHTTPError, ModelTimeoutError
from .base import _CURRENT_STATS, CallStats, Model, ModelRequest, ModelResponse

__all__ = ["RetryPolicy", "call_model"]


class RetryPolicy(BaseModel):
    """How transient backend errors (429, 5xx, dropped connections) are retried.

    The wait before retry ``n`` (0-based) is ``Retry-After`` when the server
    sent one (capped at ``max_delay``), otherwise a uniformly random delay in
    ``[0, min(max_delay, base_delay * 2**n)]`` ("full jitter", which spreads
    out the retries of many concurrent debates hitting one rate limit).
    """

    model_config = ConfigDict(extra="forbid")

    max_retries: int = Field(3, ge=0)
    """Retries after the first attempt."""
    base_delay: float = Field(0.5, ge=0)
    """Seconds; the backoff doubles from here."""
    max_delay: float = Field(30.0, ge=0)
    """Upper bound on any single wait, Retry-After included."""

    def delay(self, attempt: int, error: ModelError, rng: random.Random | None = None) -> float:
        """Seconds to wait before retry number ``attempt`` (0-based) after ``error``."""
        if isinstance(error, ModelHTTPError) and error.retry_after is not None:
            return min(max(error.retry_after, 0.0), self.max_delay)
        cap = min(self.max_delay, self.base_delay * (2**attempt))
        return (rng or random).uniform(0, cap)


async def call_model(
    model: Model,
    request: ModelRequest,
    policy: RetryPolicy | None = None,
    *,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    on_retry: Callable[[int, ModelError, float], None] | None = None,
    stats: CallStats | None = None,
) -> ModelResponse:
    """Call ``model`` through its concurrency gate, retrying transient errors.

    Each attempt is bounded as a whole by ``model.request_timeout`` (connecting,
    waiting and reading the body together, so a server that drips one byte a second
    cannot hold a call for minutes); an attempt that runs out raises
    :class:`~moot.errors.ModelTimeoutError`, which is retried like a dropped connection.

    Args:
        model: the backend.
        request: the request.
        policy: retry policy (default: RetryPolicy()).
        sleep: the sleep function (tests pass a recorder).
        on_retry: called as ``on_retry(attempt, error, delay)`` before each wait.
        stats: updated as the call runs: ``usage.attempts`` +1 per request sent, the
            answer's usage added, time spent waiting for the gate in ``queue_s``.

    Raises:
        ModelError: the last error once retries are exhausted, or at once if
            the error is not retryable.
    """
    policy = policy or RetryPolicy()
    stats = stats if stats is not None else CallStats()
    attempt = 0
    while True:
        try:
            waited = time.perf_counter()
            # The gate is held only while the request is in flight, not while backing off.
            async with model.limiter():
                stats.queue_s += time.perf_counter() - waited
                response = await _attempt(model, request, stats)
            stats.usage = stats.usage + response.usage
            return response
        except ModelError as err:
            if not err.retryable or attempt >= policy.max_retries:
                raise
            wait = policy.delay(attempt, err)
            if on_retry is not None:
                on_retry(attempt, err, wait)
            await sleep(wait)
            attempt += 1


async def _attempt(model: Model, request: ModelRequest, stats: CallStats) -> ModelResponse:
    """One request, counted in ``stats`` and bounded by the model's request timeout."""
    stats.usage.attempts += 1
    token = _CURRENT_STATS.set(stats)  # lets a backend count the extra requests it sends
    limit = model.request_timeout
    try:
        async with asyncio.timeout(limit) as scope:
            return await model.request(request)
    except TimeoutError as err:
        if limit is not None and scope.expired():
            raise ModelTimeoutError(limit, model=model.name) from err
        raise
    except ModelConnectionError as err:
        if not err.sent:  # refused or unreachable: the server never saw it, its log will not either
            stats.usage.attempts -= 1
        raise
    finally:
        _CURRENT_STATS.reset(token)
