"""Every run is bounded in time: whole-request timeouts, hung and dripping servers, deadlines."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from fault_server import Fate, FaultServer, schema_reply
from moot import Debate, FunctionModel, ModelRequest, models
from moot.cli import main
from moot.deadline import DEFAULT_TIMEOUT_S, Deadline, local_estimate, planned_calls, run_timeout_s
from moot.errors import ModelTimeoutError, UsageError
from moot.models import base
from moot.models.base import CallStats, Message, default_request_timeout
from moot.models.openai import OpenAIModel
from moot.models.retry import RetryPolicy, call_model
from moot.models.testing import SchemaModel
from moot.protocol import load_protocol, preset_names

STRUCTURED = ModelRequest(
    messages=[Message(role="user", content="hi")],
    json_schema={"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]},
)


@pytest.fixture
def allow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MOOT_OPENAI_STRUCTURED_MODE", "MOOT_REQUEST_TIMEOUT"):
        monkeypatch.delenv(var, raising=False)


def timed_call(url: str, timeout: float, retries: int) -> tuple[Exception | None, float, CallStats]:
    model = OpenAIModel("m", base_url=url, timeout=timeout)
    stats = CallStats()

    async def go() -> Exception | None:
        try:
            await call_model(model, STRUCTURED, RetryPolicy(max_retries=retries, base_delay=0), stats=stats)
        except Exception as err:  # noqa: BLE001 - returned for the assertions
            return err
        finally:
            await model.aclose()
        return None

    started = time.perf_counter()
    err = asyncio.run(go())
    return err, time.perf_counter() - started, stats


@pytest.mark.usefixtures("allow")
class TestWholeRequestTimeout:
    def test_hung_server(self) -> None:
        with FaultServer(lambda n, body, headers: Fate("hang")) as server:
            err, elapsed, stats = timed_call(server.url, timeout=0.4, retries=1)
            seen = server.requests
        assert isinstance(err, ModelTimeoutError) and err.seconds == 0.4 and err.retryable
        assert 0.8 <= elapsed < 2.0  # two attempts of 0.4 s, not the SDK's minutes
        assert stats.usage.attempts == seen == 2 and stats.usage.calls == 0

    def test_dripping_server_is_cut_at_the_limit(self) -> None:
        # One byte every 50 ms keeps every read alive: only a whole-request bound stops it.
        with FaultServer(lambda n, body, headers: Fate("drip", drip_seconds=0.05)) as server:
            err, elapsed, stats = timed_call(server.url, timeout=0.5, retries=0)
        assert isinstance(err, ModelTimeoutError)
        assert elapsed < 1.5

    def test_timeout_then_answer(self) -> None:
        def handler(n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
            return Fate("hang") if n == 0 else Fate(content=schema_reply(body))

        with FaultServer(handler) as server:
            err, _, stats = timed_call(server.url, timeout=0.3, retries=2)
        assert err is None
        assert (stats.usage.attempts, stats.usage.calls) == (2, 1)


class TestConfiguration:
    def test_default_and_env(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv("MOOT_REQUEST_TIMEOUT", raising=False)
        assert default_request_timeout() == 60.0
        assert OpenAIModel("m", base_url="http://127.0.0.1:9/v1").request_timeout == 60.0
        monkeypatch.setenv("MOOT_REQUEST_TIMEOUT", "7.5")
        assert OpenAIModel("m", base_url="http://127.0.0.1:9/v1").request_timeout == 7.5
        monkeypatch.setenv("MOOT_REQUEST_TIMEOUT", "soon")
        with pytest.raises(UsageError, match="MOOT_REQUEST_TIMEOUT"):
            default_request_timeout()

    def test_spec_option(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
        model = OpenAIModel.from_spec("qwen?timeout=2.5")
        assert (model.model, model.request_timeout) == ("qwen", 2.5)
        with pytest.raises(UsageError, match="unknown model option"):
            OpenAIModel.from_spec("qwen?tmeout=2")
        with pytest.raises(UsageError, match="positive number"):
            OpenAIModel.from_spec("qwen?timeout=-1")


class TestDeadlines:
    def test_explicit_timeout_wins(self) -> None:
        protocol = load_protocol("answer", {"timeout": 3})
        assert run_timeout_s(protocol, [5.0], explicit=True) == 3

    def test_remote_uses_the_seed_deadline_or_the_default(self) -> None:
        assert run_timeout_s(load_protocol("answer"), [None], explicit=False) == 10
        assert run_timeout_s(load_protocol("panel"), [None, None], explicit=False) == DEFAULT_TIMEOUT_S

    def test_a_slow_local_model_gets_a_deadline_that_fits_a_full_debate(self) -> None:
        protocol = load_protocol("answer")
        assert planned_calls(protocol) == [500, 500, 500, 500, 800]
        slow = run_timeout_s(protocol, [None, 40.0], explicit=False)
        assert slow is not None and slow == local_estimate(protocol, 40.0) > 10
        fast = run_timeout_s(protocol, [4000.0], explicit=False)
        assert fast == 30.0  # the floor: never shorter, and never below the seed's 10 s

    @pytest.mark.parametrize("name", preset_names())
    def test_every_preset_runs_under_a_deadline(self, name: str) -> None:
        result = Debate(name, model=SchemaModel()).run_sync("Q?")
        assert result.timings.deadline_s is not None and result.timings.deadline_s > 0

    def test_declared_speed_sizes_the_run_deadline(self) -> None:
        model = FunctionModel(lambda req: {"answer": "a", "final_answer": "f"})
        model.tokens_per_second = 50.0
        result = Debate("answer", model=model).run_sync("Q?")
        assert result.timings.deadline_s == local_estimate(load_protocol("answer"), 50.0)
        explicit = Debate("answer", model=model, overrides={"timeout": 4}).run_sync("Q?")
        assert explicit.timings.deadline_s == 4


@pytest.mark.usefixtures("allow")
def test_cli_run_against_a_hung_server_returns_within_its_timeout(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with FaultServer(lambda n, body, headers: Fate("hang")) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        started = time.perf_counter()
        code = main(["run", "Q?", "--model", "openai:hung-test", "--timeout", "1.5", "--json", "--no-store"])
        elapsed = time.perf_counter() - started
    models._CACHE.pop("openai:hung-test", None)  # resolved specs are cached per process
    assert elapsed < 1.5 + 1.0
    result = json.loads(capsys.readouterr().out)
    assert result["fallback"].startswith("timeout")
    assert code == 1
    assert all(t["cancelled"] for r in result["rounds"] for t in r["turns"])


@pytest.mark.usefixtures("allow")
def test_cli_run_against_a_dripping_server_is_bounded_per_request(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Each byte arrives well within any read timeout; only the whole-request limit stops it.
    with FaultServer(lambda n, body, headers: Fate("drip", drip_seconds=0.05)) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        started = time.perf_counter()
        spec = "openai:drip-test?timeout=0.4"
        code = main(["run", "Q?", "--model", spec, "--rounds", "1", "--json", "--no-store"])
        elapsed = time.perf_counter() - started
        requests = server.requests
    models._CACHE.pop(spec, None)
    result = json.loads(capsys.readouterr().out)
    # 2 speakers x (1 attempt + 3 retries) x 0.4 s, with backoff waits, far below one drip of ~20 s.
    assert elapsed < 8
    assert code == 1 and result["fallback"] is not None
    turns = [t for r in result["rounds"] for t in r["turns"]]
    # Timed out, then (the endpoint having answered nothing) its circuit opened: no more waiting.
    assert any(t["error_kind"] in ("ModelTimeoutError", "EndpointDown") for t in turns)
    assert result["usage"]["attempts"] == requests


@pytest.mark.usefixtures("allow")
@pytest.mark.parametrize("http", ["aiohttp", "sdk"])
def test_refused_connections_are_not_counted_as_requests_sent(http: str) -> None:
    from fault_server import free_port
    from moot.errors import ModelConnectionError

    model = OpenAIModel("m", base_url=f"http://127.0.0.1:{free_port()}/v1", http=http)  # type: ignore[arg-type]
    stats = CallStats()

    async def go() -> None:
        try:
            await call_model(model, STRUCTURED, RetryPolicy(max_retries=2, base_delay=0), stats=stats)
        finally:
            await model.aclose()

    with pytest.raises(ModelConnectionError) as info:
        asyncio.run(go())
    assert not info.value.sent
    assert stats.usage.attempts == 0  # three tries, none reached a server: its log would be empty


class TestOneDeadline:
    def test_within_takes_the_earlier(self) -> None:
        assert Deadline.within(None) is None
        parent = Deadline.after(100.0)
        assert Deadline.within(None, parent) is parent
        assert Deadline.within(1000.0, parent) is parent
        own = Deadline.within(1.0, parent)
        assert own is not None and own is not parent and 0.9 < own.remaining_s() <= 1.0
        gone = Deadline(at=time.monotonic() - 1)
        assert gone.expired() and gone.remaining_s() == 0.0 and not parent.expired()

    def test_a_scope_never_ends_before_the_instant(self) -> None:
        deadline = Deadline.after(0.05)

        async def go() -> bool:
            with pytest.raises(TimeoutError):
                async with deadline.scope():
                    await asyncio.sleep(5)
            return deadline.expired()

        assert asyncio.run(go())

    def test_a_debate_ends_at_the_callers_deadline_when_it_comes_first(self) -> None:
        slow = SchemaModel(delay=0.2)

        async def go() -> tuple[float, Any]:
            started = time.perf_counter()
            result = await Debate("answer", model=slow).run("Q?", deadline=Deadline.after(0.3))
            return time.perf_counter() - started, result

        elapsed, result = asyncio.run(go())
        assert result.fallback.startswith("timeout") and elapsed < 1.0
        assert result.timings.deadline_s is not None and result.timings.deadline_s <= 0.3
        assert any(t.cancelled for t in result.turns())

    def test_a_debate_keeps_its_own_budget_under_a_later_deadline(self) -> None:
        model = SchemaModel(delay=0.2)
        debate = Debate("answer", model=model, overrides={"timeout": 0.3})
        result = asyncio.run(debate.run("Q?", deadline=Deadline.after(60)))
        assert result.fallback == "timeout: the debate exceeded 0.3 s"
        assert result.timings.deadline_s == 0.3

    def test_a_restored_run_keeps_the_time_it_had_left(self) -> None:
        debate = Debate("answer", model=SchemaModel(delay=0.5))

        async def go() -> Any:
            run = debate.start("Q?")
            run.restore(
                [],
                rounds=1,
                fallback=None,
                stopped_early=False,
                deadline_s=10.0,
                elapsed_s=9.8,
                started_at=time.time(),
            )
            assert run.deadline is not None and run.deadline.remaining_s() <= 0.2
            await run.play_stage(1, 0)
            return run.fallback

        assert asyncio.run(go()) == "timeout: the debate exceeded 10 s"
