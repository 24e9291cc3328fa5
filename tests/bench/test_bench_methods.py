from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from bench_helpers import gold_of, oracle, reply_for

from moot.bench.methods import MethodContext, parse_method, run_method
from moot.bench.records import ItemRecord
from moot.bench.runner import BenchConfig, BenchRun, expand_methods, run_bench
from moot.bench.summary import comparisons, round_summaries, summarize
from moot.bench.tasks import ArithmeticTask
from moot.errors import UsageError
from moot.models import FunctionModel, Message, ModelRequest

# Known per-call correctness: PLAN[item][round][agent]; the same for every method.
PLAN = {
    0: [["right", "right", "right"], ["right", "right", "right"]],
    1: [["wrong", "right", "right"], ["right", "right", "right"]],
    2: [["right", "wrong", "wrong"], ["wrong", "wrong", "wrong"]],
    3: [["junk", "junk", "wrong"], ["right", "right", "wrong"]],
}


def plan(item: int, agent: int, round_: int) -> str:
    return PLAN[item][round_][agent]


def _run(tmp_path: Path, methods: list[str], model: FunctionModel, n: int = 4, **kw: object) -> BenchRun:
    config = BenchConfig(task="arithmetic", methods=methods, n=n, **kw)  # type: ignore[arg-type]
    return asyncio.run(run_bench(config, model=model, out=tmp_path / "out"))


def test_scripted_model_gives_exact_accuracy_votes_and_flips(tmp_path: Path) -> None:
    model = oracle(plan, delay=0.005)
    run = _run(tmp_path, ["single", "vote:3", "society:3:2"], model, concurrency=3)
    assert run.complete and not run.failures
    by = {m: [r for r in run.records if r.method == m] for m in ("single", "vote:3", "society:3:2")}
    assert [r.correct for r in by["single"]] == [True, False, True, False]
    assert [r.correct for r in by["vote:3"]] == [True, True, False, False]
    assert [r.correct for r in by["society:3:2"]] == [True, True, False, True]

    single, vote, society = (summarize(m, by[m]) for m in ("single", "vote:3", "society:3:2"))
    assert (single.correct, single.parse_failures) == (2, 1)  # item 3: junk is a parse failure, and wrong
    assert (vote.correct, vote.parse_failures) == (2, 0)  # item 3: the only parsed answer is wrong
    assert (society.correct, society.round0_correct, society.parse_failures) == (3, 2, 0)
    assert (single.calls, vote.calls, society.calls) == (4, 12, 24)
    assert model.max_in_flight >= 3  # agents of a round, and units, run concurrently

    r0, r1 = round_summaries("society:3:2", by["society:3:2"])
    assert (r0.vote_correct, r0.agent_correct, r0.parse_failures) == (2, 6, 2)
    assert (r1.vote_correct, r1.agent_correct) == (3, 8)
    # right->wrong: item 2 agent 0; wrong->right: item 1 agent 0, item 3 agents 0 and 1 (junk counts as wrong)
    assert (r1.right_to_wrong, r1.wrong_to_right) == (1, 3)

    society_rec = by["society:3:2"][3]
    assert [[a.answer is None for a in rnd] for rnd in society_rec.rounds] == [
        [True, True, False],
        [False, False, False],
    ]
    tests = {(t.a, t.b): t for t in comparisons(run.specs, run.records)}
    t = tests[("society:3:2", "single")]
    assert (t.both, t.only_a, t.only_b, t.p_value, t.test) == (1, 2, 1, 1.0, "exact")


def test_every_method_shares_round_0_samples_with_routable_metadata(tmp_path: Path) -> None:
    # Agent i's first sample is one call for single, vote:3 and society:3:2: same prompt and seed.
    model = oracle(lambda i, a, r: "right" if (i + a + r) % 2 else "wrong", delay=0.005)
    run = _run(tmp_path, ["single", "vote:3", "society:3:2"], model, n=3, concurrency=3)
    first = [r for r in model.requests if r.metadata["round"] == 0]
    assert sorted((r.metadata["item"], r.metadata["speaker"]) for r in first) == sorted(
        (f"arithmetic-{i}", f"agent{a}") for i in range(3) for a in range(3)
    )  # each once, whichever method asked first
    assert all(len(r.messages) == 1 for r in first)
    assert set(model.requests[0].metadata) >= {"speaker", "round", "method", "item", "phase"}
    assert len(model.requests) == 3 * (3 + 3)  # round 0 once, then the society's round 1
    by = {(r.item_id, r.method): r for r in run.records}
    for i in range(3):
        vote, society, single = (by[(f"arithmetic-{i}", m)] for m in ("vote:3", "society:3:2", "single"))
        texts = [a.text for a in vote.rounds[0]]
        assert texts == [a.text for a in society.rounds[0]]
        assert single.rounds[0][0].text == texts[0]
        assert vote.calls == society.calls - 3 == 3  # each method still counts the samples it used
    # Common random numbers: agent a of round 0 has the same seed whatever the method.
    seeds = {(r.metadata["item"], r.metadata["speaker"]): r.seed for r in first}
    assert len(set(seeds.values())) == len(seeds)


def test_society_agents_see_all_peers_of_the_previous_round_only() -> None:
    replies = {(a, r): f"agent {a} round {r} says ({100 * r + a})" for a in range(3) for r in range(3)}

    def fn(request: ModelRequest) -> str:
        return replies[(int(request.metadata["speaker"][5:]), request.metadata["round"])]

    model = FunctionModel(fn)
    task = ArithmeticTask()
    item = task.items(1, 0)[0]
    record = asyncio.run(run_method(parse_method("society:3:3"), item, MethodContext(model=model, task=task)))
    assert record.calls == 9 and len(record.rounds) == 3
    for request in model.requests:
        agent, rnd = int(request.metadata["speaker"][5:]), request.metadata["round"]
        assert len(request.messages) == 1 + 2 * rnd
        if rnd == 0:
            continue
        own, debate = request.messages[-2], request.messages[-1]
        assert (own.role, own.content) == ("assistant", replies[(agent, rnd - 1)])
        for peer in range(3):
            assert (replies[(peer, rnd - 1)] in debate.content) is (peer != agent)
            if rnd == 2:
                assert replies[(peer, 0)] not in debate.content  # never a mix of rounds
    assert record.final == "200"  # plurality of the last round: all differ, so agent 0's


def test_early_stop_and_debate_if_disagree_save_calls(tmp_path: Path) -> None:
    def plan3(item: int, agent: int, round_: int) -> str:
        if item == 0:
            return "right"  # unanimous from round 0
        if item == 1:
            return "right" if round_ >= 1 else ["wrong", "right", "right"][agent]  # unanimous from round 1
        return ["junk", "junk", "junk"][agent]  # all parse failures: not an agreement

    run = _run(
        tmp_path,
        ["society:3:3", "society:3:3:early_stop", "society:3:3:debate_if_disagree"],
        oracle(plan3),
        n=3,
    )
    calls = {(r.method, r.item_id): (r.calls, r.stopped_early) for r in run.records}
    assert calls[("society:3:3", "arithmetic-0")] == (9, False)
    assert calls[("society:3:3:early_stop", "arithmetic-0")] == (3, True)
    assert calls[("society:3:3:early_stop", "arithmetic-1")] == (6, True)
    assert calls[("society:3:3:early_stop", "arithmetic-2")] == (9, False)
    assert calls[("society:3:3:debate_if_disagree", "arithmetic-0")] == (3, True)
    assert calls[("society:3:3:debate_if_disagree", "arithmetic-1")] == (9, False)
    es = summarize("es", [r for r in run.records if r.method == "society:3:3:early_stop"])
    assert (es.nominal_calls, es.calls, es.calls_saved, es.stopped_early) == (27, 18, 9, 2)
    assert es.correct == 2 and es.parse_failures == 1
    # Per-round accuracy carries stopped items forward.
    rounds = round_summaries("es", [r for r in run.records if r.method == "society:3:3:early_stop"])
    assert [r.items_ran for r in rounds] == [3, 2, 1]
    assert [r.vote_correct for r in rounds] == [2, 2, 2]  # item 1 round 0: 2 of 3 right


def test_parse_failure_is_never_correct(tmp_path: Path) -> None:
    run = _run(tmp_path, ["single", "vote:5"], oracle(lambda i, a, r: "junk"), n=3)
    assert all(r.parse_failed and not r.correct and r.final is None for r in run.records)


@pytest.mark.parametrize(
    ("spec", "name", "calls"),
    [("single", "single", 1), ("vote:5", "vote:5", 5), ("society:3:2", "society:3:2", 6)],
)
def test_parse_method(spec: str, name: str, calls: int) -> None:
    parsed = parse_method(spec)
    assert (parsed.name, parsed.nominal_calls) == (name, calls)


@pytest.mark.parametrize(
    "spec", ["vote", "vote:0", "vote:x", "society:1:2", "society:3", "society:3:2:maybe", ""]
)
def test_parse_method_errors(spec: str) -> None:
    with pytest.raises(UsageError):
        parse_method(spec)


def test_unknown_preset_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="unknown method"):
        parse_method("no-such-preset")


def test_matched_adds_votes_with_the_debates_call_count() -> None:
    names = [
        s.name for s in expand_methods(["single", "society:3:2", "society:2:3:early_stop", "vote:6"], True)
    ]
    assert names == ["single", "society:3:2", "vote:6", "society:2:3:early_stop"]
    with pytest.raises(UsageError):
        expand_methods([" "], False)


def test_presets_run_through_the_engine_and_are_parsed_by_the_task(tmp_path: Path) -> None:
    def fn(request: ModelRequest) -> dict[str, object]:
        # The engine puts the topic in the system message: find the expression anywhere.
        text = " ".join(m.content for m in request.messages)
        gold = gold_of(ModelRequest(messages=[Message(role="user", content=text)]))
        props = (request.json_schema or {}).get("properties", {})
        if "final_answer" in props:
            return {"final_answer": reply_for("right", gold), "confidence": 0.9}
        return {"answer": reply_for("wrong", gold), "confidence": 0.5}

    spec = parse_method("answer")
    assert spec.kind == "preset" and spec.nominal_calls == 5
    run = _run(tmp_path, ["answer"], FunctionModel(fn), n=2, matched=True)
    assert [s.name for s in run.specs] == ["answer", "vote:5"]
    preset = [r for r in run.records if r.method == "answer"]
    assert len(preset) == 2 and all(r.correct for r in preset)
    assert all(len(r.rounds) == 2 and len(r.rounds[0]) == 2 for r in preset)
    assert all(not a.correct for r in preset for rnd in r.rounds for a in rnd)
    assert all(r.calls == 5 for r in preset)
    # Each speaker's answer keeps the messages its turn was sent: the persona's system prompt first.
    for record in preset:
        for answers in record.rounds:
            for answer in answers:
                sent = record.sent_to(answer)
                assert sent and sent[0].role == "system" and answer.usage is not None
        assert any("result of" in m.content for m in record.messages)  # the item's question, as sent

    # The engine's final text is stored, so a rescore parses it again as a live run does.
    from moot.bench.methods import rescore
    from moot.bench.tasks import make_task

    task = make_task("arithmetic")
    items = {i.id: i for i in task.items(2, 0)}
    for record in preset:
        assert record.final_text and record.final in record.final_text
        stale = record.model_copy(update={"final": None, "correct": False, "parse_failed": True})
        assert rescore(stale, items[record.item_id], task) == record


def test_a_preset_whose_backend_is_down_is_a_failed_unit_not_a_wrong_answer(tmp_path: Path) -> None:
    from moot.bench.runner import RESULTS_FILE
    from moot.errors import ModelConnectionError

    def down(request: ModelRequest) -> dict[str, object]:
        raise ModelConnectionError("connection refused", model="test")

    from moot.bench.runner import BenchConfig, run_bench

    config = BenchConfig(task="arithmetic", methods=["answer"], n=2)
    run = asyncio.run(run_bench(config, model=FunctionModel(down), out=tmp_path, unit_retries=0))
    assert not run.records and not run.complete
    assert {f[1] for f in run.failures} == {"answer"} and all("backend failed" in f[2] for f in run.failures)
    assert (tmp_path / RESULTS_FILE).read_text(encoding="utf-8") == ""


def test_absa_bench_scores_labels_with_the_tasks_parser(tmp_path: Path) -> None:
    from moot.bench.tasks import make_task

    items = make_task("absa").items(12, 0)
    gold = {i.id: i.gold for i in items}

    def fn(request: ModelRequest) -> str:
        # agent 0 always says negative, the others are right; debate rounds repeat round 0.
        agent = int(str(request.metadata["speaker"]).removeprefix("agent"))
        label = "negative" if agent == 0 else gold[str(request.metadata["item"])]
        return f"Looking at the aspect, the sentiment is ({label})."

    config = BenchConfig(task="absa", methods=["single", "vote:3", "society:3:2"], n=12)
    run = asyncio.run(run_bench(config, model=FunctionModel(fn), out=tmp_path / "out"))
    assert run.complete and not run.failures
    by = {
        m: summarize(m, [r for r in run.records if r.method == m])
        for m in ("single", "vote:3", "society:3:2")
    }
    negatives = sum(g == "negative" for g in gold.values())
    assert 0 < negatives < 12
    assert (by["single"].correct, by["single"].parse_failures) == (negatives, 0)
    assert by["vote:3"].correct == by["society:3:2"].correct == 12


def test_rescore_parses_stored_replies_again_like_a_live_run(tmp_path: Path) -> None:
    from moot.bench.methods import rescore
    from moot.bench.tasks import make_task

    run = _run(tmp_path, ["single", "society:3:2"], oracle(lambda i, a, r: "right" if a else "junk"), n=3)
    task = make_task("arithmetic")
    items = {i.id: i for i in task.items(3, 0)}
    for record in run.records:
        # What an older parser might have stored: every answer lost.
        stale = record.model_copy(
            update={
                "final": None,
                "correct": False,
                "rounds": [[a.model_copy(update={"answer": None}) for a in rnd] for rnd in record.rounds],
            }
        )
        assert rescore(stale, items[record.item_id], task) == record
    # A preset's record from before final texts were stored cannot be rescored, and says why.
    preset = run.records[0].model_copy(
        update={"rounds": [[run.records[0].rounds[0][0].model_copy(update={"agent": "proponent"})]]}
    )
    with pytest.raises(UsageError, match="cannot be rescored: it was written before"):
        rescore(preset, items[preset.item_id], task)


def test_a_preset_cut_off_by_its_deadline_before_any_turn_is_a_failed_unit() -> None:
    from moot.engine import Debate
    from moot.errors import RunError

    async def go() -> None:
        hung = FunctionModel(lambda request: {"answer": "(1)", "confidence": 0.5}, delay=30)
        ctx = MethodContext(model=hung, task=ArithmeticTask())
        ctx._debates["answer"] = Debate("answer", model=hung, overrides={"timeout": 0.2})
        item = ArithmeticTask().items(1, 0)[0]
        with pytest.raises(RunError, match="no turn finished"):
            await asyncio.wait_for(run_method(parse_method("answer"), item, ctx), 10)

    asyncio.run(go())


def test_every_answer_keeps_the_messages_its_agent_was_sent_once_per_unit() -> None:
    from moot.errors import ModelHTTPError
    from moot.models.retry import RetryPolicy

    failed: set[str] = set()

    def fn(request: ModelRequest) -> str:
        key = f"{request.metadata['speaker']}:{request.metadata['round']}"
        if key == "agent1:1" and key not in failed:  # one transient failure, retried
            failed.add(key)
            raise ModelHTTPError(502, "bad gateway")
        return reply_for("right", gold_of(request))

    model = FunctionModel(fn)
    task = ArithmeticTask()
    item = task.items(1, 0)[0]
    ctx = MethodContext(model=model, task=task, policy=RetryPolicy(base_delay=0.001, max_delay=0.001))
    record = asyncio.run(run_method(parse_method("society:3:2"), item, ctx))
    # Each answer's messages, rebuilt from the unit's table, are exactly what its request carried.
    sent = {
        (int(str(r.metadata["speaker"]).removeprefix("agent")), int(r.metadata["round"])): r.messages
        for r in model.requests
    }
    for rnd, answers in enumerate(record.rounds):
        for i, answer in enumerate(answers):
            assert record.sent_to(answer) == sent[(i, rnd)]
            assert answer.usage is not None and answer.usage.calls == 1 and answer.latency_s is not None
    assert record.message(0) == Message(role="user", content=item.prompt)  # round 0's, stored once
    assert [a.sent for a in record.rounds[0]] == [[0], [0], [0]]
    whole = [record.message(i) for i in range(len(record.messages))]
    assert len(whole) == len({(m.role, m.content) for m in whole})
    retried = record.rounds[1][1]
    assert [(r.error_kind, r.status) for r in retried.retries] == [("ModelHTTPError", 502)]
    assert retried.usage is not None and retried.usage.attempts == 2
    # Stored and read back (results.jsonl, the run store) without loss.
    again = ItemRecord.model_validate_json(record.model_dump_json())
    assert again == record and again.sent_to(again.rounds[1][2]) == sent[(2, 1)]


def test_a_reply_quoted_in_later_prompts_is_stored_once() -> None:
    def fn(request: ModelRequest) -> str:
        speaker, rnd = request.metadata["speaker"], request.metadata["round"]
        return f"{speaker} reasons at length in round {rnd}, " * 6 + f"so ({gold_of(request)})."

    model = FunctionModel(fn)
    task = ArithmeticTask()
    item = task.items(1, 0)[0]
    record = asyncio.run(run_method(parse_method("society:3:3"), item, MethodContext(model=model, task=task)))
    sent = {
        (int(str(r.metadata["speaker"]).removeprefix("agent")), int(r.metadata["round"])): r.messages
        for r in model.requests
    }
    for rnd, answers in enumerate(record.rounds):
        for i, answer in enumerate(answers):
            assert record.sent_to(answer) == sent[(i, rnd)]  # rebuilt exactly as sent
    stored = json.loads(record.model_dump_json())
    replies = [a.text for answers in record.rounds for a in answers]
    kept = json.dumps(stored["messages"])
    assert all(reply not in kept for reply in replies)  # each reply once: in its answer
    assert any(isinstance(p, list) for m in stored["messages"] for p in m.get("parts", []))
    assert ItemRecord.model_validate(stored).sent_to(record.rounds[2][1]) == sent[(1, 2)]


def test_an_older_record_without_messages_still_reads() -> None:
    old = {
        "item_id": "x",
        "method": "single",
        "gold": "1",
        "final": "1",
        "correct": True,
        "parse_failed": False,
        "rounds": [[{"agent": "agent0", "answer": "1", "correct": True, "text": "(1)"}]],
    }
    record = ItemRecord.model_validate(old)
    assert record.messages == [] and record.sent_to(record.rounds[0][0]) is None
    assert "sent" not in record.model_dump(mode="json")["rounds"][0][0]  # empty fields stay out
