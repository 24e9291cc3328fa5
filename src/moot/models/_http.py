"""The lean HTTP transport behind the ``openai:`` backend: POST bytes, get (status, headers, body).

Why aiohttp and not httpx: measured with ``bench/http_clients.py`` (one process,
the fake server of ``bench/fake_openai.py`` in another, 200 ms latency, orjson
bodies on both sides, no SDK), the client's CPU per call was:

=============  ============  ============  ============
in flight      30            100           300
=============  ============  ============  ============
aiohttp 3.14   0.25-0.28 ms  0.19-0.32 ms  0.17-0.27 ms
httpx 0.28     1.5-1.9 ms    9.3-12.9 ms   11.0-12.1 ms
=============  ============  ============  ============

(two runs, load average 3-8 on the 2 cores; ``bench/results/http_clients.txt``).

httpx's connection pool (httpcore) walks its connection list for every request
and every release, so its cost grows with the number of calls in flight: at
100 in flight it could not pass 45 calls/s on these 2 cores, where aiohttp did
430. A debate runner keeps hundreds of calls in flight, so the choice is aiohttp
(which also parses HTTP in C, llhttp).

What the transport does and does not do:

* one ``aiohttp.ClientSession`` per event loop (sessions bind to the loop that
  made them, and ``run_sync`` uses a fresh loop per call), keep-alive, no
  connection limit of its own (the model's concurrency gate and the replica
  caps limit what is in flight), no cookie jar;
* it reads the whole body as bytes and returns it with the status and headers:
  JSON decoding, error statuses and usage are the backend's business;
* every failure to get a response becomes a :class:`TransportError` that says
  whether the request could have reached the server (``connect=False``) or
  provably did not (``connect=True``: refused, unreachable, connect timed out),
  which is what replica routing needs to retry safely elsewhere;
* a session left open when its loop shuts down is closed by the loop's
  ``shutdown_asyncgens`` (a parked async generator holds it), so ``asyncio.run``
  needs no ``aclose`` to avoid aiohttp's "Unclosed client session" warning.
"""

from __future__ import annotations

import asyncio
import email.utils
import time
import weakref
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass

import aiohttp

__all__ = ["LeanTransport", "RawResponse", "TransportError", "json_headers", "parse_retry_after"]


@dataclass(frozen=True, slots=True)
class RawResponse:
    """What the server answered, undecoded."""

    status: int
    """The HTTP status."""
    headers: Mapping[str, str]
    """Response headers (case-insensitive lookups)."""
    body: bytes
    """The whole body."""


class TransportError(Exception):
    """No response: the connection failed, dropped or timed out.

    Attributes:
        connect: True when the request provably never reached the server
            (connection refused or unreachable, or the connect step timed out).
        timeout: True when a time limit ran out.
    """

    def __init__(self, message: str, *, connect: bool = False, timeout: bool = False) -> None:
        super().__init__(message)
        self.connect = connect
        self.timeout = timeout


async def _closer(session: aiohttp.ClientSession) -> AsyncGenerator[None, None]:
    # Parked at its yield; the loop's shutdown_asyncgens() (asyncio.run does it) resumes it here.
    try:
        yield
    finally:
        await session.close()


class LeanTransport:
    """POSTs bytes over one pooled aiohttp session per event loop.

    Args:
        headers: sent with every request (authorization, content type).
        timeout: seconds for a whole request, connect to last body byte.
        connect_timeout: seconds to open a connection; a replica that does not
            accept within it counts as down.
    """

    def __init__(self, headers: Mapping[str, str], timeout: float, connect_timeout: float = 10.0) -> None:
        self.headers = dict(headers)
        self.timeout = timeout
        connect = min(connect_timeout, timeout)
        self._client_timeout = aiohttp.ClientTimeout(total=timeout, sock_connect=connect)
        self._sessions: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, tuple[aiohttp.ClientSession, AsyncGenerator[None, None]]
        ] = weakref.WeakKeyDictionary()
        # The last request's loop and session: one lookup per loop, not per request.
        self._last: tuple[weakref.ref[asyncio.AbstractEventLoop], aiohttp.ClientSession] | None = None

    async def _session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        entry = self._sessions.get(loop)
        if entry is not None and not entry[0].closed:
            self._last = (weakref.ref(loop), entry[0])
            return entry[0]
        # Forget loops that are gone: an entry's generator refers to its loop, so it would
        # keep every closed loop of a process that calls asyncio.run repeatedly alive.
        for old in [old for old in self._sessions if old.is_closed()]:
            del self._sessions[old]
        session = aiohttp.ClientSession(
            # keepalive_timeout below uvicorn's 5 s (vLLM, llama-cpp-python's server), after which the
            # server closes an idle connection: reusing one it is closing fails the request sent on it.
            connector=aiohttp.TCPConnector(
                limit=0, limit_per_host=0, ttl_dns_cache=300, keepalive_timeout=4.0
            ),
            headers=self.headers,
            timeout=self._client_timeout,
            cookie_jar=aiohttp.DummyCookieJar(),
            raise_for_status=False,
        )
        guard = _closer(session)
        await guard.__anext__()  # registers the generator with the loop's shutdown hook
        self._sessions[loop] = (session, guard)
        self._last = (weakref.ref(loop), session)
        return session

    async def post(self, url: str, body: bytes) -> RawResponse:
        """POST ``body`` (JSON bytes) to ``url`` and read the whole response.

        Raises:
            TransportError: no complete response (see the class).
        """
        last = self._last
        if last is not None and last[0]() is asyncio.get_running_loop() and not last[1].closed:
            session = last[1]
        else:
            session = await self._session()
        try:
            async with session.post(url, data=body) as response:
                data = await response.read()
                return RawResponse(response.status, response.headers, data)
        except aiohttp.ClientConnectorError as err:
            raise TransportError(f"cannot connect to {url}: {err.os_error or err}", connect=True) from err
        except aiohttp.ConnectionTimeoutError as err:
            raise TransportError(f"connecting to {url} timed out", connect=True, timeout=True) from err
        except TimeoutError as err:  # aiohttp's total timeout, ServerTimeoutError
            message = f"request to {url} timed out after {self.timeout:g} s"
            raise TransportError(message, timeout=True) from err
        except (aiohttp.ClientError, OSError) as err:
            raise TransportError(f"request to {url} failed: {type(err).__name__}: {err}") from err

    async def aclose(self) -> None:
        """Close the running loop's session (the transport stays usable: the next call opens another)."""
        entry = self._sessions.pop(asyncio.get_running_loop(), None)
        self._last = None
        if entry is not None:
            await entry[1].aclose()  # runs the generator's finally: session.close()


def json_headers(api_key: str) -> dict[str, str]:
    """The headers of an OpenAI-compatible JSON request: bearer auth and content type."""
    return {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}


def parse_retry_after(headers: Mapping[str, str] | None, *, now: float | None = None) -> float | None:
    """Seconds a server asked us to wait, from ``retry-after-ms`` or ``Retry-After``.

    ``Retry-After`` may be a number of seconds or an HTTP-date. Unparseable or
    missing values give None; dates in the past give 0.

    Args:
        headers: response headers (any case-insensitive mapping, e.g. httpx's).
        now: current UNIX time, for tests.
    """
    if headers is None:
        return None
    # OpenAI and Anthropic send the millisecond variant alongside; it is the more precise one.
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(float(ms) / 1000.0, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # an HTTP-date is always GMT
        return None
    return max(when.timestamp() - (time.time() if now is None else now), 0.0)
