"""The response cache: keys, accounting, what is never cached, files that are not a cache."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from fault_server import Fate, FaultServer, schema_reply
from moot import Debate
from moot.errors import UsageError
from moot.models import Message, ModelRequest, ModelResponse, call_model
from moot.models.base import CallStats, Model
from moot.models.cache import CachedModel, ResponseCache, open_cache, parse_age
from moot.models.openai import OpenAIModel
from moot.models.testing import FunctionModel

pytestmark = pytest.mark.integration


def _counting() -> tuple[FunctionModel, list[ModelRequest]]:
    seen: list[ModelRequest] = []

    def fn(request: ModelRequest) -> str:
        seen.append(request)
        return f"reply {len(seen)}"

    return FunctionModel(fn), seen


def _req(text: str = "hi", **kw: Any) -> ModelRequest:
    return ModelRequest(messages=[Message(role="user", content=text)], **kw)


def _ask(model: Model, request: ModelRequest, stats: CallStats | None = None) -> ModelResponse:
    return asyncio.run(call_model(model, request, stats=stats))


def test_second_identical_request_is_served_from_the_cache_and_counted_as_cached(tmp_path: Path) -> None:
    inner, seen = _counting()
    cache = ResponseCache(tmp_path / "c.db")
    first = CachedModel(inner, cache)
    stats1 = CallStats()
    a = _ask(first, _req(temperature=0.7), stats1)
    # A new process (a new wrapper) asking the same gets the stored reply, without a request.
    second = CachedModel(inner, ResponseCache(tmp_path / "c.db"))
    stats2 = CallStats()
    b = _ask(second, _req(temperature=0.7), stats2)
    assert a.text == b.text == "reply 1"
    assert len(seen) == 1
    assert (stats1.usage.calls, stats1.usage.attempts, stats1.usage.cached) == (1, 1, 0)
    assert (stats2.usage.calls, stats2.usage.attempts, stats2.usage.cached) == (0, 0, 1)
    assert stats2.usage.total_tokens == 0


def test_each_generation_parameter_and_the_sample_index_are_part_of_the_key(tmp_path: Path) -> None:
    inner, seen = _counting()
    model = CachedModel(inner, ResponseCache(tmp_path / "c.db"))
    for request in (
        _req(),
        _req(temperature=1.0),
        _req(max_tokens=5),
        _req(seed=3),
        _req("other"),
        _req(json_schema={"type": "object"}),
        _req(metadata={"speaker": "b"}),
    ):
        _ask(model, request)
    assert len(seen) == 7
    # The same request twice in one process: two samples, two replies (a vote's K samples).
    twice = [_ask(model, _req("vote", temperature=1.0)).text for _ in range(2)]
    assert twice == ["reply 8", "reply 9"]
    # Another process asking the same twice gets both samples back, in order, with no request.
    again = CachedModel(inner, ResponseCache(tmp_path / "c.db"))
    assert [_ask(again, _req("vote", temperature=1.0)).text for _ in range(2)] == twice
    assert len(seen) == 9


def test_errors_and_cut_off_replies_are_never_cached(tmp_path: Path) -> None:
    fates = iter(
        [Fate("status", status=500), Fate(content="cut", finish_reason="length"), Fate(content="whole")]
    )
    with FaultServer(lambda n, body, headers: next(fates)) as server:
        inner = OpenAIModel("m", base_url=server.url, api_key="k", structured_mode="prompt")
        model = CachedModel(inner, ResponseCache(tmp_path / "c.db"))

        async def go() -> list[str]:
            out = []
            try:
                for _ in range(3):
                    try:
                        out.append((await model.request(_req())).text)
                    except Exception as err:  # the 500 is not cached either
                        out.append(type(err).__name__)
                    model.cache._seen.clear()  # the same sample each time: only caching differs
            finally:
                await model.aclose()
            return out

        assert asyncio.run(go()) == ["ModelHTTPError", "cut", "whole"]
        stats = ResponseCache(tmp_path / "c.db").stats()
        assert stats.entries == 1 and server.requests == 3


def test_a_debate_run_twice_with_a_cache_sends_no_request_the_second_time(tmp_path: Path) -> None:
    with FaultServer(lambda n, body, headers: Fate(content=schema_reply(body))) as server:
        spec = OpenAIModel("m", base_url=server.url, api_key="k")
        debate = Debate("adversarial", model=spec, cache=tmp_path / "c.db", overrides={"temperature": 0.7})
        first = debate.run_sync("Is tea better than coffee?")
        served = server.requests
        again = Debate("adversarial", model=spec, cache=tmp_path / "c.db", overrides={"temperature": 0.7})
        second = again.run_sync("Is tea better than coffee?")
    assert served > 0 and server.requests == served
    assert first.final_answer == second.final_answer
    assert [t.content for t in first.turns(include_judge=True)] == [
        t.content for t in second.turns(include_judge=True)
    ]
    assert second.usage.calls == 0 and second.usage.attempts == 0
    assert second.usage.cached == first.usage.calls


def test_expiry_prune_clear_and_stats(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "c.db")
    inner, seen = _counting()
    _ask(CachedModel(inner, cache), _req("a"))
    _ask(CachedModel(inner, cache), _req("b"))
    stats = cache.stats()
    assert stats.entries == 2 and stats.bytes > 0 and stats.models == {inner.name: 2}
    with sqlite3.connect(tmp_path / "c.db") as conn:
        conn.execute("UPDATE replies SET created = created - 10 * 86400 WHERE rowid = 1")
    expiring = ResponseCache(tmp_path / "c.db", expiry_s=parse_age("7d"))
    _ask(CachedModel(inner, expiring), _req("a"))  # expired: asked again, replaced
    _ask(CachedModel(inner, expiring), _req("b"))  # fresh: served
    assert len(seen) == 3
    with sqlite3.connect(tmp_path / "c.db") as conn:
        conn.execute("UPDATE replies SET created = created - 30 * 86400 WHERE rowid = 2")
    assert cache.prune(parse_age("7d")) == 1
    assert cache.clear() == 1 and cache.stats().entries == 0


def test_a_file_that_is_not_a_moot_cache_is_refused_and_left_untouched(tmp_path: Path) -> None:
    foreign = tmp_path / "app.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE t (x)")
    before = foreign.read_bytes()
    with pytest.raises(UsageError, match="not a moot response cache"):
        ResponseCache(foreign)
    assert foreign.read_bytes() == before
    text = tmp_path / "notes.txt"
    text.write_text("hello, not sqlite at all " * 100)
    with pytest.raises(UsageError, match="not a moot response cache"):
        ResponseCache(text)
    newer = tmp_path / "newer.db"
    ResponseCache(newer).close()
    with sqlite3.connect(newer) as conn:
        conn.execute("PRAGMA user_version=99")
    with pytest.raises(UsageError, match="format 99"):
        ResponseCache(newer)


def test_open_cache_reads_the_environment_for_true(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOOT_CACHE", str(tmp_path / "env.db"))
    cache = open_cache(True)
    assert cache is not None and cache.path == tmp_path / "env.db"
    assert open_cache(None) is None and open_cache(False) is None
    assert open_cache(cache) is cache
    with pytest.raises(UsageError):
        parse_age("soon")


def test_the_python_doors_take_cache(tmp_path: Path) -> None:
    import json as _json

    from moot.absa import run_absa_batch
    from moot.absa.pipeline import run_absa
    from moot.arbitration import arbitrate

    reports = _json.loads((Path(__file__).parents[1] / "examples" / "inputs" / "reports.json").read_text())
    with FaultServer(lambda n, body, headers: Fate(content=schema_reply(body))) as server:
        model = OpenAIModel("m", base_url=server.url, api_key="k")
        cache = tmp_path / "c.db"

        async def doors() -> None:
            await run_absa("The pasta was great but the waiter was rude.", model=model, cache=cache)
            await run_absa_batch(["Good soup.", "Cold fries."], model=model, cache=cache)
            await arbitrate(reports, model=model, cache=cache)

        async def twice() -> list[int]:
            counts = []
            try:
                for _ in range(2):
                    before = server.requests
                    await doors()
                    counts.append(server.requests - before)
            finally:
                await model.aclose()
            return counts

        first, second = asyncio.run(twice())
    assert first > 0 and second == 0
