"""A real HTTP forward proxy on 127.0.0.1 for the tests: CONNECT tunnels and absolute-URI requests.

Host names in ``hosts`` (made-up ones, ``models.internal.test``) resolve only here, to
127.0.0.1, so a client that reaches such a host went through the proxy. The proxy records
what it was asked (``seen``: method and target) and the ``Proxy-Authorization`` headers it
got; it stops with its context manager, or by itself after ``max_seconds``.
"""

from __future__ import annotations

import http.client
import select
import shutil
import socket
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

__all__ = ["ForwardProxy", "make_certificate", "server_tls"]

_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-connection",
    "transfer-encoding",
    "te",
}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # bursts of new connections must not stall (FIELD-NOTES)
    proxy: ForwardProxy


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive to the client
    server: _Server

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's name
        pass

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _where(self, host: str, port: int) -> tuple[str, int]:
        proxy = self.server.proxy
        with proxy.lock:
            proxy.seen.append((self.command, self.path))
            proxy.auth.append(self.headers.get("Proxy-Authorization"))
        return proxy.hosts.get(host, host), port

    def do_CONNECT(self) -> None:  # noqa: N802 - http.server's name
        host, _, port = self.path.rpartition(":")
        try:
            upstream = socket.create_connection(self._where(host, int(port)), timeout=10)
        except OSError as err:
            self.send_error(502, f"cannot reach {self.path}: {err}")
            return
        self.send_response(200, "Connection established")
        self.end_headers()
        self.close_connection = True
        with upstream:
            _pipe(self.connection, upstream)

    def _forward(self) -> None:
        parts = urlsplit(self.path)
        if not parts.hostname:  # not a proxy request
            self.send_error(400, "a proxy needs an absolute URI")
            return
        host, port = self._where(parts.hostname, parts.port or 80)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        upstream = http.client.HTTPConnection(host, port, timeout=30)
        try:
            upstream.request(self.command, path, body=body, headers=headers)
            answer = upstream.getresponse()
            data = answer.read()
        except OSError as err:
            self.send_error(502, f"cannot reach {parts.netloc}: {err}")
            return
        finally:
            upstream.close()
        self.send_response(answer.status, answer.reason)
        for name, value in answer.getheaders():
            if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_POST = _forward  # noqa: N815 - http.server's name
    do_GET = _forward  # noqa: N815


def _pipe(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways until either side closes."""
    sockets = [a, b]
    while True:
        ready, _, broken = select.select(sockets, [], sockets, 30)
        if broken or not ready:
            return
        for sock in ready:
            try:
                data = sock.recv(65536)
            except OSError:
                return
            if not data:
                return
            (b if sock is a else a).sendall(data)


class ForwardProxy:
    """The proxy; use as a context manager, then set ``HTTP(S)_PROXY`` to :attr:`url`.

    Args:
        hosts: made-up host names and the address each stands for.
        max_seconds: the proxy stops by itself after this long.
    """

    def __init__(self, hosts: dict[str, str], max_seconds: float = 300.0) -> None:
        self.hosts = hosts
        self.seen: list[tuple[str, str]] = []
        """(method, target) of every request the proxy was asked to forward or tunnel."""
        self.auth: list[str | None] = []
        """The Proxy-Authorization header of each of them."""
        self.lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.proxy = self
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._timer = threading.Timer(max_seconds, self._server.shutdown)
        self._timer.daemon = True

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ForwardProxy:
        self._thread.start()
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


def make_certificate(folder: Path, *names: str) -> tuple[Path, Path]:
    """A self-signed certificate (and its key) for 127.0.0.1 and the DNS ``names``, made with openssl."""
    if shutil.which("openssl") is None:
        raise RuntimeError("openssl is needed to make a test certificate (Debian package openssl)")
    cert, key = folder / "cert.pem", folder / "key.pem"
    alt = ",".join(["IP:127.0.0.1", *(f"DNS:{n}" for n in names)])
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=moot-test",
         "-addext", f"subjectAltName={alt}", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def server_tls(cert: Path, key: Path) -> ssl.SSLContext:
    """The server side of a TLS endpoint with ``cert``."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context
