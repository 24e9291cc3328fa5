"""The HTTP transport behind the ``openai:`` backend: aiohttp, POST bytes, get (status, headers, body).

One ``aiohttp.ClientSession`` per event loop (a session belongs to the loop that
made it, and ``run_sync`` uses a fresh loop per call), so what a user expects of a
well-kept HTTP client comes from aiohttp itself:

* proxies from the environment, as aiohttp's ``trust_env=True`` reads them (the
  same standard-library calls: :func:`urllib.request.getproxies` and
  :func:`urllib.request.proxy_bypass`): ``HTTP_PROXY`` for ``http://`` endpoints
  (absolute-URI requests), ``HTTPS_PROXY`` for ``https://`` ones (a ``CONNECT``
  tunnel), ``NO_PROXY`` to bypass them, the proxy's credentials from its URL or
  from ``~/.netrc`` (``$NETRC``). They are read once per URL and handed to aiohttp
  as ``proxy=``, not looked up per request: with ``trust_env=True``, aiohttp 3.13-3.14
  reads ``.netrc`` in a thread and the proxy variables in another for *every*
  request, 0.25-0.45 ms of CPU a request on 2 cores (``bench/http_clients.py
  --libs moot,aiohttp``: 0.53-0.70 ms against 0.23-0.24 ms without), and a
  ``.netrc`` entry for the endpoint's host would make every request carrying the
  API key fail ("Cannot combine AUTHORIZATION header with AUTH argument");
* ``.netrc`` credentials for the endpoint itself when no API key was configured
  (``netrc=True``): they replace the placeholder bearer token;
* redirects followed (a 307/308 re-sends the POST and its body to the new place);
* keep-alive, with idle connections dropped after 4 s, under uvicorn's 5 s (vLLM,
  llama-cpp-python's server), after which such servers close them: a request sent
  on a connection the server is closing fails;
* no connection limit of its own (the model's concurrency gate and the replica
  caps limit what is in flight), no cookie jar, DNS answers kept 5 minutes;
* certificates from the system store, or the file or folder named by
  ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` (:func:`ssl.create_default_context`, made
  once per value of those variables, so one the program sets itself counts too);
* Happy Eyeballs (RFC 8305) as aiohttp does it: a host's addresses are raced
  250 ms apart, so a dead IPv6 route does not eat the connect budget;
* ``gzip`` and ``deflate`` (and ``br``/``zstd`` when aiohttp's extras for them are
  installed) decoded, the decoded body bounded: it is read in chunks and given up
  past :data:`MAX_BODY_BYTES` (:class:`ResponseTooLarge`), so a body that inflates
  to gigabytes is an error, not an out-of-memory (aiohttp >= 3.13.3 inflates in
  bounded steps).

It reads the whole body as bytes and returns it with the status and every
response header: JSON decoding, error statuses and usage are the backend's
business. Every failure to get a response becomes a :class:`TransportError`
that says whether the request could have reached the server (``connect=False``)
or provably did not (``connect=True``: refused, unreachable, name not resolved,
TLS handshake or proxy refused, connect timed out), which is what replica
routing needs to retry safely elsewhere.

A session left open when its loop shuts down is closed by the loop's
``shutdown_asyncgens`` (a parked async generator holds it), so ``asyncio.run``
needs no ``aclose`` to avoid aiohttp's "Unclosed client session" warning.
"""

from __future__ import annotations

import asyncio
import base64
import email.utils
import functools
import logging
import netrc as netrc_file
import os
import ssl
import time
import urllib.request
import weakref
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

import aiohttp
from aiohttp.http_exceptions import DecompressSizeError

import moot.redact as redact

from .base import note_not_sent

__all__ = [
    "MAX_BODY_BYTES",
    "RawResponse",
    "ResponseTooLarge",
    "Transport",
    "TransportError",
    "json_headers",
    "parse_retry_after",
]

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 32 * 1024 * 1024
"""A response body (decoded) longer than this is not read further: 32 MiB, far above any chat completion."""
_KEEPALIVE_S = 4.0
"""Idle seconds after which a pooled connection is closed instead of reused (module docstring)."""
_CHUNK_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class RawResponse:
    """What the server answered, its body decoded from its content encoding."""

    status: int
    """The HTTP status (of the last answer, after redirects)."""
    headers: Mapping[str, str]
    """Every response header (case-insensitive lookups; a repeated one gives its first value)."""
    body: bytes
    """The whole body."""


class _Sent:
    """Whether a request's headers went out (aiohttp's public request tracing says so)."""

    __slots__ = ("headers",)

    def __init__(self) -> None:
        self.headers = False


async def _headers_sent(
    session: aiohttp.ClientSession, context: object, params: aiohttp.TraceRequestHeadersSentParams
) -> None:
    state = getattr(context, "trace_request_ctx", None)
    if isinstance(state, _Sent):
        state.headers = True


_SENT_TRACE = aiohttp.TraceConfig()
_SENT_TRACE.on_request_headers_sent.append(_headers_sent)
_SENT_TRACE.freeze()


class TransportError(Exception):
    """No response: the connection failed, dropped or timed out.

    Attributes:
        connect: True when the request provably never reached the server
            (connection refused or unreachable, the name did not resolve, the TLS
            handshake or the proxy failed, or the connect step timed out).
        timeout: True when a time limit ran out.
    """

    def __init__(self, message: str, *, connect: bool = False, timeout: bool = False) -> None:
        super().__init__(message)
        self.connect = connect
        self.timeout = timeout


class ResponseTooLarge(Exception):
    """The server answered, but its body (decoded) runs past the bound; it was not read further.

    Not a :class:`TransportError`: the endpoint answered (it is not down), and sending
    the same request again would get the same body.
    """


async def _closer(session: aiohttp.ClientSession) -> AsyncGenerator[None, None]:
    # Parked at its yield; the loop's shutdown_asyncgens() (asyncio.run does it) resumes it here.
    try:
        yield
    finally:
        await session.close()


class Transport:
    """POSTs bytes over one pooled aiohttp session per event loop (module docstring).

    Args:
        headers: sent with every request (authorization, content type).
        timeout: seconds for a whole request, connect to last body byte.
        connect_timeout: seconds to open a connection; a replica that does not
            accept within it counts as down.
        max_body_bytes: the bound on a decoded response body.
        netrc: send the endpoint host's ``.netrc`` credentials (when it has an entry)
            instead of the ``Authorization`` header given: for a model with no API key.

    Raises:
        ValueError: a header name or value holds a line break, a NUL or a non-ASCII
            character (named, its value never shown: it may be a key).
    """

    def __init__(
        self,
        headers: Mapping[str, str],
        timeout: float,
        connect_timeout: float = 10.0,
        max_body_bytes: int = MAX_BODY_BYTES,
        netrc: bool = False,
    ) -> None:
        for name, value in headers.items():
            if any(c in f"{name}{value}" for c in "\r\n\0") or not f"{name}{value}".isascii():
                raise ValueError(f"HTTP header {name!r} has a line break, a NUL or a non-ASCII character")
        self.headers = dict(headers)
        self.timeout = timeout
        self.max_body_bytes = max_body_bytes
        self.netrc = netrc
        # Per URL: the keyword arguments of its requests (proxy, proxy and endpoint credentials).
        self._routes: dict[str, dict[str, object]] = {}
        self._client_timeout = aiohttp.ClientTimeout(
            total=timeout, sock_connect=min(connect_timeout, timeout)
        )
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
            connector=aiohttp.TCPConnector(
                limit=0,
                limit_per_host=0,
                ttl_dns_cache=300,
                keepalive_timeout=_KEEPALIVE_S,
                happy_eyeballs_delay=0.25,
                ssl=_tls_setting(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")),
            ),
            timeout=self._client_timeout,
            cookie_jar=aiohttp.DummyCookieJar(),
            trace_configs=[_SENT_TRACE],
            raise_for_status=False,
            trust_env=False,  # read once per URL instead (module docstring): _route()
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
            ResponseTooLarge: the decoded body runs past ``max_body_bytes``.
        """
        last = self._last
        if last is not None and last[0]() is asyncio.get_running_loop() and not last[1].closed:
            session = last[1]
        else:
            session = await self._session()
        route = self._routes.get(url)
        if route is None:
            route = self._route(url)
        # A message names the URL with its credentials masked: it becomes a failed turn's text, an
        # event, a stored error (moot.redact; issue 37).
        shown = redact.url(url)
        sent = _Sent()
        try:
            async with session.post(url, data=body, trace_request_ctx=sent, **route) as response:  # type: ignore[arg-type]
                return RawResponse(response.status, response.headers, await self._read(response, url))
        except asyncio.CancelledError:
            if not sent.headers:
                note_not_sent()  # cancelled before a byte of it left (connecting): no attempt
            raise
        except aiohttp.ClientHttpProxyError as err:  # the proxy refused the tunnel or the request
            message = redact.text(f"the proxy refused the request to {shown}: {err}")
            raise TransportError(message, connect=True) from err
        except aiohttp.ClientConnectorError as err:  # refused, unreachable, DNS, TLS, proxy connect
            raise TransportError(redact.text(f"cannot connect to {shown}: {err}"), connect=True) from err
        except aiohttp.ConnectionTimeoutError as err:
            raise TransportError(f"connecting to {shown} timed out", connect=True, timeout=True) from err
        except TimeoutError as err:  # the total time-out, or a socket read time-out
            message = f"request to {shown} timed out after {self.timeout:g} s"
            raise TransportError(message, timeout=True) from err
        except aiohttp.InvalidURL as err:
            raise TransportError(f"cannot post to {shown!r}: not a usable http(s) URL", connect=True) from err
        except (aiohttp.ClientError, OSError) as err:
            message = redact.text(f"request to {shown} failed: {type(err).__name__}: {err}")
            raise TransportError(message) from err

    def _route(self, url: str) -> dict[str, object]:
        """The keyword arguments of a request to ``url``, read once (module docstring).

        Its headers, and what aiohttp's ``trust_env=True`` would add: the proxy, the proxy's
        and the endpoint's credentials. The headers go with each request, not as the session's
        defaults: aiohttp sends a session's default headers to an explicit ``proxy=`` too, and
        their ``Authorization`` (the API key) would reach the proxy as ``Proxy-Authorization``.
        """
        parts = urlsplit(url)
        host = parts.hostname or ""
        headers = dict(self.headers)
        route: dict[str, object] = {"headers": headers}
        proxy = urllib.request.getproxies().get(parts.scheme.lower())
        if proxy and host and not urllib.request.proxy_bypass(host):
            where = urlsplit(proxy if "://" in proxy else f"http://{proxy}")  # proxy:3128, as curl takes it
            # Its credentials go in a header, never in a URL an error message could show.
            route["proxy"] = f"{where.scheme}://{where.netloc.rpartition('@')[2]}{where.path}"
            login: tuple[str, str] | None = (unquote(where.username or ""), unquote(where.password or ""))
            if not where.username and where.hostname:
                login = _netrc_login(where.hostname)
            if login is not None and login[0]:
                # A tunnel (https://) sends proxy_headers with its CONNECT; a plain request goes
                # to the proxy itself, so the header rides on it (the proxy drops it).
                if parts.scheme.lower() == "https":
                    route["proxy_headers"] = {"Proxy-Authorization": _basic(*login)}
                else:
                    headers["Proxy-Authorization"] = _basic(*login)
        if self.netrc and host:
            own = _netrc_login(host)
            if own is not None:
                headers["Authorization"] = _basic(*own)
        if len(self._routes) > 64:  # many URLs from one transport: keep the newest
            del self._routes[next(iter(self._routes))]
        self._routes[url] = route
        return route

    async def _read(self, response: aiohttp.ClientResponse, url: str) -> bytes:
        """The body, decoded, read in chunks and given up past the bound."""
        bound = self.max_body_bytes
        length = response.content_length
        if length is not None and length <= bound and "Content-Encoding" not in response.headers:
            return await response.read()  # the usual case: a plain body of known, small length
        chunks: list[bytes] = []
        size = 0
        try:
            async for chunk in response.content.iter_chunked(_CHUNK_BYTES):
                size += len(chunk)
                if size > bound:
                    break
                chunks.append(chunk)
            else:
                return b"".join(chunks)
        except aiohttp.ClientPayloadError as err:
            if not isinstance(err.__cause__, DecompressSizeError):  # aiohttp 3.13's own per-chunk bound
                raise
        response.close()  # drop the connection: the rest of the body is never read
        encoding = response.headers.get("Content-Encoding")
        how = f" once decoded ({encoding})" if encoding else ""
        raise ResponseTooLarge(
            f"the response of {redact.url(url)} (HTTP {response.status}) is longer than {bound:,} "
            f"bytes{how}: not read further"
        )

    async def aclose(self) -> None:
        """Close the running loop's session (the transport stays usable: the next call opens another)."""
        entry = self._sessions.pop(asyncio.get_running_loop(), None)
        self._last = None
        if entry is not None:
            await entry[1].aclose()  # runs the generator's finally: session.close()


@functools.lru_cache(maxsize=4)
def _tls_setting(cert_file: str | None, cert_dir: str | None) -> ssl.SSLContext | bool:
    """``SSL_CERT_FILE``/``SSL_CERT_DIR``'s trust store (the key: a change is seen), else True.

    True: aiohttp's own verifying context, the system's store, made once when aiohttp is imported
    (a second one here cost ~40 ms of every start-up). With either variable set, a context made
    once per setting, not per session: loading a store takes ~10-40 ms, and ``run_sync`` makes a
    session per call.
    """
    if not cert_file and not cert_dir:
        return True
    return ssl.create_default_context()


def _basic(login: str, password: str) -> str:
    """A Basic credentials header value (aiohttp 3.14 deprecates BasicAuth; 3.13 has no replacement)."""
    return "Basic " + base64.b64encode(f"{login}:{password}".encode()).decode("ascii")


def _netrc_login(host: str) -> tuple[str, str] | None:
    """(login, password) for ``host`` in ``$NETRC`` or ``~/.netrc``, as aiohttp reads it; None without one."""
    try:
        path = Path(os.environ.get("NETRC") or Path.home() / ".netrc")
        if not path.is_file():
            return None
        found = netrc_file.netrc(str(path)).authenticators(host)
    except (OSError, RuntimeError, netrc_file.NetrcParseError) as err:
        logger.warning("cannot read the .netrc file: %s", err)
        return None
    if found is None:
        return None
    login, account, password = found
    return (login or account or "", password or "")


def json_headers(api_key: str) -> dict[str, str]:
    """The headers of an OpenAI-compatible JSON request: bearer auth and content type."""
    return {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}


def parse_retry_after(headers: Mapping[str, str] | None, *, now: float | None = None) -> float | None:
    """Seconds a server asked us to wait, from ``retry-after-ms`` or ``Retry-After``.

    ``Retry-After`` may be a number of seconds or an HTTP-date. Unparseable or
    missing values give None; dates in the past give 0.

    Args:
        headers: response headers (any case-insensitive mapping, e.g. aiohttp's or httpx's).
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
