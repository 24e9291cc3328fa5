"""A model spec moot does not fully read is one usage error naming the part, and nothing is sent.

``openai:M@http://box/v1`` was once read as the model ``M@http://box/v1`` at OpenAI's own endpoint:
the prompt and the key went to a third party. Now the ``@`` replica form is read (``MODEL@URL,URL``,
as ``?endpoints=URL,URL``) and every other part a spec cannot hold is refused before any backend
exists. The CLI test watches every connection and every host-name lookup of the process.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fault_server import Fate, FaultServer, schema_reply
from moot import models
from moot.cli import main
from moot.errors import UsageError
from moot.models import base, resolve_model
from moot.models import openai as openai_backend
from moot.models.openai import OpenAIModel

UNRESOLVABLE = "http://moot-default-host.invalid/v1"


class Listener:
    """A TCP port on 127.0.0.1 that counts the connections it accepts (and answers none)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


@pytest.fixture
def watched(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """Real requests allowed, OpenAI's endpoint unresolvable, every connect and lookup recorded."""
    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)
    monkeypatch.setattr(openai_backend, "DEFAULT_BASE_URL", UNRESOLVABLE)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-for-a-third-party")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-not-for-anyone")
    seen: dict[str, Any] = {"connects": [], "lookups": []}
    connect, connect_ex = socket.socket.connect, socket.socket.connect_ex

    def record_connect(sock: socket.socket, address: Any) -> None:
        seen["connects"].append(address)
        connect(sock, address)

    def record_connect_ex(sock: socket.socket, address: Any) -> int:
        seen["connects"].append(address)
        return connect_ex(sock, address)

    def no_lookup(host: Any, *args: Any, **kwargs: Any) -> Any:
        seen["lookups"].append(host)
        raise socket.gaierror(socket.EAI_NONAME, f"{host}: unresolvable in this test")

    monkeypatch.setattr(socket.socket, "connect", record_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", record_connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", no_lookup)
    listener = Listener()
    seen["listener"] = listener
    seen["url"] = f"http://127.0.0.1:{listener.port}/v1"
    try:
        yield seen
    finally:
        listener.close()
        for spec in [s for s in models._CACHE if s.startswith(("openai", "anthropic"))]:
            models._CACHE.pop(spec, None)


def _bad_specs(url: str) -> list[tuple[str, str]]:
    """(spec, a part of the one error line that names what moot did not read)."""
    hostport = url.removeprefix("http://")
    return [
        (f"openai:stub@{hostport}", "no scheme"),
        (f"openai:stub@ftp://{hostport}", "scheme 'ftp'"),
        (f"openai:stub@{url},", "stray ','"),
        (f"openai:stub@{url},,{url}", "stray ','"),
        (f"openai:stub@{url}#frag", "fragment"),
        (f"openai:stub@{url.replace('//', '//user:pw@')}", "user name and password"),
        ("openai:stub@http://127.0.0.1:99999/v1", "port"),
        (f"openai:stub@{url},{url}", "listed twice"),
        (f"openai:@{url}", "no model name before '@'"),
        ("openai:stub@", "no endpoint after"),
        (f"openai:stub@{url}?base_url={url}", "not both"),
        (f"openai:stub?base_url={url}&endpoints={url}", "not both"),
        (f"openai:stub?base_url={url}&bogus=1", "unknown model option 'bogus'"),
        (f"openai:stub?base_url={url}&timeout=5&timeout=6", "'timeout' given twice"),
        ("openai:stub?base_url=", "'base_url' has no value"),
        (f"openai:stub?base_url={url}&", "empty option"),
        (f"openai:stub?base_url={url}&timeout", "'timeout'"),
        ("openai:stub?", "'?' with no option"),
        (f"openai:stub?base_url= {url}", "' '"),
        (f"openai:stub&base_url={url}", "holds '&'"),
        (f"openai:{url}", "holds a URL"),
        (f"openai:st ub@{url}", "holds ' '"),
        (f"openai:stub\u202e@{url}", "holds '\\u202e'"),
        (f"openai:stub?base_url={url}&api_key_env=1X", "environment variable"),
        (f"openai :stub@{url}", "unknown model provider 'openai '"),
        (f"anthropic:claude@{url}", "openai: specs only"),
        ("anthropic:claude@20240620", "holds '@'"),
        (f"anthropic:claude?base_url={url}", "unknown model option 'base_url'"),
        (f"local:{url}/m.gguf", "is a URL"),
        (f"local:m.gguf?n_ctx=512&base_url={url}", "unknown model option 'base_url'"),
        (f"test:schema?base_url={url}", "unknown test model"),
        (f"langchain:stub@{url}", "unknown model provider 'langchain'"),
    ]


def test_every_unread_part_is_a_usage_error_naming_it() -> None:
    for spec, named in _bad_specs("http://127.0.0.1:9/v1"):
        with pytest.raises(UsageError) as info:
            resolve_model(spec)
        assert named in str(info.value), (spec, str(info.value))
        assert spec not in models._CACHE


def test_a_bad_spec_at_the_cli_is_one_line_exit_2_and_no_connection_anywhere(
    watched: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = tmp_path / "runs.db"
    monkeypatch.setenv("MOOT_STORE", str(store))
    url = watched["url"]
    for spec, named in _bad_specs(url):
        bench = ["bench", "--n", "1", "--methods", "single", "--no-plots", "--out", str(tmp_path / "b")]
        for args in (
            ["run", "Is x?", "--model", spec],
            ["absa", "The food was great.", "--model", spec],
            [*bench, "--model", spec],
        ):
            assert main(args) == 2, args
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and err[0].startswith("moot: error:"), (args, err)
            assert named in err[0], (args, err)
    # A persona's model written as a mapping, with a key that is no option: named, nothing sent.
    config = tmp_path / "routed.yaml"
    config.write_text(
        f"extends: answer\npersonas:\n  critical:\n    model: {{spec: 'openai:m', base: '{url}'}}\n"
    )
    assert main(["run", "Is x?", "--config", str(config), "--model", f"openai:m@{url}"]) == 2
    assert "unknown model option 'base'" in capsys.readouterr().err
    # $OPENAI_BASE_URL is read as strictly as a spec.
    monkeypatch.setenv("OPENAI_BASE_URL", url.removeprefix("http://"))
    assert main(["run", "Is x?", "--model", "openai:stub"]) == 2
    assert "no scheme" in capsys.readouterr().err
    assert watched["connects"] == [] and watched["lookups"] == [] and watched["listener"].accepted == 0
    assert not store.exists() and not (tmp_path / "b").exists()  # nothing written


def _ok(n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
    return Fate("ok", content=schema_reply(body))


def test_the_replica_form_sends_where_it_says_and_nowhere_else(
    watched: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    with FaultServer(_ok) as a, FaultServer(_ok) as b:
        spec = f"openai:stub@{a.url},{b.url}/?max_per_endpoint=2"
        model = resolve_model(spec)
        assert isinstance(model, OpenAIModel)
        assert (model.model, model.endpoints) == ("stub", [a.url, b.url])
        same = OpenAIModel.from_spec(f"stub?endpoints={a.url},{b.url}/&max_per_endpoint=2")
        assert (same.model, same.endpoints, same.pool.max_per_replica) == ("stub", [a.url, b.url], 2)
        assert main(["run", "Is x?", "--model", spec, "--json"]) == 0
        capsys.readouterr()
        assert a.requests > 0 and b.requests > 0
        assert {body["model"] for body in a.bodies + b.bodies} == {"stub"}
    ports = {address[1] for address in watched["connects"]}
    assert ports == {a.port, b.port}, watched["connects"]
    assert watched["lookups"] == [] and watched["listener"].accepted == 0


def test_a_recorded_endpoint_with_its_own_query_reads_back_as_one_option() -> None:
    from moot.app.rerun import recorded_endpoints

    endpoint = "http://127.0.0.1:9/v1?api-version=1&deployment=d"
    recorded = {"models": {"critical": {"spec": "openai:m", "endpoint": endpoint}}}
    spec = recorded_endpoints(recorded)["critical"]
    model = OpenAIModel.from_spec(spec.removeprefix("openai:"))
    assert (model.model, model.endpoints) == ("m", [endpoint])
