"""Several endpoints serving one model: least-in-flight routing, per-replica caps, backoff on refusal.

A model can be served by several replicas (several vLLM or llama.cpp servers
started with the same weights). ``OPENAI_BASE_URL`` (or ``base_url=``, or the
spec option ``base_url``/``endpoints``) may then hold a comma-separated list, and
every request goes through a :class:`ReplicaPool`:

* **Routing.** A request goes to the replica with the fewest requests in flight
  among those that are up and under their cap; ties go round-robin, so a light
  load spreads evenly too.
* **Caps.** ``max_per_replica`` bounds the requests in flight at each replica (a
  server that batches 32 sequences is best fed 32 at a time); a request that
  finds every live replica at its cap waits for the first free slot.
* **Failures.** A replica that refuses a connection (or lets a connection attempt
  time out, or drops a connection without answering) is taken out for a backoff
  period (1 s, doubling on each consecutive failure up to 30 s) and the request
  is sent at once to another replica. Each request tries each replica at most
  once; a replica in its backoff is tried only when no live replica is left, so
  a request fails only after every replica failed it. A success resets the
  replica's backoff. Time-outs and HTTP error statuses are answers, not
  refusals: they are raised as they are (the caller's retry policy decides).

A re-send after a dropped connection is a request the dead server may have
logged, so it is counted as an extra attempt (:func:`~moot.models.base.note_extra_request`);
a re-send after a refused connection is not (nothing reached that server).
"""

from __future__ import annotations

import asyncio
import re
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import moot.redact as redact

from ..errors import UsageError
from ._http import LeanTransport, RawResponse, TransportError
from .base import note_extra_request

__all__ = ["Replica", "ReplicaPool", "split_endpoints"]


def split_endpoints(value: str | Sequence[str]) -> list[str]:
    """``"http://a/v1, http://b/v1/"`` (or a list) -> ``["http://a/v1", "http://b/v1"]``.

    A query (``.../v1?api-version=X``) stays with its endpoint; requests keep it after the path.

    Raises:
        UsageError: no endpoint at all, the same endpoint twice, or a user name and password in
            one (``http://user:pass@host``): the key goes in a bearer header, which the HTTP
            client cannot combine with credentials in the URL.
    """
    parts = value.split(",") if isinstance(value, str) else list(value)
    urls = [_strip_slash(p.strip()) for p in parts if p.strip()]
    if not urls:
        raise UsageError("no endpoint given (an empty base URL list)")
    dupes = sorted({redact.url(u) for u in urls if urls.count(u) > 1})
    if dupes:
        raise UsageError(f"endpoint listed twice: {', '.join(dupes)}")
    for url in urls:
        if _USERINFO.match(url):
            raise UsageError(
                f"endpoint {redact.url(url)} holds a user name and password: moot sends the API key as a "
                "bearer token (OPENAI_API_KEY, or api_key_env=VAR in the spec); drop them from the URL"
            )
    return urls


_USERINFO = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*@")


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
    index: int
    """Position in the pool (round-robin tie-break)."""
    in_flight: int = 0
    """Requests sent and not yet answered."""
    sent: int = 0
    """Requests sent so far (answered or not)."""
    failures: int = 0
    """Consecutive refusals; sets the backoff."""
    down_until: float = 0.0
    """Monotonic time before which the replica is out of rotation."""


class ReplicaPool:
    """Routes requests over replicas; see the module docstring.

    Args:
        base_urls: the endpoints (``.../v1``).
        path: appended to each endpoint, e.g. ``/chat/completions``.
        max_per_replica: requests in flight at once per replica (None: no cap).
        backoff: seconds a replica stays out after its first refusal.
        max_backoff: upper bound of the doubling backoff.
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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_per_replica is not None and max_per_replica < 1:
            raise UsageError(f"max_per_replica must be at least 1, got {max_per_replica}")
        self.replicas = [Replica(u, join_path(u, path), i) for i, u in enumerate(base_urls)]
        self.max_per_replica = max_per_replica
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._clock = clock
        self._turn = 0
        # A Condition binds to one loop; run_sync uses a fresh loop per call.
        self._freed: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Condition] = (
            weakref.WeakKeyDictionary()
        )

    def _condition(self) -> asyncio.Condition:
        loop = asyncio.get_running_loop()
        cond = self._freed.get(loop)
        if cond is None:
            cond = self._freed[loop] = asyncio.Condition()
        return cond

    def _pick(self, tried: set[Replica]) -> Replica | None | Literal[True]:
        """The replica for the next attempt; True when live replicas exist but all are at their cap."""
        now = self._clock()
        live = [r for r in self.replicas if r not in tried and r.down_until <= now]
        if live:
            cap = self.max_per_replica
            free = [r for r in live if cap is None or r.in_flight < cap]
            if not free:
                return True
            # Least in flight; ties broken by a rotating start so equal loads alternate.
            n = len(self.replicas)
            self._turn = (self._turn + 1) % n
            return min(free, key=lambda r: (r.in_flight, (r.index - self._turn) % n))
        resting = [r for r in self.replicas if r not in tried]
        # Every untried replica is in its backoff: probe the one that comes back first.
        if not resting:
            return None
        return min(resting, key=lambda r: r.down_until)

    def _take(self, tried: set[Replica]) -> Replica | None | Literal[True]:
        """:meth:`_pick`, counting the picked replica's request (no await: the common path)."""
        picked = self._pick(tried)
        if isinstance(picked, Replica):
            picked.in_flight += 1
            picked.sent += 1
        return picked

    async def _wait_for_slot(self, tried: set[Replica]) -> Replica | None:
        """Wait until a live replica is under its cap, then take it."""
        while True:
            cond = self._condition()
            async with cond:
                # Re-check under the lock: a slot may have freed since the caller looked.
                if self._pick(tried) is True:
                    await cond.wait()
            picked = self._take(tried)
            if picked is not True:
                return picked

    async def _release(self, replica: Replica) -> None:
        replica.in_flight -= 1
        cond = self._condition()
        async with cond:
            cond.notify(1)

    def _mark_down(self, replica: Replica) -> None:
        delay = min(self.backoff * (2**replica.failures), self.max_backoff)
        replica.failures += 1
        replica.down_until = self._clock() + delay

    async def post(self, transport: LeanTransport, body: bytes) -> RawResponse:
        """POST ``body`` to the best replica, moving on to another when one refuses or drops.

        Raises:
            TransportError: every replica refused or dropped this request (``connect``
                is True when none of them received it), or a replica timed out.
        """
        tried: set[Replica] = set()
        reached = False  # some replica received this request
        resend_counts = False  # the previous attempt reached a server that may have logged it
        last: TransportError | None = None
        while True:
            replica = self._take(tried)
            if replica is True:
                replica = await self._wait_for_slot(tried)
            if replica is None:
                assert last is not None
                n = len(self.replicas)
                raise TransportError(f"all {n} endpoint(s) failed; last: {last}", connect=not reached)
            if resend_counts:
                note_extra_request()
            tried.add(replica)
            try:
                raw = await transport.post(replica.url, body)
            except TransportError as err:
                if err.timeout and not err.connect:
                    raise  # slow, not dead: the caller's retry policy decides
                self._mark_down(replica)
                resend_counts = not err.connect
                reached = reached or resend_counts
                last = err
                continue
            finally:
                if self.max_per_replica is None:
                    replica.in_flight -= 1
                else:
                    await self._release(replica)
            replica.failures = 0
            return raw

    def stats(self) -> list[dict[str, object]]:
        """Per-replica counters: ``url``, ``sent``, ``in_flight``, ``down`` (for reports and tests)."""
        now = self._clock()
        return [
            {"url": r.base_url, "sent": r.sent, "in_flight": r.in_flight, "down": r.down_until > now}
            for r in self.replicas
        ]
