"""`moot run` and `moot bench` over `openai:` as a user runs them behind a proxy (issue 33).

The model server's host name, models.internal.test, resolves only through the test proxy
(tests/http_proxy.py): a command that got its answers went through the proxy. NO_PROXY
sends a 127.0.0.1 endpoint around it. A body that inflates past the transport's bound
fails the turn with the reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fault_server import Fate, FaultServer, schema_reply
from http_proxy import ForwardProxy, make_certificate, server_tls

HOST = "models.internal.test"


def answering(n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
    return (
        Fate(content=schema_reply(body)) if body.get("response_format") else Fate(content="The answer is 42.")
    )


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")
    }
    clean.pop("SSL_CERT_FILE", None)
    clean.pop("OPENAI_BASE_URL", None)
    return clean | {"NETRC": str(tmp_path / "no-netrc"), "OPENAI_API_KEY": "sk-test-key"}


@pytest.fixture
def proxy() -> Iterator[ForwardProxy]:
    with ForwardProxy({HOST: "127.0.0.1"}) as running:
        yield running


def moot(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "moot", *args], env=env, capture_output=True, text=True, timeout=180
    )


def run_and_bench(env: dict[str, str], base_url: str, out: Path) -> None:
    spec = f"openai:m?base_url={base_url}"
    done = moot(env, "run", "Should a small team write tests first?", "--model", spec, "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["usage"]["calls"] >= 3 and result["final_answer"], result
    done = moot(
        env, "bench", "--task", "arithmetic", "--methods", "single", "--n", "3", "--no-plots",
        "--model", spec, "--out", str(out), "--store", str(out / "runs.db"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    units = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(units) == 3 and all(u["rounds"][0][0]["text"] for u in units), units


def test_http_proxy_carries_run_and_bench(proxy: ForwardProxy, env: dict[str, str], tmp_path: Path) -> None:
    with FaultServer(answering, host=HOST) as srv:
        run_and_bench(env | {"HTTP_PROXY": proxy.url}, srv.url, tmp_path / "bench")
    assert srv.requests >= 6
    assert {method for method, _ in proxy.seen} == {"POST"} and len(proxy.seen) == srv.requests
    assert None in proxy.auth and not [a for a in proxy.auth if a]  # the API key never reached the proxy


def test_https_proxy_tunnels_run_and_bench(proxy: ForwardProxy, env: dict[str, str], tmp_path: Path) -> None:
    cert, key = make_certificate(tmp_path, HOST)
    with FaultServer(answering, tls=server_tls(cert, key), host=HOST) as srv:
        run_and_bench(env | {"HTTPS_PROXY": proxy.url, "SSL_CERT_FILE": str(cert)}, srv.url, tmp_path / "b")
    assert srv.requests >= 6
    assert {method for method, _ in proxy.seen} == {"CONNECT"}
    assert {target for _, target in proxy.seen} == {f"{HOST}:{srv.port}"}


def test_no_proxy_goes_around_it(proxy: ForwardProxy, env: dict[str, str], tmp_path: Path) -> None:
    with FaultServer(answering) as srv:  # 127.0.0.1
        run_and_bench(env | {"HTTP_PROXY": proxy.url, "NO_PROXY": "127.0.0.1"}, srv.url, tmp_path / "bench")
    assert srv.requests >= 6 and proxy.seen == []


def test_a_body_inflating_past_the_bound_fails_the_turn_with_the_reason(env: dict[str, str]) -> None:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = b"".join(packer.compress(bytes(1 << 20)) for _ in range(64)) + packer.flush()  # 64 MiB of zeros
    fate = Fate("status", status=200, payload=bomb, headers={"Content-Encoding": "gzip"})
    with FaultServer(lambda n, b, h: fate) as srv:
        done = moot(env, "run", "Is tea good?", "--model", f"openai:m?base_url={srv.url}", "--json")
    assert done.returncode == 1, done.stderr  # a degraded run
    assert "longer than 33,554,432 bytes once decoded (gzip)" in done.stdout + done.stderr
