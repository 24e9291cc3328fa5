"""Replicas: several endpoints for one model (moot.models.replicas), over real sockets where it matters."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from typing import Any

import pytest

from fault_server import Fate, FaultServer, free_port
from moot.errors import ModelConnectionError, UsageError
from moot.models import base
from moot.models._spec import spec_from_mapping
from moot.models.base import _CURRENT_STATS, CallStats, Message, ModelRequest
from moot.models.openai import OpenAIModel
from moot.models.replicas import ReplicaPool, split_endpoints
from moot.models.retry import RetryPolicy, call_model
from moot.models.transport import RawResponse, TransportError

PLAIN = ModelRequest(messages=[Message(role="user", content="hi")])


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MOOT_OPENAI_HTTP"):
        monkeypatch.delenv(var, raising=False)


class FakeTransport:
    """Answers after ``delay`` seconds; URLs in ``dead`` refuse; records concurrency per URL.

    With ``drop_first`` the first request is dropped after it was sent (a server that died).
    """

    def __init__(self, delay: float = 0.01, dead: set[str] | None = None, drop_first: bool = False) -> None:
        self.delay = delay
        self.dead = dead or set()
        self.drop_first = drop_first
        self.in_flight: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()
        self.calls: list[str] = []

    async def post(self, url: str, body: bytes) -> RawResponse:
        self.calls.append(url)
        if any(url.startswith(d) for d in self.dead):
            raise TransportError(f"cannot connect to {url}", connect=True)
        self.in_flight[url] += 1
        self.peak[url] = max(self.peak[url], self.in_flight[url])
        try:
            await asyncio.sleep(self.delay)
            if self.drop_first and len(self.calls) == 1:
                raise TransportError(f"request to {url} failed: ServerDisconnectedError")
            return RawResponse(200, {}, url.encode())
        finally:
            self.in_flight[url] -= 1


URLS = ["http://a/v1", "http://b/v1", "http://c/v1"]


class TestPool:
    def test_split_endpoints(self) -> None:
        assert split_endpoints(" http://a/v1/, http://b/v1 ,") == ["http://a/v1", "http://b/v1"]
        assert split_endpoints(["http://a/v1"]) == ["http://a/v1"]
        with pytest.raises(UsageError, match="listed twice"):
            split_endpoints("http://a/v1,http://a/v1/")
        with pytest.raises(UsageError, match="no endpoint"):
            split_endpoints(" , ")

    def test_least_in_flight_spreads_the_load_evenly(self) -> None:
        pool = ReplicaPool(URLS, "/chat/completions")
        transport = FakeTransport()

        async def go() -> list[RawResponse]:
            return await asyncio.gather(*(pool.post(transport, b"{}") for _ in range(30)))  # type: ignore[arg-type]

        asyncio.run(go())
        assert Counter(transport.calls) == {u + "/chat/completions": 10 for u in URLS}
        assert [r["in_flight"] for r in pool.stats()] == [0, 0, 0]

    def test_a_slow_replica_gets_fewer_requests(self) -> None:
        pool = ReplicaPool(URLS[:2], "/chat/completions")

        class Skewed(FakeTransport):
            async def post(self, url: str, body: bytes) -> RawResponse:
                self.delay = 0.05 if "//a/" in url else 0.005
                return await super().post(url, body)

        transport = Skewed()

        async def go() -> None:
            gate = asyncio.Semaphore(4)

            async def one() -> None:
                async with gate:
                    await pool.post(transport, b"{}")  # type: ignore[arg-type]

            await asyncio.gather(*(one() for _ in range(60)))

        asyncio.run(go())
        sent = {r["url"]: r["sent"] for r in pool.stats()}
        assert sent["http://b/v1"] > 2 * sent["http://a/v1"]

    def test_per_replica_cap_is_never_exceeded(self) -> None:
        pool = ReplicaPool(URLS, "/chat/completions", max_per_replica=2)
        transport = FakeTransport(delay=0.02)

        async def go() -> None:
            await asyncio.gather(*(pool.post(transport, b"{}") for _ in range(40)))  # type: ignore[arg-type]

        asyncio.run(go())
        assert max(transport.peak.values()) == 2
        assert sum(Counter(transport.calls).values()) == 40

    def test_refusing_replica_is_skipped_for_its_backoff(self) -> None:
        now = [100.0]
        pool = ReplicaPool(URLS, "/chat/completions", backoff=1.0, clock=lambda: now[0])
        transport = FakeTransport(delay=0, dead={"http://b/"})

        async def send(n: int) -> list[RawResponse]:
            return [await pool.post(transport, b"{}") for _ in range(n)]  # type: ignore[arg-type]

        replies = asyncio.run(send(6))
        assert all(r.status == 200 and b"//b/" not in r.body for r in replies)
        assert transport.calls.count("http://b/v1/chat/completions") == 1  # refused once, then left alone
        assert [r["down"] for r in pool.stats()] == [False, True, False]
        now[0] += 1.5  # the backoff is over: b is probed again, refuses again, now for 2 s
        asyncio.run(send(3))
        assert transport.calls.count("http://b/v1/chat/completions") == 2
        assert pool.replicas[1].down_until == pytest.approx(now[0] + 2.0)

    def test_every_replica_refusing_is_a_connect_error(self) -> None:
        pool = ReplicaPool(URLS, "/chat/completions")
        transport = FakeTransport(dead={"http://"})
        with pytest.raises(TransportError, match="all 3 endpoint") as info:
            asyncio.run(pool.post(transport, b"{}"))  # type: ignore[arg-type]
        assert info.value.connect
        assert len(transport.calls) == 3  # each tried exactly once

    def test_a_dropped_request_is_resent_elsewhere_and_counted(self) -> None:
        pool = ReplicaPool(URLS[:2], "/chat/completions")
        transport = FakeTransport(delay=0, drop_first=True)
        stats = CallStats()

        async def go() -> RawResponse:
            token = _CURRENT_STATS.set(stats)  # what call_model does around model.request
            try:
                return await pool.post(transport, b"{}")  # type: ignore[arg-type]
            finally:
                _CURRENT_STATS.reset(token)

        reply = asyncio.run(go())
        first, second = transport.calls
        assert first != second and reply.body == second.encode()
        assert stats.usage.attempts == 1  # the dropped request may be in the first server's log
        assert sum(r["down"] for r in pool.stats()) == 1


class TestConfiguration:
    def test_comma_separated_base_url_from_env(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("OPENAI_BASE_URL", "http://a:1/v1,http://b:2/v1/")
        model = OpenAIModel.from_spec("m")
        assert model.endpoints == ["http://a:1/v1", "http://b:2/v1"]
        assert model.base_url == "http://a:1/v1"

    def test_spec_options(self) -> None:
        model = OpenAIModel.from_spec("m?endpoints=http://a:1/v1,http://b:2/v1&max_per_endpoint=8")
        assert (model.endpoints, model.pool.max_per_replica) == (["http://a:1/v1", "http://b:2/v1"], 8)
        with pytest.raises(UsageError, match="max_per_endpoint"):
            OpenAIModel.from_spec("m?endpoints=http://a:1/v1&max_per_endpoint=0")
        with pytest.raises(UsageError, match="not both"):
            OpenAIModel.from_spec("m?endpoints=http://a:1/v1&base_url=http://b:1/v1")

    def test_config_endpoints_list(self) -> None:
        spec = spec_from_mapping({"spec": "openai:m", "endpoints": ["http://a:1/v1", "http://b:2/v1"]})
        from moot.models import _PROVIDERS, _load_factory

        model = _load_factory(_PROVIDERS["openai"])(spec.split(":", 1)[1])
        assert isinstance(model, OpenAIModel)
        assert model.endpoints == ["http://a:1/v1", "http://b:2/v1"]
        with pytest.raises(ValueError, match="non-empty list"):
            spec_from_mapping({"spec": "openai:m", "endpoints": []})

    def test_several_endpoints_need_the_aiohttp_stack(self) -> None:
        with pytest.raises(UsageError, match="aiohttp HTTP stack"):
            OpenAIModel("m", base_url="http://a:1/v1,http://b:2/v1", http="sdk")


def test_one_replica_dies_mid_run_and_nothing_is_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three real servers; one is killed while requests are in flight. Every request still succeeds,
    with no retry from call_model: the pool re-sends what the dead server dropped or refused."""
    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)

    def slow(n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
        return Fate(content=json.dumps({"n": n}), delay=0.05)

    servers = [FaultServer(slow).__enter__() for _ in range(3)]
    victim = servers[1]
    try:
        model = OpenAIModel(
            "m", base_url=",".join(s.url for s in servers), max_concurrency=1000, max_per_endpoint=5
        )

        stats = [CallStats() for _ in range(90)]

        async def go() -> list[str]:
            async def one(i: int) -> str:
                reply = await call_model(model, PLAIN, RetryPolicy(max_retries=0), stats=stats[i])
                return reply.text

            tasks = [asyncio.create_task(one(i)) for i in range(90)]
            # Killed once it has read a few requests (answered some, holds others in flight). A
            # fixed 0.12 s was too short in a loaded full-suite run: the victim had read none.
            deadline = time.monotonic() + 10
            while victim.requests < 3 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            await asyncio.to_thread(victim.__exit__, None, None, None)
            try:
                return await asyncio.gather(*tasks)
            finally:
                await model.aclose()

        texts = asyncio.run(go())
    finally:
        for server in servers:
            if server is not victim:
                server.__exit__(None, None, None)
    assert len(texts) == 90 and all(json.loads(t)["n"] >= 0 for t in texts)
    pool = model.pool.stats()
    assert pool[1]["down"] and all(r["in_flight"] == 0 for r in pool)
    assert victim.requests > 0
    # Usage reconciles with the servers' logs: every request a server read is an attempt; the only
    # slack is a request the victim dropped before reading it whole (at most its cap of 5 in flight).
    received = sum(s.requests for s in servers)
    attempts = sum(s.usage.attempts for s in stats)
    assert received >= 90 and received <= attempts <= received + 5
    assert sum(s.usage.calls for s in stats) == 90


def test_all_endpoints_down_is_a_retryable_connection_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)
    urls = ",".join(f"http://127.0.0.1:{free_port()}/v1" for _ in range(2))
    model = OpenAIModel("m", base_url=urls)

    async def go() -> None:
        try:
            await model.request(PLAIN)
        finally:
            await model.aclose()

    with pytest.raises(ModelConnectionError, match="all 2 endpoint") as info:
        asyncio.run(go())
    assert info.value.retryable
