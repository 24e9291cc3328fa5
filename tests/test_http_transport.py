"""The lean HTTP transport (moot.models._http) against real sockets: a raw asyncio server per test
that answers exactly the bytes each case needs (framing, encodings, faults, TLS)."""

from __future__ import annotations

import asyncio
import gzip
import shutil
import socket
import ssl
import subprocess
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from moot.models import _http
from moot.models._http import LeanTransport, TransportError, parse_retry_after

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


class Server:
    """What the server saw: connections opened and request heads read."""

    def __init__(self) -> None:
        self.connections = 0
        self.heads: list[bytes] = []
        self.bodies: list[bytes] = []


async def read_request(reader: asyncio.StreamReader, seen: Server) -> bool:
    """Read one request (head and Content-Length body); False at EOF."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return False
    seen.heads.append(head)
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    seen.bodies.append(await reader.readexactly(length))
    return True


def answer(body: bytes, *headers: str, status: str = "200 OK") -> bytes:
    lines = [f"HTTP/1.1 {status}", *headers]
    if not any(
        h.lower().startswith(("content-length", "transfer-encoding", "connection: close")) for h in headers
    ):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


@asynccontextmanager
async def serving(handler: Handler, tls: ssl.SSLContext | None = None) -> AsyncIterator[tuple[str, Server]]:
    seen = Server()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.connections += 1
        try:
            await handler(reader, writer, seen.connections)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0, ssl=tls)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}/v1/chat/completions", seen


@asynccontextmanager
async def simple(*replies: bytes) -> AsyncIterator[tuple[str, Server]]:
    """A server answering each request on a connection with the next of ``replies`` (the last repeats)."""
    box: list[Server] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        k = 0
        while await read_request(reader, box[0]):
            writer.write(replies[min(k, len(replies) - 1)])
            await writer.drain()
            k += 1

    async with serving(handler) as (url, seen):
        box.append(seen)
        yield url, seen


def transport(timeout: float = 5.0) -> LeanTransport:
    return LeanTransport(
        {"Authorization": "Bearer sk-test", "Content-Type": "application/json"}, timeout=timeout
    )


def test_request_bytes_and_keep_alive_reuse() -> None:
    async def main() -> None:
        async with simple(answer(b'{"ok": 1}', "X-Thing: a", "x-thing: b", "Retry-After: 3")) as (url, seen):
            t = transport()
            for k in range(5):
                raw = await t.post(url, b'{"k": %d}' % k)
                assert (raw.status, raw.body) == (200, b'{"ok": 1}')
            assert seen.connections == 1  # one keep-alive connection for five requests in a row
            assert seen.bodies == [b'{"k": %d}' % k for k in range(5)]
            head = seen.heads[0].decode()
            assert head.startswith("POST /v1/chat/completions HTTP/1.1\r\n")
            for line in (
                "Host: 127.0.0.1:",
                "Authorization: Bearer sk-test",
                "Content-Type: application/json",
            ):
                assert line in head
            assert "Content-Length: 8\r\n" in head and "User-Agent: moot" in head
            assert raw.headers["x-thing"] == raw.headers["X-THING"] == "a, b"  # case-insensitive, joined
            assert parse_retry_after(raw.headers) == 3.0
            await t.aclose()

    asyncio.run(main())


def test_concurrent_requests_open_one_connection_each_and_reuse_them() -> None:
    async def main() -> None:
        async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
            while await read_request(reader, seen):
                body = seen.bodies[-1]  # this connection's: no await since it was read
                await asyncio.sleep(0.05)
                writer.write(answer(body))

        async with serving(slow) as (url, seen):
            t = transport()
            bodies = [b"%d" % k for k in range(20)]
            for _ in range(3):
                raws = await asyncio.gather(*(t.post(url, b) for b in bodies))
                assert [r.body for r in raws] == bodies  # each answer reaches its own request
            assert seen.connections == 20

    asyncio.run(main())


def test_chunked_body_with_extensions_and_trailers_dripped_byte_by_byte() -> None:
    reply = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;name=x\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nX-Trailer: 1\r\n\r\n"
    )

    async def main() -> None:
        async def drip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
            while await read_request(reader, seen):
                for k in range(len(reply)):
                    writer.write(reply[k : k + 1])
                    await writer.drain()
                    await asyncio.sleep(0)

        async with serving(drip) as (url, seen):
            t = transport()
            assert (await t.post(url, b"{}")).body == b"hello world"
            assert (await t.post(url, b"{}")).body == b"hello world"
            assert seen.connections == 1

    asyncio.run(main())


def test_gzip_and_deflate_bodies_are_decoded() -> None:
    text = b'{"choices": []}' * 50

    async def main() -> None:
        raw_deflate = zlib.compressobj(wbits=-15)
        for encoding, data in (
            ("gzip", gzip.compress(text)),
            ("deflate", zlib.compress(text)),  # zlib-wrapped, as the RFC says
            ("deflate", raw_deflate.compress(text) + raw_deflate.flush()),  # bare, as some servers send
        ):
            async with simple(answer(data, f"Content-Encoding: {encoding}")) as (url, _):
                assert (await transport().post(url, b"{}")).body == text
        async with simple(answer(b"xx", "Content-Encoding: br")) as (url, _):
            with pytest.raises(TransportError, match="unsupported Content-Encoding 'br'"):
                await transport().post(url, b"{}")

    asyncio.run(main())


def test_body_framed_by_close_and_informational_answers() -> None:
    async def main() -> None:
        async def close_framed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
            await read_request(reader, seen)
            writer.write(
                b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end"
            )
            await writer.drain()

        async with serving(close_framed) as (url, seen):
            t = transport()
            assert (await t.post(url, b"{}")).body == b"until the end"
            assert (await t.post(url, b"{}")).body == b"until the end"
            assert seen.connections == 2  # the closed connection is not reused

    asyncio.run(main())


def test_http_1_0_answer_closes_and_204_has_no_body() -> None:
    async def main() -> None:
        async with simple(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok") as (url, seen):
            t = transport()
            assert (await t.post(url, b"{}")).body == b"ok"
            assert (await t.post(url, b"{}")).body == b"ok"
            assert seen.connections == 2
        async with simple(b"HTTP/1.1 204 No Content\r\n\r\n") as (url, seen):
            t = transport()
            assert (await t.post(url, b"{}")).status == 204
            assert (await t.post(url, b"{}")).body == b""
            assert seen.connections == 1

    asyncio.run(main())


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (b"SSH-2.0-OpenSSH\r\n\r\n", "malformed HTTP response: status line"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "malformed HTTP response: header line"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: many\r\n\r\n", "Content-Length is not a number"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "chunk size is not a number"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", "closed the connection in the middle"),
        (b"", "closed the connection before any response"),
    ],
)
def test_garbage_and_drops_are_transport_errors_that_reached_the_server(reply: bytes, message: str) -> None:
    async def main() -> None:
        async def once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
            await read_request(reader, seen)
            writer.write(reply)
            await writer.drain()

        async with serving(once) as (url, seen):
            with pytest.raises(TransportError, match=message) as caught:
                await transport().post(url, b"{}")
            assert not caught.value.connect and not caught.value.timeout

    asyncio.run(main())


def test_refused_connection_is_a_connect_error() -> None:
    async def main() -> None:
        async with simple(answer(b"")) as (url, _):
            pass  # closed: nothing listens there now
        with pytest.raises(TransportError, match="cannot connect") as caught:
            await transport().post(url, b"{}")
        assert caught.value.connect

    asyncio.run(main())


def test_a_hung_request_times_out_and_its_connection_is_not_reused() -> None:
    async def main() -> None:
        async def hang_first(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
            while await read_request(reader, seen):
                if n == 1:
                    await asyncio.sleep(30)
                writer.write(answer(b"late" if n == 1 else b"ok"))

        async with serving(hang_first) as (url, seen):
            t = transport(timeout=0.3)
            loop = asyncio.get_running_loop()
            started = loop.time()
            with pytest.raises(TransportError, match="timed out after 0.3 s") as caught:
                await t.post(url, b"{}")
            assert caught.value.timeout and not caught.value.connect
            assert 0.25 < loop.time() - started < 1.0
            assert (await t.post(url, b"{}")).body == b"ok"  # a new connection, not the hung one
            assert seen.connections == 2

    asyncio.run(main())


def test_a_cancelled_request_drops_its_connection() -> None:
    async def main() -> None:
        async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
            while await read_request(reader, seen):
                await asyncio.sleep(0.2)
                writer.write(answer(b"for %d" % n))

        async with serving(slow) as (url, seen):
            t = transport()
            task = asyncio.ensure_future(t.post(url, b"{}"))
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # The first connection's late answer must never be read as this request's.
            assert (await t.post(url, b"{}")).body == b"for 2"

    asyncio.run(main())


def test_idle_connections_expire_and_ones_the_server_closed_are_skipped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def main() -> None:
        async def close_after_one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
            await read_request(reader, seen)
            writer.write(answer(b"%d" % n))
            await writer.drain()
            if n == 1:
                return  # the server closes this idle keep-alive connection
            while await read_request(reader, seen):
                writer.write(answer(b"%d" % n))

        async with serving(close_after_one) as (url, seen):
            t = transport()
            assert (await t.post(url, b"{}")).body == b"1"
            await asyncio.sleep(0.1)  # the close arrives while the connection is idle
            assert (await t.post(url, b"{}")).body == b"2"
            monkeypatch.setattr(_http, "_KEEPALIVE_S", 0.05)
            await asyncio.sleep(0.1)  # idle longer than the keep-alive: not reused
            assert (await t.post(url, b"{}")).body == b"3"
            assert seen.connections == 3

    asyncio.run(main())


def test_bytes_out_of_turn_or_after_the_answer_retire_the_connection() -> None:
    async def main() -> None:
        async def chatty(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
            while await read_request(reader, seen):
                writer.write(answer(b"%d" % n) + b"HTTP/1.1 200 OK\r\n")  # a stray second answer

        async with serving(chatty) as (url, seen):
            t = transport()
            assert (await t.post(url, b"{}")).body == b"1"
            assert (await t.post(url, b"{}")).body == b"2"
            assert seen.connections == 2

    asyncio.run(main())


def test_header_values_with_line_breaks_are_refused_without_showing_them() -> None:
    with pytest.raises(ValueError, match="'Authorization'") as caught:
        LeanTransport({"Authorization": "Bearer sk-secret\r\nX-Evil: 1"}, timeout=1)
    assert "sk-secret" not in str(caught.value)


def test_urls_that_are_not_http_are_connect_errors() -> None:
    async def main() -> None:
        for url in ("ftp://example.com/v1", "http:///nohost", "http://h:99999/v1"):
            with pytest.raises(TransportError) as caught:
                await transport().post(url, b"{}")
            assert caught.value.connect

    asyncio.run(main())


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.fail("openssl is needed to make a test certificate (Debian package openssl)")
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def test_https_with_a_trusted_certificate_and_refusal_of_an_untrusted_one(
    certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = certificate
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)

    async def main(trusted: bool) -> None:
        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
            while await read_request(reader, seen):
                writer.write(answer(b"secure"))

        async with serving(handler, tls) as (url, seen):
            t = transport()
            if trusted:
                assert (await t.post(url, b"{}")).body == b"secure"
                assert (await t.post(url, b"{}")).body == b"secure"
                assert seen.connections == 1
                await t.aclose()
            else:
                with pytest.raises(TransportError, match="CERTIFICATE_VERIFY_FAILED") as caught:
                    await t.post(url, b"{}")
                assert caught.value.connect  # the request never left

    asyncio.run(main(trusted=False))
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    asyncio.run(main(trusted=True))


def test_a_host_name_is_looked_up_once_for_a_burst_and_each_address_tried_in_turn() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        real = loop.getaddrinfo
        lookups: list[str] = []

        async def counting(host: str, port: int, **kwargs: object) -> list[tuple[object, ...]]:
            lookups.append(host)
            if host == "nowhere.test":
                raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
            found = await real("127.0.0.1", port, **kwargs)  # type: ignore[arg-type]
            # An address where nothing listens first: the next one must be tried.
            refused = await real("127.0.0.1", _closed_port(), **kwargs)  # type: ignore[arg-type]
            return [*refused, *found]

        loop.getaddrinfo = counting  # type: ignore[method-assign]
        async with simple(answer(b"ok")) as (url, seen):
            named = url.replace("127.0.0.1", "moot-test-host")
            t = transport()
            raws = await asyncio.gather(*(t.post(named, b"{}") for _ in range(30)))
            assert {r.body for r in raws} == {b"ok"} and seen.connections == 30
            assert lookups == ["moot-test-host"]  # one lookup served the whole burst
            assert b"Host: moot-test-host:" in seen.heads[0]
            for _ in range(2):  # a failed lookup is not remembered: each request looks again
                with pytest.raises(TransportError, match="cannot connect.*not known") as caught:
                    await t.post("http://nowhere.test:80/v1", b"{}")
                assert caught.value.connect
            assert lookups.count("nowhere.test") == 2

    asyncio.run(main())


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_ip_address_needs_no_lookup() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()

        async def no_lookup(*args: object, **kwargs: object) -> list[tuple[object, ...]]:
            raise AssertionError(f"looked up {args}")

        loop.getaddrinfo = no_lookup  # type: ignore[method-assign]
        async with simple(answer(b"ok")) as (url, _):
            assert (await transport().post(url, b"{}")).body == b"ok"

    asyncio.run(main())


def test_on_uvloop_as_in_rays_workers() -> None:
    """uvloop's transports are no asyncio.Transport subclass (a check for one failed every request
    of `moot absa --ray`): keep-alive, a chunked body, a time-out and a looked-up name on uvloop."""
    import uvloop

    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"

    async def main() -> None:
        assert type(asyncio.get_running_loop()).__module__.startswith("uvloop")

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
            while await read_request(reader, seen):
                if seen.bodies[-1] == b"hang":
                    await asyncio.sleep(30)
                writer.write(chunked)

        async with serving(handler) as (url, seen):
            t = transport(timeout=0.3)
            assert [(await t.post(url, b"{}")).body for _ in range(3)] == [b"ok"] * 3
            assert seen.connections == 1
            with pytest.raises(TransportError, match="timed out") as caught:
                await t.post(url, b"hang")
            assert caught.value.timeout
            assert (await t.post(url.replace("127.0.0.1", "localhost"), b"{}")).body == b"ok"
            await t.aclose()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())
