"""Every door records exactly one run, against a real local HTTP endpoint (issue 19's table).

Each door runs on ``openai:fake`` pointed at :class:`fault_server.FaultServer` (127.0.0.1), with a
store of its own; the store then holds one run of the door's kind and status, whose stored turns
are the result's. The same through the CLI. The turns' stored messages are what the server read.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fault_server import Fate, FaultServer, schema_reply
from moot import Debate
from moot.absa import run_absa, run_absa_batch
from moot.arbitration import arbitrate
from moot.bench.runner import BenchConfig, run_bench
from moot.cli import main
from moot.models import base, resolve_model
from moot.runs import RunStore, load_result
from moot.transcript import DebateResult
from test_arbitration import QATAR

TOPIC = "Should a small team write tests first?"
DATA = Path(__file__).resolve().parents[1] / "src/moot/data/absa_sentences.jsonl"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultServer]:
    """A local OpenAI-compatible endpoint answering every schema (see :func:`spec`)."""
    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)  # it reaches nothing but 127.0.0.1
    with FaultServer(lambda n, body, headers: Fate(content=schema_reply(body))) as srv:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        yield srv


@pytest.fixture
def spec(server: FaultServer) -> str:
    """The model spec of this test's server (its own port: no model resolved for another test)."""
    return f"openai:fake?base_url={server.url}"


def _turns(result: Any) -> int:
    """The turns a door's result holds (a debate's, ABSA's debate's, each ruling's)."""
    if isinstance(result, DebateResult):
        return len(result.turns(include_judge=True))
    if hasattr(result, "rulings"):
        return sum(r.turn is not None for r in result.rulings)
    if hasattr(result, "debate"):
        return len(result.debate.turns(include_judge=True)) if result.debate is not None else 0
    return 0


def _one_run(path: Path) -> Any:
    with RunStore(path) as store:
        runs = store.list()
        assert len(runs) == 1, [(r.kind, r.title) for r in runs]
        return runs[0]


def _node_graph(path: Path, m: str) -> Any:
    """A compiled graph whose one node is ``debate_node("answer")``, recording into ``path``."""
    from langgraph.graph import END, START, StateGraph

    from moot.integrations.langgraph import debate_node

    graph = StateGraph(dict)
    graph.add_node("answer", debate_node("answer", model=m, store=path))
    graph.add_edge(START, "answer")
    graph.add_edge("answer", END)
    return graph.compile()


async def _graph_node(path: Path, m: str) -> DebateResult:
    out = await _node_graph(path, m).ainvoke({"topic": TOPIC})
    return DebateResult.model_validate(out["debate"])


def _graph_node_sync(path: Path, m: str) -> DebateResult:
    out = _node_graph(path, m).invoke({"topic": TOPIC})
    return DebateResult.model_validate(out["debate"])


async def _subgraph(path: Path, m: str) -> DebateResult:
    from moot.integrations.langgraph import build_debate_graph

    graph = build_debate_graph("adversarial", model=m, store=path)
    out = await graph.ainvoke({"topic": TOPIC})
    return DebateResult.model_validate(out["result"])


async def _stream(path: Path, m: str) -> DebateResult:
    events = [e async for e in Debate("answer", model=m, store=path).stream(TOPIC)]
    assert events[-1].result is not None
    return events[-1].result


async def _bench(path: Path, out: Path, m: str) -> Any:
    config = BenchConfig(task="arithmetic", methods=["single"], n=2, model=m)
    model = resolve_model(m)
    try:
        return await run_bench(config, model=model, out=out, store=path)
    finally:
        await model.aclose()


Door = Callable[[Path, Path, str], Any]

DOORS: dict[str, tuple[Door, str, str]] = {
    # name: (door(store path, tmp dir, model spec) -> result, kind, status)
    "Debate.run_sync": (
        lambda p, t, m: Debate("answer", model=m, store=p).run_sync(TOPIC),
        "run",
        "complete",
    ),
    "Debate.run": (
        lambda p, t, m: asyncio.run(Debate("answer", model=m, store=p).run(TOPIC)),
        "run",
        "complete",
    ),
    "Debate.stream": (lambda p, t, m: asyncio.run(_stream(p, m)), "run", "complete"),
    "Debate.start().execute()": (
        lambda p, t, m: asyncio.run(Debate("answer", model=m, store=p).start(TOPIC).execute()),
        "run",
        "complete",
    ),
    "a skipped Debate": (
        lambda p, t, m: Debate("answer", model=m, store=p).run_sync(
            TOPIC, debate_mode=False, initial_answer="kept"
        ),
        "run",
        "skipped",
    ),
    "debate_node": (lambda p, t, m: asyncio.run(_graph_node(p, m)), "run", "complete"),
    "debate_node under app.invoke": (lambda p, t, m: _graph_node_sync(p, m), "run", "complete"),
    "build_debate_graph": (lambda p, t, m: asyncio.run(_subgraph(p, m)), "run", "complete"),
    "arbitrate(store=)": (
        lambda p, t, m: asyncio.run(arbitrate(QATAR, model=m, store=p)),
        "arbitrate",
        "complete",
    ),
    "arbitrate(debate=Debate(store=))": (
        lambda p, t, m: asyncio.run(arbitrate(QATAR, debate=Debate("arbitration", model=m, store=p))),
        "arbitrate",
        "complete",
    ),
    "run_absa": (
        lambda p, t, m: asyncio.run(run_absa("The battery life is terrible.", model=m, store=p)),
        "absa",
        "",
    ),
    "run_absa_batch": (
        lambda p, t, m: asyncio.run(
            run_absa_batch(["The battery is bad.", "Nice screen."], model=m, store=p)
        ),
        "absa",
        "",
    ),
    "run_bench": (lambda p, t, m: asyncio.run(_bench(p, t / "bench", m)), "bench", "complete"),
}


@pytest.mark.parametrize("door", list(DOORS))
def test_each_door_records_one_run_of_its_kind(
    door: str, server: FaultServer, spec: str, tmp_path: Path
) -> None:
    call, kind, status = DOORS[door]
    path = tmp_path / "runs.db"
    result = call(path, tmp_path, spec)
    run = _one_run(path)
    assert run.kind == kind
    if status:
        assert run.status == status
    else:  # ABSA on a server that answers any schema: complete, or fell back on a failed stage
        assert run.status in ("complete", "fell_back") and run.ended_at is not None
    with RunStore(path) as store:
        events = store.events(run.id)
        if kind == "run":
            stored = load_result(store, run.id)
            assert stored == result
            turns = [e for e in events if e.kind in ("turn_completed", "judge_completed")]
            assert len(turns) == _turns(result) == len(stored.turns(include_judge=True))
            assert (len(turns) == 0) == (status == "skipped")
        elif kind == "arbitrate":
            assert load_result(store, run.id) == result and _turns(result) == result.contradictions_found > 0
        elif kind == "absa" and isinstance(result, list):
            assert len(list(store.iter_items(run.id))) == len(result) == 2
        elif kind == "absa":
            assert load_result(store, run.id) == result
            turns = [e for e in events if e.kind in ("turn_completed", "judge_completed")]
            assert len(turns) == _turns(result) > 0
        else:  # bench: one unit per item and method
            assert len(load_result(store, run.id)) == len(result.records) == 2
    assert server.requests > 0 or status == "skipped"


def test_one_graph_with_debate_node_records_each_invoke_and_ainvoke_once(
    server: FaultServer, spec: str, tmp_path: Path
) -> None:
    """``app.invoke`` runs the node on a loop of its own, ``ainvoke`` on the caller's: one run each.

    The same compiled graph, and so the same model, serves both in turn: the sync path closes the
    connection pools of the loop it made, and the next call on another loop opens its own.
    """
    path = tmp_path / "runs.db"
    app = _node_graph(path, spec)
    first = app.invoke({"topic": TOPIC})["debate"]
    second = asyncio.run(app.ainvoke({"topic": TOPIC}))["debate"]
    third = app.invoke({"topic": TOPIC})["debate"]
    with RunStore(path) as store:
        runs = store.list()
        assert sorted(r.id for r in runs) == sorted(d["id"] for d in (first, second, third))
        for run in runs:
            assert run.kind == "run" and run.status == "complete"
            assert load_result(store, run.id).usage.calls == 5
    assert server.requests == 15


def test_the_stored_messages_are_what_the_server_received(
    server: FaultServer, spec: str, tmp_path: Path
) -> None:
    path = tmp_path / "runs.db"
    Debate("answer", model=spec, store=path).run_sync(TOPIC, context={"docs": ["d1"]})
    run = _one_run(path)
    with RunStore(path) as store:
        stored = load_result(store, run.id)
    sent = [[m.model_dump() for m in t.sent or []] for t in stored.turns(include_judge=True)]
    received = [body["messages"] for body in server.bodies]
    assert len(sent) == len(received) == server.requests > 0
    assert sorted(map(json.dumps, sent)) == sorted(map(json.dumps, received))
    system = sent[0][0]
    assert (
        system["role"] == "system" and TOPIC in system["content"] and '{"docs": ["d1"]}' in system["content"]
    )


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> int:
    code = main(argv)
    capsys.readouterr()
    return int(code or 0)


CLI = {
    "run": (["run", TOPIC, "--model", "{spec}", "--json"], "run"),
    "run --input": (
        ["run", "--input", "{topics}", "--output", "{tmp}/out.jsonl", "--model", "{spec}"],
        "run",
    ),
    "absa": (["absa", "The battery life is terrible.", "--model", "{spec}", "--json"], "absa"),
    "absa --input": (
        ["absa", "--input", "{sentences}", "--output", "{tmp}/absa.jsonl", "--model", "{spec}"],
        "absa",
    ),
    "arbitrate": (["arbitrate", "{reports}", "--model", "{spec}", "--json"], "arbitrate"),
    "absa-eval": (
        ["absa-eval", str(DATA), "--model", "{spec}", "--limit", "2", "--no-ablations", "--json"],
        "absa-eval",
    ),
    "bench": (
        "bench --task arithmetic --methods single --n 2 --model {spec} --out {tmp}/bench --no-plots".split(),
        "bench",
    ),
}


@pytest.mark.parametrize("command", list(CLI))
def test_each_command_records_one_run(
    command: str, spec: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv, kind = CLI[command]
    topics, sentences = tmp_path / "topics.jsonl", tmp_path / "sentences.jsonl"
    topics.write_text(json.dumps({"id": "a", "topic": TOPIC}) + "\n")
    sentences.write_text(json.dumps({"id": "a", "sentence": "The battery is bad."}) + "\n")
    reports = tmp_path / "reports.json"
    reports.write_text(json.dumps({"reports": QATAR}))
    path = tmp_path / "runs.db"
    filled = [
        a.format(topics=topics, sentences=sentences, tmp=tmp_path, reports=reports, spec=spec) for a in argv
    ]
    assert _cli([*filled, "--store", str(path)], capsys) in (0, 1)
    run = _one_run(path)
    assert run.kind == kind and run.status in ("complete", "fell_back") and run.ended_at is not None


def test_a_refused_bench_leaves_no_run_and_list_agrees_with_show(
    server: FaultServer, spec: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "runs.db"
    argv = ["bench", "--task", "arithmetic", "--methods", "single", "--n", "2", "--model", spec]
    argv += ["--out", str(tmp_path / "bench"), "--no-plots", "--store", str(path)]
    assert _cli(argv, capsys) == 0
    assert _cli(argv, capsys) == 2  # the --out already holds results: refused before any call
    run = _one_run(path)  # still the one run
    assert main(["runs", "list", "--json", "--store", str(path)]) in (0, None)
    (row,) = json.loads(capsys.readouterr().out)["runs"]
    assert main(["runs", "show", run.id, "--json", "--store", str(path)]) in (0, None)
    shown = json.loads(capsys.readouterr().out)
    assert {k: v for k, v in shown.items() if k not in ("result", "items")} | {"protocol": "single"} == row
    assert row["usage"]["calls"] == server.requests > 0  # a bench unit record counts calls only


def test_run_list_and_show_agree_on_a_debate_usage(
    server: FaultServer, spec: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "runs.db"
    assert _cli(["run", TOPIC, "--model", spec, "--store", str(path)], capsys) == 0
    assert main(["runs", "list", "--json", "--store", str(path)]) in (0, None)
    (row,) = json.loads(capsys.readouterr().out)["runs"]
    assert main(["runs", "show", row["id"], "--json", "--store", str(path)]) in (0, None)
    shown = json.loads(capsys.readouterr().out)
    assert {k: v for k, v in shown.items() if k != "result"} | {"protocol": "answer"} == row
    assert row["usage"] == shown["result"]["usage"] and row["usage"]["attempts"] == server.requests
