"""``moot serve`` and ``moot mcp`` end to end: a real server process, a real local model server (issue 36).

The upstream is :class:`fault_server.FaultServer` on 127.0.0.1, which counts every request and the
tokens it reported; ``moot serve`` runs as a subprocess on port 0 with a token and a store of its
own. The official ``openai`` client and the official ``mcp`` client talk to it.
"""

from __future__ import annotations

import asyncio
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from fault_server import Fate, FaultServer, schema_reply
from moot.runs import RunStore

pytest.importorskip("mcp")
pytest.importorskip("fastapi")

SRC = str(Path(__file__).resolve().parents[1] / "src")
INPUTS = Path(__file__).resolve().parents[1] / "examples" / "inputs"
TOKEN = "t0ken-for-the-serve-tests-0123456789"
PROMPT_TOKENS = 10  # FaultServer's usage: 10 prompt tokens, one completion token per word


@dataclass
class Upstream:
    """The local model server and what it counted, per request."""

    server: FaultServer
    counted: list[tuple[str, int, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def tokens_for(self, marker: str) -> tuple[int, int, int]:
        """(requests, prompt tokens, completion tokens) the server answered for bodies holding ``marker``."""
        with self.lock:
            rows = [(p, c) for body, p, c in self.counted if marker in body]
        return len(rows), sum(p for p, _ in rows), sum(c for _, c in rows)


def _handler(up: Upstream) -> Any:
    def handle(n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
        text = json.dumps(body)
        content = schema_reply(body)
        with up.lock:
            up.counted.append((text, PROMPT_TOKENS, len(content.split())))
        delay = 5.0 if "SLOW" in text else 1.0 if "LONGLOAD" in text else 0.3 if "LOAD" in text else 0.02
        return Fate(content=content, delay=delay)

    return handle


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    up = Upstream(server=None)  # type: ignore[arg-type]
    with FaultServer(_handler(up)) as srv:
        up.server = srv
        yield up


@dataclass
class Served:
    proc: subprocess.Popen[str]
    url: str
    store: Path
    reader: threading.Thread

    def runs(self) -> list[Any]:
        with RunStore(self.store) as store:
            return store.list(limit=10_000)

    def client(self, **kw: Any) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url, api_key=kw.pop("api_key", TOKEN), max_retries=0, **kw)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.reader.join(5)
        if self.proc.stderr is not None:
            self.proc.stderr.close()


def _env(up: Upstream) -> dict[str, str]:
    return dict(
        os.environ,
        PYTHONPATH=SRC,
        OPENAI_API_KEY="sk-test",
        OPENAI_BASE_URL=up.server.url,
        NO_PROXY="127.0.0.1,localhost",
    )


def start_serve(tmp: Path, up: Upstream, *args: str) -> Served:
    store = tmp / "runs.db"
    cmd = [sys.executable, "-m", "moot", "serve", "--port", "0", "--store", str(store), "--token", TOKEN]
    cmd += ["--model", "openai:fake", *args]
    proc = subprocess.Popen(cmd, env=_env(up), stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    deadline = time.monotonic() + 30
    line = ""
    # selectors (epoll here), not select.select: a long test session may hold descriptors past 1024.
    with selectors.DefaultSelector() as watch:
        watch.register(proc.stderr, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if watch.select(0.2):
                line = proc.stderr.readline()
                if line.startswith("moot serve: http"):
                    break
            if proc.poll() is not None:
                raise AssertionError(f"moot serve exited {proc.returncode}: {line}{proc.stderr.read()}")
        else:
            proc.kill()
            raise AssertionError("moot serve did not start")
    # Drain stderr in the background: a full pipe would block the server.
    reader = threading.Thread(target=lambda: proc.stderr.read() if proc.stderr else None, daemon=True)
    reader.start()
    return Served(proc, line.split()[2], store, reader)


@pytest.fixture(scope="module")
def served(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("serve")
    (tmp / "hasty.yaml").write_text("extends: answer\ntimeout: 0.5\n", encoding="utf-8")
    s = start_serve(tmp, upstream, "--max-debates", "10", "--protocol", str(tmp / "hasty.yaml"))
    yield s
    s.stop()


def _finished(served: Served, run_id: str, timeout_s: float = 5.0) -> Any:
    """The stored run once it has ended (the recorder commits a moment after the answer)."""
    end = time.monotonic() + timeout_s
    while True:
        run = next((r for r in served.runs() if r.id == run_id), None)
        if run is not None and run.status != "running":
            return run
        if time.monotonic() > end:
            raise AssertionError(f"run {run_id} not finished: {run}")
        time.sleep(0.05)


# -- the OpenAI client --------------------------------------------------------------------------------
def test_openai_client_non_streaming(served: Served, upstream: Upstream) -> None:
    marker = "MARK-nonstream-1"
    reply = served.client().chat.completions.create(
        model="moot:answer@openai:fake",
        messages=[
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "What came before?"},
            {"role": "assistant", "content": "Nothing."},
            {"role": "user", "content": f"Is tea healthy? {marker}"},
        ],
        temperature=0.3,
        user="alice",
        extra_body={"an_unknown_field": [1, 2]},  # ignored, as OpenAI's servers do
    )
    assert reply.object == "chat.completion"
    assert reply.choices[0].message.content
    calls, prompt, completion = upstream.tokens_for(marker)
    assert calls == 5  # the answer preset: 2 speakers x 2 rounds + the synthesizer
    assert reply.usage is not None
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (prompt, completion)
    moot = reply.model_extra["moot"]  # type: ignore[index]
    assert moot["status"] == "complete" and moot["fallback"] is None
    assert moot["view_url"].endswith(f"/runs/{moot['run_id']}")
    run = _finished(served, moot["run_id"])
    assert run.status == "complete" and run.kind == "run"
    assert (run.usage.prompt_tokens, run.usage.completion_tokens) == (prompt, completion)
    assert run.config["door"] == "serve" and run.config["user"] == "alice"
    assert run.config["served_model"] == "moot:answer@openai:fake"
    assert run.config["protocol"]["temperature"] == 0.3
    assert run.config["context"][0] == {"role": "system", "content": "Answer briefly."}
    assert len(run.config["context"]) == 3  # system, user, assistant: all but the topic
    # What a user types shows it too.
    out = subprocess.run(
        [sys.executable, "-m", "moot", "runs", "list", "--json", "--store", str(served.store)],
        env=dict(os.environ, PYTHONPATH=SRC),
        capture_output=True,
        text=True,
        check=True,
    )
    listed = {r["id"]: r for r in json.loads(out.stdout)["runs"]}
    assert listed[moot["run_id"]]["usage"]["prompt_tokens"] == prompt


def test_openai_client_streaming(served: Served, upstream: Upstream) -> None:
    marker = "MARK-stream-1"
    stream = served.client().chat.completions.create(
        model="moot:answer@openai:fake",
        messages=[{"role": "user", "content": f"Should I learn Rust? {marker}"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    order: list[str] = []
    reasoning: list[str] = []
    content = ""
    usage = None
    moot: dict[str, Any] = {}
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            extra = choice.delta.model_extra or {}
            if extra.get("reasoning_content"):
                order.append("reasoning")
                reasoning.append(extra["reasoning_content"])
            if choice.delta.content:
                order.append("content")
                content += choice.delta.content
        moot = (chunk.model_extra or {}).get("moot") or moot
    assert order.count("reasoning") == 4 and order[-1] == "content"  # every turn, then the answer
    assert "round 1" in reasoning[0] and "round 2" in reasoning[-1]
    calls, prompt, completion = upstream.tokens_for(marker)
    assert calls == 5
    assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (prompt, completion)
    run = _finished(served, moot["run_id"])
    assert run.status == "complete"
    assert (run.usage.prompt_tokens, run.usage.completion_tokens) == (prompt, completion)
    assert content.strip()


def test_models_lists_the_presets(served: Served) -> None:
    ids = {m.id for m in served.client().models.list()}
    assert {"moot:answer", "moot:adversarial", "moot:panel"} <= ids


def test_bad_input_is_an_openai_error_and_runs_nothing(served: Served, upstream: Upstream) -> None:
    before_calls, before_runs = upstream.server.requests, len(served.runs())
    client = served.client()
    msgs = [{"role": "user", "content": "hello"}]
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="moot:no-such-preset", messages=msgs)
    assert "unknown preset 'no-such-preset'" in err.value.message and "moot:answer" in err.value.message
    with pytest.raises(openai.BadRequestError, match="messages is empty"):
        client.chat.completions.create(model="moot:answer", messages=[])
    with pytest.raises(openai.BadRequestError, match="carries options"):
        client.chat.completions.create(
            model="moot:answer@openai:x?base_url=http://10.0.0.1/v1", messages=msgs
        )
    with pytest.raises(openai.BadRequestError, match="over 1048576 bytes"):
        client.chat.completions.create(
            model="moot:answer", messages=[{"role": "user", "content": "x" * 1_100_000}]
        )
    with pytest.raises(openai.BadRequestError, match="n: Input should be less than or equal to 1"):
        client.chat.completions.create(model="moot:answer", messages=msgs, n=2)
    with pytest.raises(openai.BadRequestError, match="temperature"):
        client.chat.completions.create(model="moot:answer", messages=msgs, temperature="hot")  # type: ignore[arg-type]
    with pytest.raises(openai.AuthenticationError, match="a wrong token"):
        served.client(api_key="wrong-token-wrong-token").chat.completions.create(
            model="moot:answer", messages=msgs
        )
    raw = httpx.post(f"{served.url}/chat/completions", json={"model": "moot:answer", "messages": msgs})
    assert raw.status_code == 401 and raw.json()["error"]["type"] == "authentication_error"
    raw = httpx.post(
        f"{served.url}/chat/completions",
        content=b"{not json",
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    assert raw.status_code == 400 and set(raw.json()["error"]) == {"message", "type", "param", "code"}
    assert upstream.server.requests == before_calls and len(served.runs()) == before_runs


def test_deadline_is_a_504_with_the_fallback(served: Served) -> None:
    """A protocol file given to the server (moot:hasty, 0.5 s) against 1 s calls: past its deadline."""
    assert "moot:hasty" in {m.id for m in served.client().models.list()}
    raw = httpx.post(
        f"{served.url}/chat/completions",
        json={"model": "moot:hasty", "messages": [{"role": "user", "content": "Too slow? LONGLOAD"}]},
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=30,
    )
    assert raw.status_code == 504, raw.text
    body = raw.json()
    assert body["error"]["type"] == "timeout" and "deadline" in body["error"]["message"]
    assert body["moot"]["fallback"].startswith("timeout") and body["moot"]["run_id"]
    assert _finished(served, body["moot"]["run_id"]).status == "fell_back"


def test_cli_refuses_bad_options(tmp_path: Path) -> None:
    from moot.cli import main

    assert main(["serve", "--host", "0.0.0.0", "--store", str(tmp_path / "r.db")]) == 2  # no --token
    bad = tmp_path / "bad.yaml"
    bad.write_text("rounds: [\n", encoding="utf-8")
    assert main(["serve", "--protocol", str(bad), "--store", str(tmp_path / "r.db")]) == 2
    assert main(["serve", "--model", "nosuchprovider:x", "--store", str(tmp_path / "r.db")]) == 2
    assert not (tmp_path / "r.db").exists()


def test_served_names() -> None:
    from moot.errors import UsageError
    from moot.serve.service import check_caller_spec, parse_served_name

    assert parse_served_name("moot:answer") == ("answer", None)
    # The first @ only: the rest is the model spec, whole (its own parser judges it).
    assert parse_served_name("moot:adversarial@openai:gpt-4o-mini@x") == (
        "adversarial",
        "openai:gpt-4o-mini@x",
    )
    for bad in ("gpt-4o", "moot:", "moot:answer@", "moot:@openai:x"):
        with pytest.raises(UsageError):
            parse_served_name(bad)
    check_caller_spec("openai:gpt-4o-mini")
    check_caller_spec("local")
    for bad in ("openai:m?api_key_env=HOME&base_url=http://evil/v1", "local:/etc/passwd"):
        with pytest.raises(UsageError):
            check_caller_spec(bad)


def test_disconnect_mid_stream_cancels_the_debate(served: Served) -> None:
    body = {
        "model": "moot:answer",
        "messages": [{"role": "user", "content": "Which is best? SLOW"}],
        "stream": True,
    }
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(timeout=10) as http:
        with http.stream("POST", f"{served.url}/chat/completions", json=body, headers=headers) as resp:
            assert resp.status_code == 200
            lines = resp.iter_lines()  # kept: a dropped iterator closes the response
            assert next(lines).startswith("data: ")
            time.sleep(0.3)  # the debate's first turns are waiting on the slow upstream
            health = http.get(served.url.removesuffix("/v1") + "/health", headers=headers).json()
            assert health["in_flight"] == 1, (
                health,
                [(r.title, r.status, r.error) for r in served.runs()][:3],
            )
        left = time.monotonic()  # the response is closed: the connection is gone
    while True:
        runs = [r for r in served.runs() if r.title == "Which is best? SLOW"]
        if runs and runs[0].status != "running":
            break
        assert time.monotonic() - left < 1.0, "not cancelled within a second"
        time.sleep(0.02)
    assert runs[0].status == "interrupted"
    health = httpx.get(served.url.removesuffix("/v1") + "/health", headers=headers).json()
    assert health["in_flight"] == 0 and health["admitted"] == 0  # no task left running


def test_disconnect_while_waiting_for_a_completion_cancels_the_debate(served: Served) -> None:
    body = {"model": "moot:answer", "messages": [{"role": "user", "content": "Patience? SLOW"}]}
    with pytest.raises(httpx.ReadTimeout):  # the client gives up after 0.5 s and closes the connection
        httpx.post(
            f"{served.url}/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=0.5,
        )
    left = time.monotonic()
    while True:
        runs = [r for r in served.runs() if r.title == "Patience? SLOW"]
        if runs and runs[0].status != "running":
            break
        assert time.monotonic() - left < 1.0, "not cancelled within a second"
        time.sleep(0.02)
    assert runs[0].status == "interrupted"


# -- load, queue, SIGTERM -----------------------------------------------------------------------------
async def _fire(
    url: str, n: int, tag: str, timeout_s: float = 30, load: str = "LOAD"
) -> list[tuple[int, dict[str, Any], str]]:
    limits = httpx.Limits(max_connections=n + 10, max_keepalive_connections=n + 10)
    async with httpx.AsyncClient(timeout=timeout_s, limits=limits) as http:

        async def one(i: int) -> tuple[int, dict[str, Any], str]:
            body = {"model": "moot:answer", "messages": [{"role": "user", "content": f"{tag} {i} {load}"}]}
            try:
                r = await http.post(
                    f"{url}/chat/completions", json=body, headers={"Authorization": f"Bearer {TOKEN}"}
                )
            except httpx.TransportError as exc:  # the server went away (SIGTERM)
                return -1, {"error": str(exc)}, ""
            return r.status_code, r.json(), r.headers.get("retry-after", "")

        return await asyncio.gather(*(one(i) for i in range(n)))


def test_100_concurrent_against_max_debates_10(served: Served) -> None:
    answers = asyncio.run(_fire(served.url, 100, "load-a"))
    codes = [a[0] for a in answers]
    # 504: a debate past its deadline on a loaded machine; it answered with its fallback, recorded.
    assert set(codes) <= {200, 429, 504}, codes
    finished = [body["moot"]["run_id"] for code, body, _ in answers if code in (200, 504)]
    assert len(finished) >= 20  # 10 running + 10 queued at least
    for code, body, retry in answers:
        if code == 429:
            assert body["error"]["type"] == "rate_limit_error" and int(retry) >= 1
    time.sleep(0.3)
    runs = [r for r in served.runs() if r.title.startswith("load-a ")]
    assert sorted(r.id for r in runs) == sorted(set(finished))  # none lost, none twice, no 429 recorded
    assert {r.status for r in runs} <= {"complete", "fell_back"}


def test_sigterm_during_load_records_the_runs_in_flight(upstream: Upstream, tmp_path: Path) -> None:
    # Debates of 3 s (1 s a call); SIGTERM 1 s in; 0.5 s of grace: the debates in flight are cancelled.
    s = start_serve(tmp_path, upstream, "--max-debates", "10", "--queue", "5", "--shutdown-timeout", "0.5")
    try:

        async def scenario() -> list[tuple[int, dict[str, Any], str]]:
            fire = asyncio.create_task(_fire(s.url, 30, "load-b", load="LONGLOAD"))
            await asyncio.sleep(1.0)
            s.proc.send_signal(signal.SIGTERM)
            return await fire

        answers = asyncio.run(scenario())
        assert s.proc.wait(20) in (-signal.SIGTERM, 0)
    finally:
        s.stop()
    codes = [a[0] for a in answers]
    assert set(codes) <= {429, 503, -1}, codes  # refused, or cut off by the shutdown: none answered
    assert codes.count(429) >= 15  # at most 10 running + 5 queued were admitted
    runs = [r for r in s.runs() if r.title.startswith("load-b ")]
    assert len(runs) == len({r.title for r in runs}) == 10  # the debates in flight, each recorded once
    assert {r.status for r in runs} == {"interrupted"}  # none left "running"


def test_sigterm_with_grace_finishes_the_debates_in_flight(upstream: Upstream, tmp_path: Path) -> None:
    # Debates of ~1 s (0.3 s a call); SIGTERM 0.5 s in; 20 s of grace: they finish and answer.
    s = start_serve(tmp_path, upstream, "--max-debates", "5", "--queue", "3", "--shutdown-timeout", "20")
    try:

        async def scenario() -> list[tuple[int, dict[str, Any], str]]:
            fire = asyncio.create_task(_fire(s.url, 12, "load-c"))
            await asyncio.sleep(0.5)
            s.proc.send_signal(signal.SIGTERM)
            return await fire

        answers = asyncio.run(scenario())
        assert s.proc.wait(20) in (-signal.SIGTERM, 0)
    finally:
        s.stop()
    codes = [a[0] for a in answers]
    assert set(codes) <= {200, 429, 503, 504}, codes
    answered = {body["moot"]["run_id"] for code, body, _ in answers if code in (200, 504)}
    assert len(answered) >= 5  # the ones running at SIGTERM finished and were answered
    for code, body, retry in answers:
        if code == 503:  # queued at SIGTERM: not started, told to come back
            assert body["error"]["code"] == "shutting_down" and retry
    runs = [r for r in s.runs() if r.title.startswith("load-c ")]
    assert sorted(r.id for r in runs) == sorted(answered)  # each recorded once; nothing left running
    assert {r.status for r in runs} <= {"complete", "fell_back"}


# -- MCP -------------------------------------------------------------------------------------------
async def _mcp_session_checks(session: Any) -> None:
    await session.initialize()
    tools = {t.name: t for t in (await session.list_tools()).tools}
    assert {"debate", "arbitrate", "absa"} <= set(tools)
    progress: list[tuple[float, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, message))

    result = await session.call_tool(
        "debate", {"topic": "Is MCP useful? MARK-mcp", "preset": "answer"}, progress_callback=on_progress
    )
    assert not result.is_error, result.content
    data = result.structured_content
    assert data["final_answer"] and data["run_id"]
    assert "moot run" in result.content[0].text
    assert [p[0] for p in progress] == [1, 2, 3, 4]  # one per turn
    bad = await session.call_tool("debate", {"topic": "x", "preset": "nope"})
    assert bad.is_error and "unknown preset 'nope'" in bad.content[0].text
    bad = await session.call_tool("debate", {"topic": 42})
    assert bad.is_error and "topic" in bad.content[0].text


def test_mcp_over_streamable_http(served: Served) -> None:
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def main() -> None:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as http:
            url = served.url.removesuffix("/v1") + "/mcp"
            async with streamable_http_client(url, http_client=http) as streams:
                async with ClientSession(streams[0], streams[1]) as session:
                    await _mcp_session_checks(session)
                    reports = json.loads((INPUTS / "reports.json").read_text(encoding="utf-8"))
                    ruled = await session.call_tool("arbitrate", {"reports": reports})
                    assert not ruled.is_error, ruled.content
                    assert ruled.structured_content["run_id"] and "contradiction" in ruled.content[0].text
                    bad = await session.call_tool("arbitrate", {"reports": [{"no": "agent"}]})
                    assert bad.is_error and "invalid report" in bad.content[0].text
                    sentiment = await session.call_tool("absa", {"sentence": "The pasta was great."})
                    assert not sentiment.is_error, sentiment.content
                    assert sentiment.structured_content["label"] and sentiment.structured_content["run_id"]

    asyncio.run(main())
    kinds = {r.kind for r in served.runs() if r.config.get("tool") in ("arbitrate", "absa")}
    assert kinds == {"arbitrate", "absa"}
    runs = [r for r in served.runs() if r.title == "Is MCP useful? MARK-mcp"]
    assert len(runs) == 1 and runs[0].config["door"] == "serve" and runs[0].config["tool"] == "debate"


def test_mcp_over_stdio(upstream: Upstream, tmp_path: Path) -> None:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    store = tmp_path / "runs.db"
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "moot", "mcp", "--store", str(store), "--model", "openai:fake"],
        env=_env(upstream),
    )

    async def main() -> None:
        with open(tmp_path / "stderr.txt", "w") as errlog:
            async with stdio_client(params, errlog=errlog) as streams:
                async with ClientSession(streams[0], streams[1]) as session:
                    await _mcp_session_checks(session)

    asyncio.run(main())
    with RunStore(store) as opened:
        runs = opened.list()
    assert len(runs) == 1 and runs[0].config["door"] == "mcp" and runs[0].status == "complete"


def test_building_the_mcp_server_leaves_the_root_logger_alone(tmp_path: Path) -> None:
    import logging

    from moot.serve import DebateService, ServeSettings
    from moot.serve.mcp_tools import build_mcp

    root = logging.getLogger()
    before = (list(root.handlers), root.level)
    build_mcp(DebateService(ServeSettings(store=tmp_path / "runs.db")))
    assert (list(root.handlers), root.level) == before  # moot's warnings are said once (moot.cli._warnings)
