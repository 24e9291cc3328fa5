"""Retries with backoff, rate limits waited out, and the per-endpoint concurrency gate.

Transient errors (5xx other than 503, dropped connections, time-outs, unreadable
bodies) are retried ``max_retries`` times with full-jitter backoff. A rate limit
(429, or 503 "overloaded") is not a failure while time remains: the refused request
waits the server's ``Retry-After`` (a longer one pauses the whole endpoint; on an
endpoint paced by :mod:`moot.models.limits`, one of a second or less gives way to the
schedule's next slot) and is sent again, for as long as ``throttle_budget`` seconds
allow (and the caller's own deadline, which cancels the wait). Only then does it fail,
with :class:`~moot.errors.RateLimited` naming how long it tried.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from ..errors import (
    EndpointDown,
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelTimeoutError,
    RateLimited,
)
from .base import _CURRENT_STATS, CallStats, Model, ModelRequest, ModelResponse
from .limits import Gate, Outcome, throttle_wait_s
from .pricing import price_usage

if TYPE_CHECKING:  # moot.deadline sits above the models (it sizes a protocol's deadline)
    from ..deadline import Deadline

__all__ = ["DEFAULT_THROTTLE_BUDGET", "RetryPolicy", "call_model", "is_throttle"]

DEFAULT_THROTTLE_BUDGET = 300.0
"""Seconds one call keeps retrying 429/503 answers before it fails (:class:`RetryPolicy`)."""


def is_throttle(error: BaseException) -> bool:
    """Whether ``error`` is a rate limit or an overloaded server (HTTP 429 or 503)."""
    return isinstance(error, ModelHTTPError) and error.status_code in (429, 503)


class RetryPolicy(BaseModel):
    """How transient backend errors (429, 5xx, dropped connections) are retried.

    The wait before retry ``n`` (0-based) of an error that is not a rate limit is
    ``Retry-After`` when the server sent one (capped at ``max_delay``), otherwise a
    uniformly random delay in ``[0, min(max_delay, base_delay * 2**n)]`` ("full
    jitter", which spreads out the retries of many concurrent debates). Rate limits
    (429/503) do not count against ``max_retries``: the request waits for the
    endpoint's pause and is sent again until ``throttle_budget`` seconds have passed.
    """

    model_config = ConfigDict(extra="forbid")

    max_retries: int = Field(3, ge=0)
    """Retries after the first attempt (rate limits not counted)."""
    base_delay: float = Field(0.5, ge=0)
    """Seconds; the backoff doubles from here."""
    max_delay: float = Field(30.0, ge=0)
    """Upper bound on any single wait of the backoff, Retry-After included."""
    throttle_budget: float = Field(DEFAULT_THROTTLE_BUDGET, ge=0)
    """Seconds one call keeps retrying 429/503 answers before it fails with RateLimited."""

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
    deadline: Deadline | None = None,
) -> ModelResponse:
    """Call ``model`` through its concurrency gate, retrying transient errors and waiting out rate limits.

    Each attempt is bounded as a whole by ``model.request_timeout`` (connecting,
    waiting and reading the body together, so a server that drips one byte a second
    cannot hold a call for minutes); an attempt that runs out raises
    :class:`~moot.errors.ModelTimeoutError`, which is retried like a dropped connection.
    Time spent waiting for the gate is not part of it. A model that gates its own
    endpoints (``model.gate()`` is None, the ``openai:`` aiohttp stack) bounds each of
    its requests itself.

    Args:
        model: the backend.
        request: the request.
        policy: retry policy (default: RetryPolicy()).
        sleep: the sleep function (tests pass a recorder).
        on_retry: called as ``on_retry(attempt, error, delay)`` before each wait.
        stats: updated as the call runs: ``usage.attempts`` +1 per request sent, the
            answer's usage added, time spent waiting for the gate in ``queue_s``.
        deadline: the caller's deadline (:class:`~moot.deadline.Deadline`): a rate limit whose
            pause would end after it fails the call at once, with the reason, instead of
            leaving the caller to be cancelled mid-wait.

    Raises:
        RateLimited: still 429/503 after ``policy.throttle_budget`` seconds, or when the
            deadline leaves no time for the next try.
        EndpointDown: the endpoint's circuit is open (it answered nothing for a while).
        ModelError: the last error once retries are exhausted, or at once if
            the error is not retryable.
    """
    policy = policy or RetryPolicy()
    stats = stats if stats is not None else CallStats()
    gate = model.gate()
    started = time.monotonic()
    attempt = 0
    retries = 0
    while True:
        try:
            if gate is None:
                response = await _attempt(model, request, stats, None)
            else:
                response = await _gated(model, gate, request, stats)
            priced = price_usage(model, response.usage)
            if priced is not response.usage:
                response = response.model_copy(update={"usage": priced})
            stats.usage = stats.usage + priced
            return response
        except ModelError as err:
            if is_throttle(err):
                # Waiting out a rate limit is not a failure while the budget lasts. The refused
                # request waits its own Retry-After; the endpoint's pacer spaces everyone else.
                own = err.retry_after if isinstance(err, ModelHTTPError) else None
                paced, left = model.paced(), model.pause_left()
                wait = round(
                    throttle_wait_s(own, paced=paced, pause_left_s=left, max_delay_s=policy.max_delay), 3
                )
                spent = time.monotonic() - started
                if spent + wait > policy.throttle_budget:
                    raise RateLimited(spent, err, model=model.name) from err
                if deadline is not None and deadline.remaining_s() <= wait:
                    raise RateLimited(
                        spent, err, model=model.name, deadline_left=deadline.remaining_s()
                    ) from err
            elif not err.retryable or attempt >= policy.max_retries:
                raise
            else:
                wait = policy.delay(attempt, err)
                attempt += 1
            if on_retry is not None:
                on_retry(retries, err, wait)
            retries += 1
            if wait > 0:
                await sleep(wait)


async def _gated(model: Model, gate: Gate, request: ModelRequest, stats: CallStats) -> ModelResponse:
    """One attempt holding a ticket of the model's gate, its outcome reported back to the gate."""
    ticket = gate.try_acquire()
    if ticket is None:
        waited = time.perf_counter()
        ticket = await gate.acquire()
        stats.queue_s += time.perf_counter() - waited
    outcome, retry_after = Outcome.CANCELLED, None
    stats.announced = None
    try:
        response = await _attempt(model, request, stats, model.request_timeout)
        # A reply from a response cache says nothing about the endpoint's latency.
        outcome = Outcome.CANCELLED if response.usage.cached else Outcome.ANSWER
        return response
    except ModelError as err:
        outcome, retry_after = _outcome(err)
        raise
    finally:
        gate.release(ticket, outcome, retry_after, stats.announced)


def _outcome(err: ModelError) -> tuple[Outcome, float | None]:
    if is_throttle(err):
        assert isinstance(err, ModelHTTPError)
        return Outcome.THROTTLE, err.retry_after
    if isinstance(err, ModelTimeoutError):
        return Outcome.TIMEOUT, None
    if isinstance(err, ModelConnectionError):
        return Outcome.UNREACHABLE, None
    return Outcome.ERROR, None


async def _attempt(
    model: Model, request: ModelRequest, stats: CallStats, limit: float | None
) -> ModelResponse:
    """One request, counted in ``stats`` and bounded by ``limit`` seconds (None: by the model itself)."""
    stats.usage.attempts += 1
    token = _CURRENT_STATS.set(stats)  # lets a backend count the extra requests it sends
    try:
        if limit is None:  # the model bounds its requests itself: no timer of our own
            return await model.request(request)
        async with asyncio.timeout(limit) as scope:
            return await model.request(request)
    except TimeoutError as err:
        if limit is not None and scope.expired():
            raise ModelTimeoutError(limit, model=model.name) from err
        raise
    except EndpointDown:  # refused by the gate before anything was sent
        stats.usage.attempts -= 1
        raise
    except ModelConnectionError as err:
        if not err.sent:  # refused or unreachable: the server never saw it, its log will not either
            stats.usage.attempts -= 1
        raise
    finally:
        _CURRENT_STATS.reset(token)
