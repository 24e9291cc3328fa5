"""Several endpoints serving one model: one adaptive limit each, routing to room, backoff on refusal.

A model can be served by several replicas (several vLLM or llama.cpp servers
started with the same weights). ``OPENAI_BASE_URL`` (or ``base_url=``, or the
spec option ``base_url``/``endpoints``) may then hold a comma-separated list, and
every request goes through a :class:`ReplicaPool`. A single endpoint is a pool of one.

* **Limits.** Each endpoint has its own adaptive concurrency limit, Retry-After pause
  and circuit breaker (:mod:`moot.models.limits`); ``max_per_replica`` (and the
  model's ``max_concurrency``) cap each endpoint's limit.
* **Routing.** A request goes to the endpoint with the most room (fewest in flight
  for its limit) among those that are up; ties go round-robin, so a light load
  spreads evenly too. A request that finds no endpoint with room waits for the
  first: a request finishing, a pause ending.
* **Failures.** A replica that refuses a connection (or lets a connection attempt
  time out, or drops a connection without answering) is taken out for a backoff
  period (1 s, doubling on each consecutive failure up to 30 s) and the request
  is sent at once to another replica. Each request tries each replica at most
  once; a replica in its backoff is tried only when no live replica is left, so
  a request fails only after every replica failed it. A success resets the
  replica's backoff. Time-outs and HTTP error statuses are answers, not
  refusals: they are raised as they are (the caller's retry policy decides), and
  429/503 pause that endpoint (``Retry-After``) while the others take the traffic.
  An endpoint whose circuit opened (it answered nothing for a while) gets nothing
  until its probe; when every endpoint's circuit is open, requests fail at once
  with :class:`~moot.errors.EndpointDown`.

A re-send after a dropped connection is a request the dead server may have
logged, so it is counted as an extra attempt (:func:`~moot.models.base.note_extra_request`);
a re-send after a refused connection is not (nothing reached that server).
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import moot.redact as redact

from ..errors import UsageError
from ._grammar import check_endpoint
from .base import _CURRENT_STATS, note_extra_request, note_not_sent
from .limits import DEFAULT_CAP, Announced, Endpoint, Gate, Outcome, Ticket, announced_limits, shared_gate
from .transport import RawResponse, ResponseTooLarge, Transport, TransportError, parse_retry_after

__all__ = ["Replica", "ReplicaPool", "split_endpoints"]


def split_endpoints(value: str | Sequence[str]) -> list[str]:
    """``"http://a/v1, http://b/v1/"`` (or a list) -> ``["http://a/v1", "http://b/v1"]``.

    A query (``.../v1?api-version=X``) stays with its endpoint; requests keep it after the path.
    Each endpoint is checked (:func:`moot.models._grammar.check_endpoint`) before anything is sent.

    Spaces around the commas and an empty entry (``$OPENAI_BASE_URL`` ending in ``,``) are
    dropped; a spec's own list is read more strictly (:meth:`~moot.models.openai.OpenAIModel.from_spec`).

    Raises:
        UsageError: no endpoint at all, the same endpoint twice, or one that is not an
            ``http(s)`` URL with a host (a user name and password in one, ``http://user:pass@host``,
            included: the key goes in a bearer header, which the HTTP client cannot combine
            with credentials in the URL).
    """
    parts = value.split(",") if isinstance(value, str) else list(value)
    urls = [_strip_slash(check_endpoint(p.strip())) for p in parts if p.strip()]
    if not urls:
        raise UsageError("no endpoint given (an empty base URL list)")
    dupes = sorted({redact.url(u) for u in urls if urls.count(u) > 1})
    if dupes:
        raise UsageError(f"endpoint listed twice: {', '.join(dupes)}")
    return urls


def _strip_slash(url: str) -> str:
    base, sep, query = url.partition("?")
    return base.rstrip("/") + sep + query


def join_path(base_url: str, path: str) -> str:
    """``"http://h/v1?api-version=1"`` + ``"/chat/completions"`` -> ``"http://h/v1/chat/completions?api-version=1"``."""
    base, sep, query = base_url.partition("?")
    return base.rstrip("/") + path + sep + query


@dataclass(eq=False)
class Replica:
    """One endpoint of a pool and its live state."""

    base_url: str
    """The endpoint, e.g. ``http://gpu-1:8000/v1``."""
    url: str
    """The ``/chat/completions`` URL."""
    endpoint: Endpoint
    """Its adaptive limit, pause and circuit breaker (of the event loop that used it last)."""
    failures: int = 0
    """Consecutive refusals; sets the backoff."""
    down_until: float = 0.0
    """Monotonic time before which the replica is out of rotation."""

    @property
    def in_flight(self) -> int:
        """Requests sent and not yet answered."""
        return self.endpoint.in_flight

    @property
    def sent(self) -> int:
        """Requests sent so far (answered or not)."""
        return self.endpoint.sent_total


class ReplicaPool:
    """Routes requests over replicas; see the module docstring.

    Args:
        base_urls: the endpoints (``.../v1``).
        path: appended to each endpoint, e.g. ``/chat/completions``.
        max_per_replica: cap of each endpoint's limit (None: :data:`~moot.models.limits.DEFAULT_CAP`).
        backoff: seconds a replica stays out after its first refusal.
        max_backoff: upper bound of the doubling backoff.
        window: seconds without an answer that (with failed requests) open an endpoint's circuit.
        clock: monotonic clock (tests pass a fake one).
    """

    def __init__(
        self,
        base_urls: Sequence[str],
        path: str,
        *,
        max_per_replica: int | None = None,
        backoff: float = 1.0,
        max_backoff: float = 30.0,
        window: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_per_replica is not None and max_per_replica < 1:
            raise UsageError(f"max_per_replica must be at least 1, got {max_per_replica}")
        self._window = window
        self._clock = clock
        self.replicas = [
            Replica(u, join_path(u, path), self._endpoint(u, max_per_replica)) for u in base_urls
        ]
        self._cap: int | None = max_per_replica
        self._by_endpoint = {r.endpoint: r for r in self.replicas}
        self.gate = Gate([r.endpoint for r in self.replicas])
        """The gate of the event loop that sent the last request (each loop has its own)."""
        self._gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Gate] = weakref.WeakKeyDictionary()
        # The loop of the last request and its gate: the lookup above, once per loop.
        self._last: tuple[weakref.ref[asyncio.AbstractEventLoop], Gate] | None = None
        self.max_per_replica = max_per_replica
        self.backoff = backoff
        self.max_backoff = max_backoff

    def _endpoint(self, base_url: str, cap: int | None) -> Endpoint:
        return Endpoint(redact.url(base_url), cap, window=self._window, clock=self._clock)

    def _loop_gate(self) -> Gate:
        """The running loop's gate (asyncio objects belong to one loop; threads each run their own)."""
        loop = asyncio.get_running_loop()
        last = self._last
        if last is not None and last[0]() is loop and last[1] is self.gate:
            if self.replicas[0].endpoint is self.gate.endpoints[0]:
                return self.gate  # the same loop as the last request's: nothing to look up
        gate = self._gates.get(loop)
        if gate is None:

            def build() -> Gate:
                if not self._gates and not any(r.endpoint.sent_total for r in self.replicas):
                    return self.gate  # the first loop takes the gate built with the pool
                return Gate([self._endpoint(r.base_url, self._cap) for r in self.replicas])

            # Every pool (model object) sending to these endpoints in this loop shares one gate.
            gate = self._gates[loop] = shared_gate([r.base_url for r in self.replicas], build)
            self._by_endpoint.update({ep: r for ep, r in zip(gate.endpoints, self.replicas, strict=True)})
            if self._cap is not None:  # a gate another pool built: this pool's cap applies too
                for ep in gate.endpoints:
                    if ep.limit.cap > self._cap:
                        ep.limit.set_cap(self._cap)
        if gate is not self.gate or self.replicas[0].endpoint is not gate.endpoints[0]:
            self.gate = gate
            for ep, r in zip(gate.endpoints, self.replicas, strict=True):
                r.endpoint = ep
        self._last = (weakref.ref(loop), gate)
        return gate

    def set_cap(self, cap: int | None) -> None:
        """Cap every endpoint's limit at ``cap`` (and ``max_per_replica``; None: no cap of its own)."""
        caps = [c for c in (cap, self.max_per_replica) if c is not None]
        want = self._cap = min(caps) if caps else None
        for gate in [self.gate, *self._gates.values()]:
            for ep in gate.endpoints:
                if ep.limit.cap != (want if want is not None else DEFAULT_CAP):
                    ep.limit.set_cap(want)

    def _mark_down(self, replica: Replica) -> None:
        delay = min(self.backoff * (2**replica.failures), self.max_backoff)
        replica.failures += 1
        replica.down_until = self._clock() + delay

    def _exclude(self, tried: set[Endpoint]) -> set[Endpoint]:
        """``tried``, plus the replicas in their refusal backoff unless no other is left."""
        if len(self.replicas) == 1:  # its only replica is never left out for a backoff
            return tried
        now = self._clock()
        resting = {r.endpoint for r in self.replicas if r.down_until > now and r.endpoint not in tried}
        if resting and len(tried) + len(resting) < len(self.replicas):
            return tried | resting
        return tried

    async def _take(self, gate: Gate, exclude: set[Endpoint], tokens: float) -> Ticket:
        """Wait for a ticket of an endpoint not in ``exclude`` (the time waited counts as queueing)."""
        waited = time.perf_counter()
        ticket = await gate.acquire(exclude, tokens)
        stats = _CURRENT_STATS.get()
        if stats is not None:
            stats.queue_s += time.perf_counter() - waited
        return ticket

    async def post(self, transport: Transport, body: bytes, tokens: float = 0.0) -> RawResponse:
        """POST ``body`` to the endpoint with room, moving on to another when one refuses or drops.

        ``tokens``: about how many tokens the request asks for (prompt and ``max_tokens``),
        counted against a token rate the server announces.

        Raises:
            TransportError: every replica refused or dropped this request (``connect``
                is True when none of them received it), or a replica timed out.
            ResponseTooLarge: a replica answered with a body past the transport's bound
                (an answer, not a refusal: not sent elsewhere).
            EndpointDown: every endpoint's circuit is open.
        """
        gate = self._loop_gate()
        tried: set[Endpoint] = set()
        reached = False  # some replica received this request
        resend_counts = False  # the previous attempt reached a server that may have logged it
        last: TransportError | None = None
        while True:
            if len(tried) == len(self.replicas):
                assert last is not None
                n = len(self.replicas)
                raise TransportError(f"all {n} endpoint(s) failed; last: {last}", connect=not reached)
            exclude = self._exclude(tried)
            # Room at once (the usual case) needs no coroutine of its own.
            ticket = gate.try_acquire(exclude, tokens)
            if ticket is None:
                try:
                    ticket = await self._take(gate, exclude, tokens)
                except asyncio.CancelledError:
                    if not resend_counts:  # the attempt counted for this request: nothing was sent
                        note_not_sent()
                    raise
            replica = self._by_endpoint[ticket.endpoint]
            if resend_counts:
                note_extra_request()
            tried.add(ticket.endpoint)
            outcome, retry_after = Outcome.CANCELLED, None
            announced: Announced | None = None
            try:
                raw = await transport.post(replica.url, body)
                announced = announced_limits(raw.headers)
                if raw.status in (429, 503):
                    outcome, retry_after = Outcome.THROTTLE, parse_retry_after(raw.headers)
                else:
                    outcome = Outcome.ERROR if raw.status >= 400 else Outcome.ANSWER
            except ResponseTooLarge:
                outcome = Outcome.ERROR  # it answered: alive, and another replica would answer the same
                raise
            except TransportError as err:
                if err.timeout and not err.connect:
                    outcome = Outcome.TIMEOUT
                    raise  # slow, not dead: the caller's retry policy decides
                outcome = Outcome.UNREACHABLE
                self._mark_down(replica)
                resend_counts = not err.connect
                reached = reached or resend_counts
                last = err
                continue
            finally:
                gate.release(ticket, outcome, retry_after, announced)
            replica.failures = 0
            return raw

    def stats(self) -> list[dict[str, object]]:
        """Per replica: ``url``, ``sent``, ``in_flight``, ``down`` and the endpoint's limit counters."""
        now = self._clock()
        return [
            {"url": r.base_url, "sent": r.sent, "in_flight": r.in_flight, "down": r.down_until > now}
            | r.endpoint.snapshot()
            for r in self.replicas
        ]
