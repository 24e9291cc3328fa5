"""The ``openai:`` backend's HTTP transport (moot.models.transport, aiohttp) against real sockets:
what users see of it (keep-alive, encodings, the body bound, redirects, proxies, certificates,
.netrc, error kinds, uvloop). The end-to-end proxy runs of the CLI are in test_proxy_cli.py."""

from __future__ import annotations

import asyncio
import gzip
import json
import tracemalloc
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fault_server import Fate, FaultServer, completion, free_port
from http_proxy import ForwardProxy, make_certificate, server_tls
from moot.errors import ModelError
from moot.models import base
from moot.models.base import Message, ModelRequest
from moot.models.openai import OpenAIModel
from moot.models.transport import ResponseTooLarge, Transport, TransportError

HOST = "models.internal.test"  # resolves nowhere but through the test proxy
HEADERS = {"Authorization": "Bearer sk-test", "Content-Type": "application/json"}
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


@pytest.fixture(autouse=True)
def _no_proxy_from_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    monkeypatch.setenv("NETRC", "/nonexistent/.netrc")


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_certificate(tmp_path_factory.mktemp("tls"), HOST)


def post(transport: Transport, url: str, body: bytes = b"{}", times: int = 1) -> list[Any]:
    async def go() -> list[Any]:
        try:
            return [await transport.post(url, body) for _ in range(times)]
        finally:
            await transport.aclose()

    return asyncio.run(go())


def ok(n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
    return Fate(content="hello")


def test_keep_alive_headers_and_every_response_header() -> None:
    with FaultServer(
        lambda n, b, h: Fate(content="hi", headers={"X-Ratelimit-Remaining-Requests": "7"})
    ) as srv:
        raws = post(Transport(HEADERS, timeout=5), srv.url + "/chat/completions", b'{"a": 1}', times=3)
        assert [json.loads(r.body)["choices"][0]["message"]["content"] for r in raws] == ["hi"] * 3
        assert srv.bodies == [{"a": 1}] * 3
        assert srv.headers[0]["authorization"] == "Bearer sk-test"
        # Every header the server sent, looked up in any case (the rate-limit work reads them).
        assert raws[0].headers["x-ratelimit-remaining-requests"] == "7"
        assert raws[0].headers["X-RATELIMIT-REMAINING-REQUESTS"] == "7"


def test_one_connection_serves_requests_one_after_another() -> None:
    with FaultServer(ok) as srv:
        post(Transport(HEADERS, timeout=5), srv.url + "/chat/completions", times=3)
    assert srv.requests == 3 and srv.connections == 1


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_compressed_bodies_are_decoded(encoding: str) -> None:
    plain = json.dumps(completion("squeezed")).encode()
    packed = gzip.compress(plain) if encoding == "gzip" else zlib.compress(plain)
    fate = Fate("status", status=200, payload=packed, headers={"Content-Encoding": encoding})
    with FaultServer(lambda n, b, h: fate) as srv:
        (raw,) = post(Transport(HEADERS, timeout=5), srv.url + "/chat/completions")
    assert raw.body == plain


def _gzip_of_zeros(megabytes: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: a gzip stream
    block = bytes(1024 * 1024)
    return b"".join(packer.compress(block) for _ in range(megabytes)) + packer.flush()


def test_a_body_that_inflates_past_the_bound_is_an_error_not_an_out_of_memory() -> None:
    bomb = _gzip_of_zeros(512)  # ~0.5 MB on the wire, 512 MiB inflated
    fate = Fate("status", status=200, payload=bomb, headers={"Content-Encoding": "gzip"})
    with FaultServer(lambda n, b, h: fate) as srv:
        tracemalloc.start()
        try:
            with pytest.raises(ResponseTooLarge, match=r"longer than 8,388,608 bytes once decoded \(gzip\)"):
                post(Transport(HEADERS, timeout=30, max_body_bytes=8 * 1024 * 1024), srv.url + "/x")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    # Far below the 512 MiB inflated (aiohttp 3.13 inflates up to 32 MiB a step: ~67 MB peak; 3.14 less).
    assert peak < 128 * 1024 * 1024, f"{peak:,} bytes at the peak"


def test_a_bomb_fails_the_models_call_once_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)
    fate = Fate("status", status=200, payload=_gzip_of_zeros(40), headers={"Content-Encoding": "gzip"})
    with FaultServer(lambda n, b, h: fate) as srv:
        model = OpenAIModel("m", base_url=srv.url)
        request = ModelRequest(messages=[Message(role="user", content="hi")])
        with pytest.raises(ModelError, match="longer than 33,554,432 bytes once decoded") as caught:
            asyncio.run(model.request(request))
        assert not caught.value.retryable  # the same request would get the same body
        assert srv.requests == 1


def test_a_307_to_another_path_is_followed_with_the_post_and_its_body() -> None:
    def handler(n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
        if srv.paths[n] == "/v1/chat/completions":
            return Fate("status", status=307, headers={"Location": "/v2/chat/completions"}, body="moved")
        return Fate(content=f"answered at {srv.paths[n]}")

    with FaultServer(handler) as srv:
        (raw,) = post(Transport(HEADERS, timeout=5), srv.url + "/chat/completions", b'{"q": 2}')
    assert raw.status == 200 and b"answered at /v2/chat/completions" in raw.body
    assert srv.paths == ["/v1/chat/completions", "/v2/chat/completions"]
    assert srv.bodies == [{"q": 2}, {"q": 2}]


def test_a_refused_connection_is_a_connect_error() -> None:
    with pytest.raises(TransportError, match="cannot connect") as caught:
        post(Transport(HEADERS, timeout=5), f"http://127.0.0.1:{free_port()}/v1")
    assert caught.value.connect and not caught.value.timeout


def test_a_name_that_does_not_resolve_is_a_connect_error() -> None:
    with pytest.raises(TransportError, match="cannot connect") as caught:
        post(Transport(HEADERS, timeout=5), f"http://{HOST}:80/v1")
    assert caught.value.connect


@pytest.mark.parametrize("kind", ["drop", "malformed-head"])
def test_a_broken_answer_could_have_reached_the_server(kind: str) -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        if kind == "malformed-head":
            writer.write(b"NOT HTTP AT ALL\r\n\r\n")
            await writer.drain()
        writer.close()

    async def go() -> None:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            transport = Transport(HEADERS, timeout=5)
            try:
                with pytest.raises(TransportError, match="failed") as caught:
                    await transport.post(f"http://127.0.0.1:{port}/v1", b"{}")
            finally:
                await transport.aclose()
        assert not caught.value.connect and not caught.value.timeout

    asyncio.run(go())


def test_a_hung_request_times_out_having_reached_the_server() -> None:
    with FaultServer(lambda n, b, h: Fate("hang")) as srv:
        with pytest.raises(TransportError, match="timed out after 0.3 s") as caught:
            post(Transport(HEADERS, timeout=0.3), srv.url + "/x")
    assert caught.value.timeout and not caught.value.connect


def test_header_values_with_line_breaks_are_refused_without_showing_them() -> None:
    with pytest.raises(ValueError, match="'Authorization' has a line break") as caught:
        Transport({"Authorization": "Bearer sk-secret\r\nX: y"}, timeout=5)
    assert "sk-secret" not in str(caught.value)


def test_https_trusts_ssl_cert_file_and_refuses_an_unknown_certificate(
    certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    with FaultServer(ok, tls=server_tls(*certificate)) as srv:
        with pytest.raises(TransportError, match="CERTIFICATE_VERIFY_FAILED") as caught:
            post(Transport(HEADERS, timeout=5), srv.url + "/x")
        assert caught.value.connect  # the request never left
        monkeypatch.setenv("SSL_CERT_FILE", str(certificate[0]))
        (raw,) = post(Transport(HEADERS, timeout=5), srv.url + "/x")
    assert raw.status == 200 and srv.requests == 1


@pytest.fixture
def proxy() -> Iterator[ForwardProxy]:
    with ForwardProxy({HOST: "127.0.0.1"}) as running:
        yield running


def test_http_proxy_carries_http_requests_with_its_credentials_never_shown(
    proxy: ForwardProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url.replace("//", "//alice:s3cret@"))
    with FaultServer(ok, host=HOST) as srv:
        (raw,) = post(Transport(HEADERS, timeout=5), srv.url + "/chat/completions")
    assert raw.status == 200 and srv.requests == 1
    assert proxy.seen == [("POST", f"http://{HOST}:{srv.port}/v1/chat/completions")]
    assert proxy.auth == ["Basic YWxpY2U6czNjcmV0"]  # alice:s3cret
    assert srv.headers[0]["authorization"] == "Bearer sk-test"  # the key still reaches the server
    # A proxy that cannot be reached: a connect error that does not show the password.
    monkeypatch.setenv("HTTP_PROXY", f"http://alice:s3cret@127.0.0.1:{free_port()}")
    with pytest.raises(TransportError, match="cannot connect") as caught:
        post(Transport(HEADERS, timeout=5), f"http://{HOST}:1/v1/chat/completions")
    assert caught.value.connect and "s3cret" not in str(caught.value)


def test_https_proxy_tunnels_to_a_host_only_it_can_resolve(
    proxy: ForwardProxy, certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", proxy.url.replace("//", "//alice:s3cret@"))
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate[0]))
    with FaultServer(ok, tls=server_tls(*certificate), host=HOST) as srv:
        raws = post(Transport(HEADERS, timeout=5), srv.url + "/chat/completions", times=2)
    assert [r.status for r in raws] == [200, 200] and srv.requests == 2
    assert proxy.seen == [("CONNECT", f"{HOST}:{srv.port}")]  # one tunnel, kept alive
    assert proxy.auth == ["Basic YWxpY2U6czNjcmV0"]  # the proxy's credentials, never the API key


def test_a_proxy_variable_without_a_scheme_is_an_http_proxy(
    proxy: ForwardProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", f"127.0.0.1:{proxy.port}")  # as curl takes it
    with FaultServer(ok, host=HOST) as srv:
        (raw,) = post(Transport(HEADERS, timeout=5), srv.url + "/chat/completions")
    assert raw.status == 200 and len(proxy.seen) == 1


def test_no_proxy_bypasses_the_proxy(proxy: ForwardProxy, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    with FaultServer(ok) as srv:
        (raw,) = post(Transport(HEADERS, timeout=5), srv.url + "/chat/completions")
    assert raw.status == 200 and srv.requests == 1 and proxy.seen == []


def test_netrc_credentials_for_an_endpoint_without_a_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login bob password hunter2\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)
    request = ModelRequest(messages=[Message(role="user", content="hi")])
    with FaultServer(ok) as srv:
        asyncio.run(OpenAIModel("m", base_url=srv.url).request(request))  # no key: .netrc's
        asyncio.run(OpenAIModel("m", base_url=srv.url, api_key="sk-real").request(request))  # the key
    assert [h["authorization"] for h in srv.headers] == ["Basic Ym9iOmh1bnRlcjI=", "Bearer sk-real"]


def test_on_uvloop_as_in_rays_workers() -> None:
    """Ray's workers run on uvloop: keep-alive, a time-out and a looked-up name there."""
    import uvloop

    def handler(n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
        return Fate("hang") if body.get("hang") else Fate(content="ok")

    async def main(url: str) -> None:
        assert type(asyncio.get_running_loop()).__module__.startswith("uvloop")
        transport = Transport(HEADERS, timeout=0.5)
        assert [(await transport.post(url, b"{}")).status for _ in range(3)] == [200] * 3
        with pytest.raises(TransportError, match="timed out") as caught:
            await transport.post(url, b'{"hang": true}')
        assert caught.value.timeout
        assert (await transport.post(url.replace("127.0.0.1", "localhost"), b"{}")).status == 200
        # No aclose: the loop's shutdown closes the session, with no "Unclosed" warning.

    with FaultServer(handler) as srv, asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main(srv.url + "/chat/completions"))
    assert srv.requests == 5
