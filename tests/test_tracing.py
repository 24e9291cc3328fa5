"""OpenTelemetry spans from a debate's events, read back with the SDK's in-memory exporter."""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import moot.app.tracing as tracing
from engine_helpers import ans
from moot import Debate, FunctionModel, ModelRequest, ScriptedModel, observe
from moot.app.tracing import (
    CAPTURE_ENV,
    DebateTracer,
    TraceObserver,
    active_tracer,
    capture_content,
    model_name,
    provider_name,
    trace_observer,
)
from moot.errors import ModelHTTPError
from moot.models import base
from moot.protocol import preset_names


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    """The SDK's provider (what the ``moot`` command installs), its spans kept in memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def _by_op(finished: tuple[ReadableSpan, ...]) -> dict[str, list[ReadableSpan]]:
    out: dict[str, list[ReadableSpan]] = {}
    for s in finished:
        out.setdefault(str((s.attributes or {})["gen_ai.operation.name"]), []).append(s)
    return out


def _all_text(finished: tuple[ReadableSpan, ...]) -> str:
    """Every name, attribute and event of every span, as one string (to search for leaks)."""
    parts = []
    for s in finished:
        parts.append(s.name + json.dumps(dict(s.attributes or {}), default=str))
        for e in s.events:
            parts.append(e.name + json.dumps(dict(e.attributes or {}), default=str))
        parts.append(str(s.status.description))
    return "\n".join(parts)


@pytest.mark.parametrize("preset", preset_names())
def test_span_tree_per_preset(preset: str, spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    tracer = DebateTracer(provider.get_tracer("moot"), capture=False)
    result = Debate(preset, model="test").run_sync("Is the service fast?", on_event=tracer.on_event)
    ops = _by_op(exporter.get_finished_spans())
    assert set(ops) == {"invoke_workflow", "invoke_agent", "chat"}
    (root,) = ops["invoke_workflow"]
    turns = result.turns(include_judge=True)
    assert len(ops["invoke_agent"]) == len(turns) and len(ops["chat"]) == result.usage.calls
    assert root.parent is None and root.name == f"invoke_workflow {result.protocol}"
    attrs = root.attributes or {}
    assert attrs["gen_ai.conversation.id"] == result.id and attrs["gen_ai.workflow.name"] == preset
    assert attrs["moot.status"] == ("fell_back" if result.degraded else "complete")
    if result.decision is not None and result.decision.label is not None:
        assert attrs["moot.decision.label"] == result.decision.label
    agents = {s.context.span_id: s for s in ops["invoke_agent"]}
    for agent in agents.values():
        assert agent.parent is not None and agent.parent.span_id == root.context.span_id
        a = agent.attributes or {}
        assert agent.name == f"invoke_agent {a['gen_ai.agent.name']}" and a["moot.phase"] in (
            "turn",
            "moderator",
            "judge",
        )
        assert a["gen_ai.provider.name"] == "moot.test"
    seen = Counter(
        (str((s.attributes or {})["gen_ai.agent.name"]), "error.type" not in (s.attributes or {}))
        for s in agents.values()
    )
    assert seen == Counter((t.speaker, t.ok) for t in turns)
    for chat in ops["chat"]:
        assert chat.parent is not None and chat.parent.span_id in agents
        c = chat.attributes or {}
        assert chat.name == "chat schema" and chat.kind == trace.SpanKind.CLIENT
        assert c["gen_ai.request.model"] == c["gen_ai.response.model"] == "schema"
        assert c["gen_ai.usage.input_tokens"] > 0 and c["gen_ai.response.finish_reasons"] == ("stop",)
        assert "gen_ai.request.max_tokens" in c
    tokens = sum(int((s.attributes or {})["gen_ai.usage.input_tokens"]) for s in ops["chat"])
    assert tokens == result.usage.prompt_tokens
    # a verdict is an evaluation event on the run's span
    evals = [e for e in root.events if e.name == "gen_ai.evaluation.result"]
    judged = [t for t in turns if t.phase in ("judge", "moderator") and t.ok]
    assert len(evals) == len(judged)
    assert tracer.open_runs == 0


def test_concurrent_turns_are_siblings_and_overlap(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = spans
    tracer = DebateTracer(provider.get_tracer("moot"))
    model = ScriptedModel(
        {"affirmative": [ans("a"), ans("b")], "critical": [ans("c"), ans("d")], "synthesizer": [ans("e")]},
        delay=0.05,
    )

    def synth(req: ModelRequest) -> object:
        return {"final_answer": "x", "citations": [], "confidence": 0.9}

    debate = Debate("answer", model=model, role_models={"synthesizer": FunctionModel(synth)})
    debate.run_sync("q", on_event=tracer.on_event)
    ops = _by_op(exporter.get_finished_spans())
    round1 = [
        s
        for s in ops["invoke_agent"]
        if (s.attributes or {})["moot.round"] == 1 and "judge" != ((s.attributes or {})["moot.phase"])
    ]
    assert len(round1) == 2 and len({s.parent.span_id for s in round1 if s.parent}) == 1
    a, b = round1
    assert a.start_time is not None and b.end_time is not None and b.start_time is not None
    assert a.start_time < b.end_time and b.start_time < (a.end_time or 0)  # they ran at once


def test_failed_turn_retries_and_repair(spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    busy = {"n": 0}

    def fn(req: ModelRequest) -> object:
        who, rnd = req.metadata["speaker"], req.metadata["round"]
        if who == "affirmative" and rnd == 1 and busy["n"] < 2:
            busy["n"] += 1
            raise ModelHTTPError(429, "slow down", model="test:function", retry_after=0)
        if who == "critical" and rnd == 1 and req.metadata["attempt"] == 0:
            return "no json here"
        if who == "critical" and rnd == 2:
            raise ModelHTTPError(400, "bad request body with SECRET-BODY", model="test:function")
        if who == "synthesizer":
            return {"final_answer": "x", "citations": [], "confidence": 0.9}
        return ans("fine")

    tracer = DebateTracer(provider.get_tracer("moot"))
    result = Debate("answer", model=FunctionModel(fn), overrides={"on_turn_failure": "continue"}).run_sync(
        "q", on_event=tracer.on_event
    )
    assert result.failed_turns == 1
    finished = exporter.get_finished_spans()
    ops = _by_op(finished)
    retried = [s for s in ops["chat"] if any(e.name == "moot.retry" for e in s.events)]
    assert len(retried) == 1
    events = [e for e in retried[0].events if e.name == "moot.retry"]
    assert [(e.attributes or {})["http.response.status_code"] for e in events] == [429, 429]
    assert (retried[0].attributes or {})["moot.requests_sent"] == 3
    repaired = [s for s in ops["invoke_agent"] if any(e.name == "moot.repair" for e in s.events)]
    assert len(repaired) == 1 and (repaired[0].attributes or {})["moot.repaired"] is True
    invalid = [s for s in ops["chat"] if (s.attributes or {}).get("error.type") == "invalid_output"]
    assert len(invalid) == 1
    failed = [s for s in ops["invoke_agent"] if "error.type" in (s.attributes or {})]
    assert len(failed) == 1 and (failed[0].attributes or {})["error.type"] == "ModelHTTPError"
    assert failed[0].status.status_code == trace.StatusCode.ERROR
    assert "SECRET-BODY" not in _all_text(finished)  # an error's message never reaches a span
    assert len(ops["chat"]) == result.usage.calls + 1  # the refused request has a span too


def test_fallback_marks_the_run(spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    model = ScriptedModel({"*": [ModelHTTPError(400, "no", model="m")] * 4})
    tracer = DebateTracer(provider.get_tracer("moot"))
    result = Debate("answer", model=model).run_sync("q", initial_answer="kept", on_event=tracer.on_event)
    assert result.fallback
    (root,) = _by_op(exporter.get_finished_spans())["invoke_workflow"]
    assert (root.attributes or {})["moot.status"] == "fell_back"
    assert (root.attributes or {})["error.type"] == "turn_failed"
    assert root.status.status_code == trace.StatusCode.ERROR


def test_skipped_run_is_one_span(spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    tracer = DebateTracer(provider.get_tracer("moot"))
    Debate("answer", model="test").run_sync(
        "q", initial_answer="a", debate_mode=False, on_event=tracer.on_event
    )
    (root,) = exporter.get_finished_spans()
    assert (root.attributes or {})["moot.status"] == "skipped"


SECRET_TOPIC = "TOPIC-TEXT-7d1f"
SECRET_CONTEXT = "CONTEXT-TEXT-9a2b"


def test_content_off_by_default(spans: tuple[TracerProvider, InMemorySpanExporter], monkeypatch) -> None:
    monkeypatch.delenv(CAPTURE_ENV, raising=False)
    provider, exporter = spans
    tracer = DebateTracer(provider.get_tracer("moot"))
    assert tracer.capture is False
    Debate("adversarial", model="test").run_sync(
        SECRET_TOPIC, context={"doc": SECRET_CONTEXT}, on_event=tracer.on_event
    )
    text = _all_text(exporter.get_finished_spans())
    assert SECRET_TOPIC not in text and SECRET_CONTEXT not in text
    assert "gen_ai.input.messages" not in text and "gen_ai.output.messages" not in text


def test_content_on_with_the_convention_variable(
    spans: tuple[TracerProvider, InMemorySpanExporter], monkeypatch
) -> None:
    monkeypatch.setenv(CAPTURE_ENV, "true")
    provider, exporter = spans
    tracer = DebateTracer(provider.get_tracer("moot"))
    assert tracer.capture is True
    Debate("answer", model="test").run_sync(
        SECRET_TOPIC, context={"doc": SECRET_CONTEXT}, on_event=tracer.on_event
    )
    ops = _by_op(exporter.get_finished_spans())
    chat = ops["chat"][0].attributes or {}
    sent = json.loads(str(chat["gen_ai.input.messages"]))
    assert sent[0]["role"] == "system" and sent[0]["parts"][0]["type"] == "text"
    assert SECRET_TOPIC in json.dumps(sent) and SECRET_CONTEXT in json.dumps(sent)
    assert json.loads(str(chat["gen_ai.output.messages"]))[0]["finish_reason"] == "stop"
    assert (ops["invoke_workflow"][0].attributes or {})["moot.topic"] == SECRET_TOPIC


@pytest.mark.parametrize("value", ["SPAN_AND_EVENT", "span_only", "True", "1", "yes"])
def test_content_on_with_either_documented_form(
    value: str, spans: tuple[TracerProvider, InMemorySpanExporter], monkeypatch, caplog
) -> None:
    # The enum form is what OpenTelemetry's GenAI utilities document with the opt-in below.
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    monkeypatch.setenv(CAPTURE_ENV, value)
    provider, exporter = spans
    tracer = DebateTracer(provider.get_tracer("moot"))
    assert tracer.capture is True
    Debate("answer", model="test").run_sync(SECRET_TOPIC, on_event=tracer.on_event)
    chat = _by_op(exporter.get_finished_spans())["chat"][0].attributes or {}
    assert SECRET_TOPIC in str(chat["gen_ai.input.messages"]) and "gen_ai.output.messages" in chat
    assert not caplog.records


@pytest.mark.parametrize("value", ["NO_CONTENT", "false", "0", "no", ""])
def test_content_off_values(value: str, monkeypatch, caplog) -> None:
    monkeypatch.setenv(CAPTURE_ENV, value)
    assert capture_content() is False and not caplog.records


@pytest.mark.parametrize("value", ["EVENT_ONLY", "everything"])
def test_an_unknown_or_event_only_value_captures_nothing_and_warns_once(
    value: str, monkeypatch, caplog
) -> None:
    monkeypatch.setenv(CAPTURE_ENV, value)
    monkeypatch.setattr(tracing, "_CAPTURE_WARNED", set())
    with caplog.at_level(logging.WARNING, logger="moot"):
        assert capture_content() is False and capture_content() is False
    (record,) = caplog.records
    assert CAPTURE_ENV in record.getMessage() and record.name.startswith("moot")


def test_no_secret_in_any_span(spans: tuple[TracerProvider, InMemorySpanExporter], monkeypatch) -> None:
    # An OpenAI-compatible endpoint with a key in its URL's query and one from the environment: the
    # request fails at once (nothing listens), with content capture on; no span holds either secret.
    monkeypatch.setenv(CAPTURE_ENV, "true")
    monkeypatch.setenv("MY_SECRET_KEY", "sk-KEY-0123456789")
    monkeypatch.setenv("MOOT_REQUEST_TIMEOUT", "2")
    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)  # to 127.0.0.1 only, where nothing listens
    provider, exporter = spans
    tracer = DebateTracer(provider.get_tracer("moot"))
    base_url = urllib.parse.quote("http://127.0.0.1:9/v1?api_key=URL-PASSWORD-42", safe="")
    spec = f"openai:m?base_url={base_url}&api_key_env=MY_SECRET_KEY"
    result = Debate("answer", model=spec, overrides={"retry": {"max_retries": 0}}).run_sync(
        "q", on_event=tracer.on_event
    )
    assert result.fallback
    finished = exporter.get_finished_spans()
    text = _all_text(finished)
    assert "URL-PASSWORD-42" not in text and "sk-KEY-0123456789" not in text
    chats = _by_op(finished)["chat"]
    assert chats and all((s.attributes or {})["server.address"] == "127.0.0.1" for s in chats)
    assert all((s.attributes or {})["server.port"] == 9 for s in chats)


def test_nests_under_the_callers_span(spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    otel = provider.get_tracer("app")
    tracer = DebateTracer(provider.get_tracer("moot"))

    async def node() -> None:  # e.g. a LangGraph node or a web request handler
        with otel.start_as_current_span("caller"):
            await Debate("answer", model="test").run("q", on_event=tracer.on_event)
            async for _ in Debate("answer", model="test").stream("q2"):
                pass

    asyncio.run(node())
    finished = exporter.get_finished_spans()
    (caller,) = [s for s in finished if s.name == "caller"]
    (root,) = _by_op(tuple(s for s in finished if s.name != "caller"))["invoke_workflow"]
    assert root.parent is not None and root.parent.span_id == caller.context.span_id
    assert root.context.trace_id == caller.context.trace_id
    # the caller's current span is untouched after the run
    assert trace.get_current_span() is trace.INVALID_SPAN


def test_model_spec_names() -> None:
    assert provider_name("openai:gpt-4o?base_url=http://x") == "openai"
    assert model_name("openai:gpt-4o?base_url=http://x") == "gpt-4o"
    assert provider_name("local") == "moot.local" and model_name("anthropic:claude") == "claude"


def test_no_provider_no_tracer() -> None:
    # The global provider is never set in this process: moot traces nothing and builds nothing.
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    assert active_tracer() is None


# -- attached as an observer (moot.observe), as every door attaches it when a provider is set -----


@pytest.fixture
def observed(spans: tuple[TracerProvider, InMemorySpanExporter]) -> Iterator[InMemorySpanExporter]:
    provider, exporter = spans
    tracer = provider.get_tracer("moot")
    observe.register("trace", lambda start, options: TraceObserver(tracer))
    yield exporter
    observe.register("trace", trace_observer)


def test_every_door_is_traced_without_a_callback(observed: InMemorySpanExporter) -> None:
    debate = Debate("answer", model="test")
    debate.run_sync("q1")

    async def drive() -> None:
        await debate.start("q2").execute()
        async for _ in debate.stream("q3"):
            pass

    asyncio.run(drive())
    roots = _by_op(observed.get_finished_spans())["invoke_workflow"]
    assert len(roots) == 3 and all((r.attributes or {})["moot.status"] == "complete" for r in roots)
    assert len(_by_op(observed.get_finished_spans())["chat"]) == 15


def test_observer_nests_under_the_callers_span(
    observed: InMemorySpanExporter, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    app = spans[0].get_tracer("app")
    with app.start_as_current_span("request"):
        Debate("answer", model="test").run_sync("q")
    finished = observed.get_finished_spans()
    (request,) = [s for s in finished if s.name == "request"]
    (root,) = [s for s in finished if s.name.startswith("invoke_workflow")]
    assert root.parent is not None and root.parent.span_id == request.context.span_id


def test_an_interrupted_debate_still_has_its_spans(observed: InMemorySpanExporter) -> None:
    model = ScriptedModel({"*": [ans("a")] * 4}, delay=5)

    async def cut() -> None:
        task = asyncio.create_task(Debate("answer", model=model).run("q"))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cut())
    ops = _by_op(observed.get_finished_spans())
    (root,) = ops["invoke_workflow"]
    assert root.name == "invoke_workflow answer" and (root.attributes or {})["moot.status"] == "interrupted"
    assert root.status.status_code == trace.StatusCode.ERROR
    assert len(ops["invoke_agent"]) == 2 and all(
        s.status.status_code == trace.StatusCode.ERROR for s in ops["invoke_agent"]
    )


def test_a_pipeline_run_is_one_root_with_units_and_debates(observed: InMemorySpanExporter) -> None:
    start = observe.RunStart(kind="bench", title="arith", model="test")
    with observe.observed(start) as run:
        run.emit(observe.PipelineEvent(kind="bench_started", data={"total": 2, "done": 0}))
        Debate("answer", model="test").run_sync("1+1?")  # nested: its events reach the bench's observers
        run.emit(
            observe.PipelineEvent(
                kind="unit_completed", unit="i1", part="single", correct=True, data={"wall_s": 0.1}
            )
        )
        run.emit(
            observe.PipelineEvent(kind="unit_completed", unit="i2", part="single", correct=False, data={})
        )
        run.end("complete", score=0.5)
    finished = observed.get_finished_spans()
    roots = [s for s in finished if s.parent is None]
    assert [r.name for r in roots] == ["invoke_workflow moot.bench"]
    (bench,) = roots
    assert (bench.attributes or {})["moot.score"] == 0.5 and (bench.attributes or {})["moot.units"] == 2
    units = [s for s in finished if s.name.startswith("unit ")]
    assert sorted(s.name for s in units) == ["unit i1 single", "unit i2 single"]
    scores = [(e.attributes or {})["gen_ai.evaluation.score.value"] for s in units for e in s.events]
    assert sorted(scores) == [0.0, 1.0]
    (debate,) = [s for s in finished if s.name == "invoke_workflow answer"]
    assert debate.parent is not None and debate.parent.span_id == bench.context.span_id


def test_captured_content_is_redacted(
    spans: tuple[TracerProvider, InMemorySpanExporter], monkeypatch
) -> None:
    monkeypatch.setenv(CAPTURE_ENV, "true")
    provider, exporter = spans
    tracer = DebateTracer(provider.get_tracer("moot"))
    topic = "Is http://admin:hunter2-PASS@db.internal/x?api_key=K-SECRET-1 safe to share?"
    Debate("answer", model="test").run_sync(
        topic, context={"db": "postgres://app:CTX-SECRET-2@db.internal/main"}, on_event=tracer.on_event
    )
    text = _all_text(exporter.get_finished_spans())
    assert "db.internal" in text  # the content is there...
    for secret in ("hunter2-PASS", "K-SECRET-1", "CTX-SECRET-2"):
        assert secret not in text  # ...its credentials are not


# -- the pipelines through their own doors -------------------------------------------------------


def _roots(finished: tuple[ReadableSpan, ...]) -> list[ReadableSpan]:
    return [s for s in finished if s.parent is None]


def _children(finished: tuple[ReadableSpan, ...], parent: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in finished if s.parent is not None and s.parent.span_id == parent.context.span_id]


def test_a_bench_is_one_root_with_a_span_per_unit(observed: InMemorySpanExporter, tmp_path: Path) -> None:
    from moot.bench.runner import BenchConfig, run_bench
    from moot.models import resolve_model

    config = BenchConfig(task="arithmetic", methods=["single", "answer"], n=3, concurrency=2)
    run = asyncio.run(run_bench(config, model=resolve_model("test"), out=tmp_path / "b"))
    finished = observed.get_finished_spans()
    (root,) = _roots(finished)
    assert root.name == "invoke_workflow moot.bench" and (root.attributes or {})["moot.units"] == 6
    units = [s for s in _children(finished, root) if s.name.startswith("unit ")]
    assert len(units) == len(run.records) == 6
    assert {(s.attributes or {})["moot.part"] for s in units} == {"single", "answer"}
    for unit in units:
        (score,) = [e for e in unit.events if e.name == "gen_ai.evaluation.result"]
        record = next(r for r in run.records if f"unit {r.item_id} {r.method}" == unit.name)
        assert (score.attributes or {})["gen_ai.evaluation.score.value"] == float(record.correct)
    debates = [s for s in _children(finished, root) if s.name == "invoke_workflow answer"]
    assert len(debates) == 3  # the preset method's debates, one per item, under the bench


def test_an_absa_sentence_is_a_root_with_its_steps(observed: InMemorySpanExporter) -> None:
    from moot.absa import run_absa

    asyncio.run(run_absa("The food was great but the service was slow.", model="test"))
    finished = observed.get_finished_spans()
    (root,) = _roots(finished)
    assert root.name == "invoke_workflow moot.absa"
    steps = [s for s in _children(finished, root) if s.name.startswith("step ")]
    assert steps and all(s.end_time is not None for s in steps)
    names = [str((s.attributes or {})["moot.step"]) for s in steps]
    assert "debate" in names
    (debate_step,) = [s for s in steps if (s.attributes or {})["moot.step"] == "debate"]
    debates = [s for s in finished if s.name.startswith("invoke_workflow ") and s is not root]
    assert debates and all(
        d.parent is not None and d.parent.span_id == debate_step.context.span_id for d in debates
    )


def test_an_arbitration_is_a_root_with_a_debate_per_contradiction(observed: InMemorySpanExporter) -> None:
    from moot.arbitration import arbitrate

    reports = [
        {"agent": "A", "findings": [{"metric": f"m{i}", "value": 1.0, "confidence": 0.9} for i in range(3)]},
        {"agent": "B", "findings": [{"metric": f"m{i}", "value": 2.0, "confidence": 0.5} for i in range(3)]},
    ]
    result = asyncio.run(arbitrate(reports, model="test"))
    assert result.contradictions_found == 3
    finished = observed.get_finished_spans()
    (root,) = _roots(finished)
    assert root.name == "invoke_workflow moot.arbitrate"
    debates = [s for s in _children(finished, root) if s.name.startswith("invoke_workflow ")]
    assert len(debates) == 3


def test_an_absa_batch_is_a_root_per_sentence_linked_to_the_batchs_root(
    observed: InMemorySpanExporter,
) -> None:
    from moot.absa import run_absa_batch

    sentences = ["The food was great.", "The service was slow.", "Nice view, bad coffee."]
    asyncio.run(run_absa_batch(sentences, model="test", concurrency=3, ids=["s1", "s2", "s3"]))
    finished = observed.get_finished_spans()
    roots = _roots(finished)
    (batch,) = [r for r in roots if r.name == "invoke_workflow moot.absa.batch"]
    per_sentence = [r for r in roots if r is not batch]
    assert len(roots) == 4 and len({r.context.trace_id for r in roots}) == 4  # four traces
    assert sorted(str((s.attributes or {})["moot.unit"]) for s in per_sentence) == ["s1", "s2", "s3"]
    for sentence in per_sentence:
        a = sentence.attributes or {}
        assert sentence.name == "invoke_workflow moot.absa" and a["gen_ai.workflow.name"] == "moot.absa"
        assert a["moot.batch"] is True and a["gen_ai.provider.name"] == "moot.test"
        # linked both ways: the sentence to the batch, the batch to the sentence
        assert [(link.context.span_id, (link.attributes or {})["moot.link"]) for link in sentence.links] == [
            (batch.context.span_id, "batch")
        ]
        assert sentence.context.span_id in {link.context.span_id for link in batch.links}
        steps = _children(finished, sentence)
        names = [str((s.attributes or {})["moot.step"]) for s in steps]
        assert "debate" in names and len(names) == len(set(names))  # its own steps, once each
        assert all(s.context.trace_id == sentence.context.trace_id for s in steps)
        (debate_step,) = [s for s in steps if (s.attributes or {})["moot.step"] == "debate"]
        assert [s.name.split()[0] for s in _children(finished, debate_step)] == ["invoke_workflow"]
    assert {(link.attributes or {})["moot.link"] for link in batch.links} == {"sentence"} and len(
        batch.links
    ) == 3
    assert not _children(finished, batch)  # the batch's work is in its sentences' traces


def test_an_absa_batch_inside_a_callers_span_nests_its_root_only(
    observed: InMemorySpanExporter, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    from moot.absa import run_absa_batch

    with spans[0].get_tracer("app").start_as_current_span("request") as request:
        asyncio.run(run_absa_batch(["Good food.", "Slow service."], model="test", ids=["a", "b"]))
    finished = observed.get_finished_spans()
    (batch,) = [s for s in finished if s.name == "invoke_workflow moot.absa.batch"]
    assert batch.parent is not None and batch.parent.span_id == request.get_span_context().span_id
    sentences = [s for s in finished if s.name == "invoke_workflow moot.absa"]
    assert len(sentences) == 2 and all(s.parent is None for s in sentences)


def test_plain_bench_methods_have_a_chat_span_per_request_under_their_unit(
    observed: InMemorySpanExporter, tmp_path: Path
) -> None:
    from moot.bench.runner import BenchConfig, run_bench
    from moot.runs import RunStore

    def answer(request: ModelRequest) -> str:
        if request.metadata.get("item") == "arithmetic-1" and request.metadata.get("round") == 1:
            raise ModelHTTPError(400, "bad request", model="fn")  # not retried: that unit fails
        return "The result is (7)."

    config = BenchConfig(
        task="arithmetic", methods=["single", "vote:3", "society:3:2"], n=3, concurrency=4, max_errors=10
    )
    store = tmp_path / "runs.db"
    model = FunctionModel(answer, name="fn:plain")
    run = asyncio.run(run_bench(config, model=model, out=tmp_path / "b", store=store))
    assert {(r.item_id, r.method) for r in run.records} == {
        (f"arithmetic-{i}", m) for i in range(3) for m in ("single", "vote:3")
    } | {("arithmetic-0", "society:3:2"), ("arithmetic-2", "society:3:2")}
    finished = observed.get_finished_spans()
    units = {s.context.span_id: s for s in finished if s.name.startswith("unit ")}
    chats = [s for s in finished if (s.attributes or {}).get("gen_ai.operation.name") == "chat"]
    # Round 0's three samples are asked once per item and shared by single, vote:3 and the
    # society; round 1 is the society's own: 6 requests an item, one span each, under its unit.
    seen = Counter()
    for chat in chats:
        assert chat.parent is not None and chat.parent.span_id in units
        unit = units[chat.parent.span_id]
        a = chat.attributes or {}
        item = str((unit.attributes or {})["moot.unit"])
        seen[(item, a["moot.agent"], a["moot.round"])] += 1
        assert a["gen_ai.provider.name"] == "fn" and a["gen_ai.request.model"] == "plain"
        assert unit.start_time is not None and chat.start_time is not None and chat.end_time is not None
        if a["moot.round"] == 1:
            assert str((unit.attributes or {})["moot.part"]) == "society:3:2"
        if item == "arithmetic-1" and a["moot.round"] == 1:
            assert a["error.type"] == "ModelHTTPError" and chat.status.status_code == trace.StatusCode.ERROR
            assert unit.status.status_code == trace.StatusCode.ERROR  # the failed unit holds its requests
        else:
            assert "error.type" not in a and a["gen_ai.usage.output_tokens"] > 0
    assert seen == Counter(
        {(f"arithmetic-{i}", agent, r): 1 for i in (0, 2) for agent in range(3) for r in (0, 1)}
    ) | {k: n for k, n in seen.items() if k[0] == "arithmetic-1"}
    # arithmetic-1's society failed in round 1 and was retried twice (run_bench's unit_retries):
    # each attempt is a failed unit span holding the requests it made (a request cancelled by its
    # sibling's failure made no span).
    failed = [u for u in units.values() if u.status.status_code == trace.StatusCode.ERROR]
    assert len(failed) == 3 and {str((u.attributes or {})["moot.unit"]) for u in failed} == {"arithmetic-1"}
    for unit in failed:
        mine = [c for c in chats if c.parent is not None and c.parent.span_id == unit.context.span_id]
        assert any((c.attributes or {}).get("error.type") == "ModelHTTPError" for c in mine)
    with RunStore(store) as runs:
        (stored,) = runs.list()
        assert not [e for e in runs.events(stored.id) if e.kind == "model_request"]  # never stored


def test_a_plain_bench_nobody_listens_to_builds_no_request_records(tmp_path: Path, monkeypatch) -> None:
    from moot.bench.methods import MethodContext
    from moot.bench.runner import BenchConfig, run_bench
    from moot.models import resolve_model

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a request record built while nobody listens")

    monkeypatch.setattr(MethodContext, "_request_record", refuse)
    config = BenchConfig(task="arithmetic", methods=["vote:3"], n=2)
    # Recorded into a store (as the moot command does), traced by nobody: the store keeps no
    # request events, so none is built.
    run = asyncio.run(
        run_bench(config, model=resolve_model("test"), out=tmp_path / "b", store=tmp_path / "runs.db")
    )
    assert len(run.records) == 2


def test_unit_spans_are_made_in_batches_by_count_by_time_and_at_the_end(
    spans: tuple[TracerProvider, InMemorySpanExporter], monkeypatch: pytest.MonkeyPatch
) -> None:
    from moot.app import tracing
    from moot.transcript import RequestRecord

    provider, exporter = spans
    clock = [1000.0]
    monkeypatch.setattr(tracing.time, "monotonic", lambda: clock[0])
    obs = TraceObserver(provider.get_tracer("moot"))
    obs.on_start(observe.RunStart(kind="bench", title="arithmetic", model="openai:m"))

    def unit(i: int) -> None:
        request = RequestRecord(model="openai:m", started=100.0 + i, ended=100.5 + i)
        data = {"agent": 0, "round": 0}
        obs.on_event(
            observe.PipelineEvent(
                kind="model_request", unit=f"u{i}", part="single", request=request, data=data
            )
        )
        obs.on_event(
            observe.PipelineEvent(
                kind="unit_completed", unit=f"u{i}", part="single", correct=True, time=101.0 + i
            )
        )

    def units() -> list[ReadableSpan]:
        return [s for s in exporter.get_finished_spans() if s.name.startswith("unit ")]

    for i in range(tracing._UNIT_BATCH - 1):
        unit(i)
    assert units() == []  # held until the batch is full
    unit(tracing._UNIT_BATCH - 1)
    assert len(units()) == tracing._UNIT_BATCH  # the full batch, each unit with its chat span
    assert (
        len([s for s in exporter.get_finished_spans() if s.name.startswith("chat ")]) == tracing._UNIT_BATCH
    )
    unit(100)
    clock[0] += tracing._UNIT_WAIT_S - 0.01
    unit(101)
    assert len(units()) == tracing._UNIT_BATCH
    clock[0] += 0.02  # the first held unit ended a batch's time ago: the next one flushes them
    unit(102)
    assert len(units()) == tracing._UNIT_BATCH + 3
    unit(103)
    obs.on_end(observe.RunEnd(status="complete"))
    finished = exporter.get_finished_spans()
    made = {str((s.attributes or {})["moot.unit"]): s for s in finished if s.name.startswith("unit ")}
    assert len(made) == tracing._UNIT_BATCH + 4 and "u103" in made  # the rest at the run's end
    chats = [s for s in finished if s.name.startswith("chat ")]
    assert len(chats) == len(made)
    for chat in chats:  # under its own unit (request i started at 100 + i)
        assert chat.start_time is not None and chat.parent is not None
        assert chat.parent.span_id == made[f"u{chat.start_time // 10**9 - 100}"].context.span_id
    # Each span keeps its unit's own times, made whenever it was.
    assert made["u7"].end_time == 108 * 10**9
    root = [s for s in finished if s.name == "invoke_workflow moot.bench"]
    assert len(root) == 1
    assert all(u.parent is not None and u.parent.span_id == root[0].context.span_id for u in made.values())
