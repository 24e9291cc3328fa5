"""The lean HTTP transport behind the ``openai:`` backend: POST bytes, get (status, headers, body).

A keep-alive HTTP/1.1 client written on asyncio's protocol layer, because the
client's CPU per call bounds a debate runner's throughput: at 1,500 calls/s,
every 0.1 ms a call is 15% of a core spent before the next request can go out.
Measured with 300 calls in flight against ``bench/fake_openai.py`` (its own
process, 200 ms latency; orjson bodies; no SDK), CPU per call of the client
process, three alternated runs each, load average 0.2-0.3:

================================  ==================
aiohttp 3.14 ``ClientSession``     0.170-0.212 ms
this transport                     0.047-0.053 ms
httpx 0.28                         1.5-12 ms (its pool walks every connection per request)
================================  ==================

aiohttp was the previous transport (and is why httpx was not: see
``bench/results/http_clients.txt``); most of its cost is per-request machinery
moot does not use (cookie jars, redirects, tracing hooks, multidicts, timers
per phase, a response object per request).

What the transport does:

* one connection pool per event loop (``run_sync`` uses a fresh loop per call,
  and a connection belongs to the loop that opened it), keep-alive, connections
  idle for more than 4 s are not reused (below uvicorn's 5 s, after which vLLM
  and llama-cpp-python's server close them: a request sent on a connection the
  server is closing fails), no connection limit of its own (the model's
  concurrency gate and the replica caps limit what is in flight);
* a host name's addresses looked up once per 5 minutes per loop (one lookup for the
  hundreds of connections of a run's first burst), each address tried in turn;
* ``http://`` and ``https://`` (the system's certificate store, which honours
  ``SSL_CERT_FILE``); responses framed by ``Content-Length``, chunked, or by the
  server closing the connection; ``gzip`` and ``deflate`` bodies decoded;
  informational (1xx) answers skipped. No proxies (as aiohttp's default before
  it): the ``http=sdk`` stack honours ``HTTPS_PROXY``;
* it reads the whole body as bytes and returns it with the status and headers:
  JSON decoding, error statuses and usage are the backend's business;
* every failure to get a response becomes a :class:`TransportError` that says
  whether the request could have reached the server (``connect=False``) or
  provably did not (``connect=True``: refused, unreachable, TLS handshake
  failed, connect timed out), which is what replica routing needs to retry
  safely elsewhere. A connection that fails or is abandoned mid-request (a
  timeout, a cancelled task) is closed, never reused;
* connections left open when their loop shuts down are closed by the loop's
  ``shutdown_asyncgens`` (a parked async generator holds the pool), so
  ``asyncio.run`` needs no ``aclose`` to avoid "unclosed transport" warnings.
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import ipaddress
import socket
import ssl
import time
import weakref
import zlib
from collections.abc import AsyncGenerator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlsplit

import moot.redact as redact

from .base import note_not_sent

__all__ = ["LeanTransport", "RawResponse", "TransportError", "json_headers", "parse_retry_after"]

_KEEPALIVE_S = 4.0
"""Idle seconds after which a pooled connection is closed instead of reused (see the module docstring)."""
_MAX_HEAD_BYTES = 256 * 1024
"""A response head longer than this is not HTTP we can use."""


class Headers(Mapping[str, str]):
    """Response headers: names lower-cased, looked up case-insensitively; repeated fields joined by ", "."""

    __slots__ = ("_fields",)

    def __init__(self, fields: dict[str, str]) -> None:
        self._fields = fields  # names already lower-cased

    def __getitem__(self, key: str) -> str:
        return self._fields[key.lower()]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __repr__(self) -> str:
        return f"Headers({self._fields!r})"


@dataclass(frozen=True, slots=True)
class RawResponse:
    """What the server answered, undecoded."""

    status: int
    """The HTTP status."""
    headers: Mapping[str, str]
    """Response headers (case-insensitive lookups)."""
    body: bytes
    """The whole body (content-encoding already decoded)."""


class TransportError(Exception):
    """No response: the connection failed, dropped or timed out.

    A message that names the URL shows it with its credentials masked (:func:`moot.redact.url`):
    it becomes the text of a failed turn, an event, a stored error.

    Attributes:
        connect: True when the request provably never reached the server
            (connection refused or unreachable, the TLS handshake failed, or the
            connect step timed out).
        timeout: True when a time limit ran out.
    """

    def __init__(self, message: str, *, connect: bool = False, timeout: bool = False) -> None:
        super().__init__(message)
        self.connect = connect
        self.timeout = timeout


@dataclass(frozen=True, slots=True)
class _Target:
    """One URL, parsed once: where to connect and the request head up to ``Content-Length:``."""

    key: tuple[str, int, bool]
    host: str
    port: int
    tls: bool
    head: bytes


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection: one request at a time, its response parsed as bytes arrive."""

    __slots__ = (
        "transport",
        "buffer",
        "waiter",
        "closed",
        "idle_since",
        "status",
        "headers",
        "length",
        "chunked",
        "keep_alive",
        "chunks",
    )

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future[RawResponse] | None = None
        self.closed = False
        self.idle_since = 0.0
        self._reset()

    def _reset(self) -> None:
        self.status = 0  # 0 while the head has not arrived
        self.headers: Headers | None = None
        self.length = -1  # body bytes expected; -1: until the server closes
        self.chunked = False
        self.keep_alive = True
        self.chunks: list[bytes] = []

    # -- asyncio.Protocol ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:  # noqa: D102
        # Not an isinstance check: uvloop's transports (Ray's workers run on uvloop) are no subclass.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:  # noqa: D102
        if self.waiter is None:
            # Bytes nobody asked for (a server talking out of turn): the connection cannot be trusted.
            self._close()
            return
        self.buffer += data
        try:
            self._parse()
        except _BadResponse as err:
            self._fail(TransportError(f"malformed HTTP response: {err}"))
            self._close()

    def eof_received(self) -> bool:  # noqa: D102
        return False  # close the transport; connection_lost settles any waiter

    def connection_lost(self, exc: Exception | None) -> None:  # noqa: D102
        self.closed = True
        if self.waiter is None or self.waiter.done():
            return
        if self.status and self.length == -1 and not self.chunked:  # a body framed by the close
            self.keep_alive = False
            self._finish(bytes(self.buffer))
            return
        got = "before any response" if not self.status else "in the middle of the response"
        reason = f": {exc}" if exc else ""
        self._fail(TransportError(f"the server closed the connection {got}{reason}"))

    # -- parsing --------------------------------------------------------------------------------------

    def _parse(self) -> None:
        while True:
            if not self.status and not self._head():
                return
            if self.chunked:
                if not self._chunk():
                    return
                continue
            if self.length < 0 or len(self.buffer) < self.length:
                return
            body = bytes(self.buffer[: self.length])
            del self.buffer[: self.length]
            self._finish(body)
            return

    def _head(self) -> bool:
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buffer) > _MAX_HEAD_BYTES:
                raise _BadResponse(f"no end of the head in {len(self.buffer)} bytes")
            return False
        lines = bytes(self.buffer[:end]).decode("latin-1").split("\r\n")
        del self.buffer[: end + 4]
        version, _, rest = lines[0].partition(" ")
        code = rest[:3]
        if not version.startswith("HTTP/1.") or not code.isdigit():
            raise _BadResponse(f"status line {lines[0][:80]!r}")
        status = int(code)
        if 100 <= status < 200:  # an informational answer; the real one follows
            return False if not self.buffer else self._head()
        fields: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                raise _BadResponse(f"header line {line[:80]!r}")
            name = name.strip().lower()
            value = value.strip()
            old = fields.get(name)
            fields[name] = value if old is None else f"{old}, {value}"
        self.status = status
        self.headers = Headers(fields)
        connection = fields.get("connection", "").lower()
        self.keep_alive = "close" not in connection and (version == "HTTP/1.1" or "keep-alive" in connection)
        if "chunked" in fields.get("transfer-encoding", "").lower():
            self.chunked = True
        elif "content-length" in fields:
            try:
                self.length = int(fields["content-length"])
            except ValueError:
                raise _BadResponse("Content-Length is not a number") from None
            if self.length < 0:
                raise _BadResponse("Content-Length is negative")
        elif status in (204, 304):
            self.length = 0
        return True

    def _chunk(self) -> bool:
        """Consume one chunk (or the last one and the trailers); False when more bytes are needed."""
        end = self.buffer.find(b"\r\n")
        if end < 0:
            return False
        try:
            size = int(bytes(self.buffer[:end]).split(b";", 1)[0], 16)
        except ValueError:
            raise _BadResponse("chunk size is not a number") from None
        if size == 0:  # the last chunk, then trailer lines (if any) up to an empty line
            stop = self.buffer.find(b"\r\n\r\n", end)
            if stop < 0:
                return False
            del self.buffer[: stop + 4]
            self._finish(b"".join(self.chunks))
            return False
        if len(self.buffer) < end + 2 + size + 2:
            return False
        self.chunks.append(bytes(self.buffer[end + 2 : end + 2 + size]))
        del self.buffer[: end + 2 + size + 2]
        return True

    def _finish(self, body: bytes) -> None:
        assert self.headers is not None
        waiter, status, headers = self.waiter, self.status, self.headers
        encoding = headers.get("content-encoding", "identity").lower()
        if encoding in ("gzip", "x-gzip", "deflate"):
            try:
                # wbits 47: gzip or zlib header, detected; raw deflate (some servers) is retried below.
                body = zlib.decompress(body, 47) if encoding != "deflate" else _inflate(body)
            except zlib.error as err:
                self._fail(TransportError(f"cannot decode the {encoding} body: {err}"))
                self._close()
                return
        elif encoding != "identity":
            self._fail(TransportError(f"unsupported Content-Encoding {encoding!r}"))
            self._close()
            return
        keep = self.keep_alive and not self.buffer
        self._reset()
        self.waiter = None
        if not keep:
            self._close()
        if waiter is not None and not waiter.done():
            waiter.set_result(RawResponse(status, headers, body))

    def _fail(self, error: TransportError) -> None:
        waiter, self.waiter = self.waiter, None
        self.keep_alive = False
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)

    def _close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        """Drop the connection at once (a request given up mid-way: its answer may still come)."""
        self.closed = True
        self.waiter = None
        if self.transport is not None:
            self.transport.abort()


_Address = tuple[int, int, int, Any]
"""(family, type, proto, socket address) of one address of a host."""
_DNS_TTL_S = 300.0
"""Seconds a host name's looked-up addresses are reused (aiohttp's default before this transport)."""


async def _resolve(loop: asyncio.AbstractEventLoop, host: str, port: int) -> list[_Address]:
    try:  # an address already: no lookup (asyncio would start a resolver thread for it)
        ip = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        if ip.version == 4:
            return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, (host, port))]
        return [(socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP, (host, port, 0, 0))]
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [(family, kind, proto, address) for family, kind, proto, _, address in infos]


async def _open(loop: asyncio.AbstractEventLoop, address: _Address) -> socket.socket:
    family, kind, proto, where = address
    sock = socket.socket(family, kind, proto)
    try:
        sock.setblocking(False)
        await loop.sock_connect(sock, where)
    except BaseException:
        sock.close()
        raise
    return sock


class _BadResponse(Exception):
    """Bytes that are not an HTTP/1.x response."""


def _inflate(body: bytes) -> bytes:
    try:
        return zlib.decompress(body)
    except zlib.error:
        return zlib.decompress(body, -zlib.MAX_WBITS)  # raw deflate, no zlib header


class _Pool:
    """The connections of one event loop, idle ones per (host, port, tls), most recent last.

    It also remembers each host name's addresses for :data:`_DNS_TTL_S`: the first burst of a
    run opens hundreds of connections at once, and one lookup serves them all.
    """

    def __init__(self) -> None:
        self.idle: dict[tuple[str, int, bool], list[_Connection]] = {}
        self.busy: set[_Connection] = set()
        self.dns: dict[tuple[str, int], tuple[float, asyncio.Task[list[_Address]]]] = {}

    async def addresses(self, loop: asyncio.AbstractEventLoop, host: str, port: int) -> list[_Address]:
        """``host``'s addresses, looked up once per :data:`_DNS_TTL_S` (concurrent callers share it)."""
        entry = self.dns.get((host, port))
        if entry is None or (entry[0] <= loop.time() and entry[1].done()):
            task = loop.create_task(_resolve(loop, host, port))
            task.add_done_callback(functools.partial(self._resolved, (host, port)))
            entry = self.dns[(host, port)] = (loop.time() + _DNS_TTL_S, task)
        # Shielded: one caller's cancellation must not cancel the lookup the others wait for.
        return await asyncio.shield(entry[1])

    def _resolved(self, key: tuple[str, int], task: asyncio.Task[list[_Address]]) -> None:
        if task.cancelled() or task.exception() is not None:  # (exception() marks it retrieved)
            if self.dns.get(key, (0.0, None))[1] is task:
                del self.dns[key]  # a failed lookup is not remembered

    def close(self) -> None:
        for conns in self.idle.values():
            for conn in conns:
                conn._close()
        for conn in self.busy:
            conn.abort()
        self.idle.clear()
        self.busy.clear()


async def _closer(pool: _Pool) -> AsyncGenerator[None, None]:
    # Parked at its yield; the loop's shutdown_asyncgens() (asyncio.run does it) resumes it here.
    try:
        yield
    finally:
        pool.close()


class LeanTransport:
    """POSTs bytes over a pool of keep-alive HTTP/1.1 connections per event loop.

    Args:
        headers: sent with every request (authorization, content type).
        timeout: seconds for a whole request, connect to last body byte.
        connect_timeout: seconds to open a connection; a replica that does not
            accept within it counts as down.
    """

    def __init__(self, headers: Mapping[str, str], timeout: float, connect_timeout: float = 10.0) -> None:
        for name, value in headers.items():
            # Named, never shown: the value may be a key.
            if any(c in f"{name}{value}" for c in "\r\n\0") or not f"{name}{value}".isascii():
                raise ValueError(f"HTTP header {name!r} has a line break, a NUL or a non-ASCII character")
        self.headers = dict(headers)
        self.timeout = timeout
        self.connect_timeout = min(connect_timeout, timeout)
        self._pools: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, tuple[_Pool, AsyncGenerator[None, None]]
        ] = weakref.WeakKeyDictionary()
        # The last request's loop and pool: one lookup per loop, not per request.
        self._last: tuple[weakref.ref[asyncio.AbstractEventLoop], _Pool] | None = None
        self._targets: dict[str, _Target] = {}
        self._ssl: ssl.SSLContext | None = None

    async def _pool(self, loop: asyncio.AbstractEventLoop) -> _Pool:
        entry = self._pools.get(loop)
        if entry is None:
            # Forget loops that are gone: an entry's generator refers to its loop, so it would
            # keep every closed loop of a process that calls asyncio.run repeatedly alive.
            for old in [old for old in self._pools if old.is_closed()]:
                del self._pools[old]
            pool = _Pool()
            guard = _closer(pool)
            await guard.__anext__()  # registers the generator with the loop's shutdown hook
            entry = self._pools[loop] = (pool, guard)
        self._last = (weakref.ref(loop), entry[0])
        return entry[0]

    def _target(self, url: str) -> _Target:
        target = self._targets.get(url)
        if target is None:
            target = self._targets[url] = _parse_target(url, self.headers)
            if len(self._targets) > 64:  # many URLs from one transport: keep the newest
                del self._targets[next(iter(self._targets))]
        return target

    async def post(self, url: str, body: bytes) -> RawResponse:
        """POST ``body`` (JSON bytes) to ``url`` and read the whole response.

        Raises:
            TransportError: no complete response (see the class).
        """
        loop = asyncio.get_running_loop()
        last = self._last
        pool = last[1] if last is not None and last[0]() is loop else await self._pool(loop)
        target = self._target(url)
        now = loop.time()
        deadline = now + self.timeout  # the whole request, connecting included
        conn = _reuse(pool, target.key, now)
        if conn is None:
            try:
                conn = await self._connect(loop, pool, target, url)
            except asyncio.CancelledError:
                note_not_sent()  # cancelled before a byte of the request left: no attempt
                raise
        waiter: asyncio.Future[RawResponse] = loop.create_future()
        conn.waiter = waiter
        pool.busy.add(conn)
        timer = loop.call_at(deadline, _time_out, waiter)
        try:
            assert conn.transport is not None
            conn.transport.write(b"".join((target.head, str(len(body)).encode(), b"\r\n\r\n", body)))
            response = await waiter
        except TransportError as err:
            conn.abort()
            if err.timeout:
                raise TransportError(
                    f"request to {redact.url(url)} timed out after {self.timeout:g} s", timeout=True
                ) from None
            raise TransportError(f"request to {redact.url(url)} failed: {err}") from None
        except BaseException:  # cancelled: the answer may still come on this connection
            conn.abort()
            raise
        finally:
            timer.cancel()
            pool.busy.discard(conn)
        if not conn.closed:
            conn.idle_since = loop.time()
            pool.idle.setdefault(target.key, []).append(conn)
        return response

    async def _connect(
        self, loop: asyncio.AbstractEventLoop, pool: _Pool, target: _Target, url: str
    ) -> _Connection:
        tls = None
        if target.tls:
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            tls = self._ssl
        try:
            async with asyncio.timeout(self.connect_timeout):
                addresses = await pool.addresses(loop, target.host, target.port)
                error: OSError | None = None
                for address in addresses:  # each address in the resolver's order, until one accepts
                    try:
                        sock = await _open(loop, address)
                        break
                    except OSError as err:
                        error = err
                else:
                    raise error or OSError(f"no address for {target.host}")
                _, conn = await loop.create_connection(
                    _Connection, sock=sock, ssl=tls, server_hostname=target.host if tls else None
                )
        except TimeoutError as err:
            raise TransportError(
                f"connecting to {redact.url(url)} timed out", connect=True, timeout=True
            ) from err
        except OSError as err:  # refused, unreachable, name not resolved, TLS handshake (ssl.SSLError)
            raise TransportError(f"cannot connect to {redact.url(url)}: {err}", connect=True) from err
        return conn

    async def aclose(self) -> None:
        """Close the running loop's connections (the transport stays usable: the next call opens more)."""
        entry = self._pools.pop(asyncio.get_running_loop(), None)
        self._last = None
        if entry is not None:
            await entry[1].aclose()  # runs the generator's finally: pool.close()


def _reuse(pool: _Pool, key: tuple[str, int, bool], now: float) -> _Connection | None:
    """The most recently used idle connection to ``key`` still open and fresh; stale ones are closed."""
    conns = pool.idle.get(key)
    while conns:
        conn = conns.pop()
        if not conn.closed and now - conn.idle_since < _KEEPALIVE_S:
            return conn
        conn._close()
    return None


def _time_out(waiter: asyncio.Future[RawResponse]) -> None:
    if not waiter.done():
        waiter.set_exception(TransportError("timed out", timeout=True))


@functools.lru_cache(maxsize=1)
def _user_agent() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"moot/{version('moot')}"
    except PackageNotFoundError:
        return "moot"


def _parse_target(url: str, headers: Mapping[str, str]) -> _Target:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise TransportError(f"cannot post to {url!r}: not an http:// or https:// URL", connect=True)
    tls = scheme == "https"
    try:
        port = parts.port or (443 if tls else 80)
    except ValueError as err:
        raise TransportError(f"cannot post to {url!r}: {err}", connect=True) from None
    host = parts.hostname
    netloc = f"[{host}]" if ":" in host else host
    if port != (443 if tls else 80):
        netloc += f":{port}"
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    lines = [f"POST {path} HTTP/1.1", f"Host: {netloc}", f"User-Agent: {_user_agent()}"]
    lines.append("Accept-Encoding: gzip, deflate")
    lines += [f"{name}: {value}" for name, value in headers.items() if name.lower() != "content-length"]
    head = ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")
    return _Target((host, port, tls), host, port, tls, head)


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
