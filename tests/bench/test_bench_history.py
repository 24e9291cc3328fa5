"""``moot bench --history window:N``: a society's prompts carry a bounded history; presets get it too."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from bench_helpers import gold_of, reply_for

from moot.bench.methods import MethodContext, parse_method, run_method
from moot.bench.records import ItemRecord
from moot.bench.report import build_report, render_markdown
from moot.bench.runner import BenchConfig, parse_history, run_bench
from moot.bench.tasks import ArithmeticTask
from moot.cli import main
from moot.errors import UsageError
from moot.history import fit_exchanges, left_out_note, message_tokens
from moot.models import FunctionModel, Message, ModelRequest
from moot.models.pricing import estimate_tokens
from moot.protocol import HistorySpec

NOTE = re.compile(r"The (\d+) earliest turns of this debate are left out")
PAD = "Let me work through it again, carefully, one operation after another. " * 4  # ~290 characters


def _talkative(request: ModelRequest) -> str:
    """A right answer after ~300 characters of working: a few rounds pass a small history budget."""
    return PAD + reply_for("right", gold_of(request))


def _society(spec: str, history: HistorySpec | None, model: FunctionModel, **kw: object) -> ItemRecord:
    task = ArithmeticTask()
    item = task.items(1, 0)[0]
    ctx = MethodContext(model=model, task=task, history=history, **kw)  # type: ignore[arg-type]
    return asyncio.run(run_method(parse_method(spec), item, ctx))


def _left_out(message: Message) -> int:
    found = NOTE.search(message.content)
    return int(found[1]) if found else 0


def test_a_society_prompt_never_carries_more_than_n_tokens_of_history_and_says_what_it_left_out() -> None:
    n = 500
    bounded = FunctionModel(_talkative)
    record = _society("society:3:6", HistorySpec(max_tokens=n), bounded)
    whole = FunctionModel(_talkative)
    _society("society:3:6", None, whole)
    full = {(r.metadata["speaker"], r.metadata["round"]): r.messages for r in whole.requests}
    shortened = 0
    for request in bounded.requests:
        rnd, messages = int(request.metadata["round"]), request.messages
        before = full[(request.metadata["speaker"], rnd)]
        assert messages[0] == before[0]  # the question, always
        roles = [m.role for m in messages]
        assert roles == ["user"] + ["assistant", "user"] * ((len(messages) - 1) // 2)  # alternating
        history = messages[1:]
        kept = len(history) // 2
        assert message_tokens(history) <= n or kept == 1  # the latest exchange is kept whole
        left = _left_out(messages[-1])
        assert left == (rnd - kept)  # says exactly how many earlier exchanges were left out
        # The latest debate prompt is whole (the note only added after it); the kept ones are the latest.
        assert messages[-1].content == before[-1].content + left_out_note(left)
        assert history[:-1] == before[len(before) - len(history) : -1]
        shortened += left > 0
    assert shortened > 0  # the budget bound: rounds 2 to 5 left exchanges out
    assert record.history_shortened == shortened
    assert record.history_left_out == sum(_left_out(r.messages[-1]) for r in bounded.requests)
    # What each answer's record says it was sent is what was sent, note included.
    sent = {(r.metadata["speaker"], r.metadata["round"]): r.messages for r in bounded.requests}
    for rnd, answers in enumerate(record.rounds):
        for i, answer in enumerate(answers):
            assert record.sent_to(answer) == sent[(f"agent{i}", rnd)]


def test_the_first_round_is_unchanged_and_a_roomy_budget_changes_nothing() -> None:
    tight, roomy, none = (FunctionModel(_talkative) for _ in range(3))
    _society("society:3:4", HistorySpec(max_tokens=200), tight)
    record = _society("society:3:4", HistorySpec(max_tokens=100_000), roomy)
    _society("society:3:4", None, none)

    def first(model: FunctionModel) -> list[list[Message]]:
        return [r.messages for r in model.requests if r.metadata["round"] == 0]

    assert first(tight) == first(roomy) == first(none)
    assert [r.messages for r in roomy.requests] == [r.messages for r in none.requests]
    assert record.history_shortened == 0 and record.history_left_out == 0
    # Round 1 carries one exchange: always kept, even past the budget, with no note.
    assert all(
        len(r.messages) == 3 and not _left_out(r.messages[-1])
        for r in tight.requests
        if r.metadata["round"] == 1
    )


def test_fit_exchanges_keeps_the_latest_whole_and_counts_what_it_left_out() -> None:
    question = [Message(role="user", content="Q?")]
    pairs = [
        (
            Message(role="assistant", content=f"answer {k} " + "x" * 300),
            Message(role="user", content=f"peers {k}"),
        )
        for k in range(5)
    ]
    fitted = fit_exchanges(None, question, pairs, prompt_limit=None, max_tokens=300)
    assert fitted.left_out == 3 and fitted.messages[0] == question[0]
    assert fitted.messages[1].content.startswith("answer 3") and fitted.messages[-1].content.startswith(
        "peers 4"
    )
    assert fitted.messages[-1].content == "peers 4" + left_out_note(3)
    assert message_tokens(fitted.messages[1:]) <= 300
    alone = fit_exchanges(None, question, pairs, prompt_limit=None, max_tokens=10)  # even one passes it
    assert alone.left_out == 4 and len(alone.messages) == 3
    nothing = fit_exchanges(None, question, pairs, prompt_limit=None, max_tokens=None)
    assert nothing.left_out == 0 and len(nothing.messages) == 11
    window = fit_exchanges(None, question, pairs, prompt_limit=300, max_tokens=None)
    assert window.tokens == estimate_tokens(None, window.messages) <= 300
    assert window.left_out == 3


def test_without_the_option_a_prompt_past_the_known_window_is_shortened_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = FunctionModel(_talkative)
    model.context_window = 700  # ?context_window=700: known without asking a server
    with caplog.at_level(logging.WARNING, "moot"):
        record = _society("society:3:6", None, model, max_tokens=100)
        _society("society:3:6", None, FunctionModel(_talkative), max_tokens=100)  # no window: no warning
    for request in model.requests:
        assert estimate_tokens(model, request.messages) <= 700 - 100 or len(request.messages) == 3
    assert record.history_shortened > 0
    said = [r.getMessage() for r in caplog.records if "context window" in r.getMessage()]
    assert len(said) == 1, said
    assert "700-token context window" in said[0] and "--history window:N" in said[0]


def test_a_preset_gets_the_history_as_its_protocols_and_records_what_the_engine_shortened(
    tmp_path: Path,
) -> None:
    def fn(request: ModelRequest) -> dict[str, object]:
        text = " ".join(m.content for m in request.messages)
        gold = gold_of(ModelRequest(messages=[Message(role="user", content=text)]))
        props = (request.json_schema or {}).get("properties", {})
        if "final_answer" in props:
            return {"final_answer": reply_for("right", gold), "confidence": 0.9}
        return {"answer": PAD + reply_for("right", gold), "confidence": 0.5}

    ctx = MethodContext(model=FunctionModel(fn), task=ArithmeticTask(), history=HistorySpec(max_tokens=40))
    history = ctx.debate("adversarial").protocol.history
    assert history is not None and (history.strategy, history.max_tokens) == ("window", 40)
    summarize = MethodContext(model=ctx.model, task=ctx.task, history=parse_history("summarize:300"))
    assert summarize.debate("answer").protocol.history.strategy == "summarize"

    config = BenchConfig(task="arithmetic", methods=["answer"], n=2, history=HistorySpec(max_tokens=40))
    run = asyncio.run(run_bench(config, model=FunctionModel(fn), out=tmp_path / "out"))
    assert run.complete and all(r.history_shortened > 0 and r.history_left_out > 0 for r in run.records)
    from moot.bench.runner import run_outcome

    assert run_outcome(run)["summary"]["history_shortened"] == {
        "answer": sum(r.history_shortened for r in run.records)
    }
    text = render_markdown(build_report(run))
    assert "--history window:40" in text and "calls had their history shortened" in text


@pytest.mark.parametrize("value", ["window:0", "foo:3", "window", "window:-5", "window:1.5", "window: 3", ""])
def test_a_bad_history_is_one_usage_error_and_writes_nothing(
    value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "o"
    argv = [
        "bench",
        "--methods",
        "society:3:2",
        "--n",
        "2",
        "--history",
        value,
        "--out",
        str(out),
        "--no-plots",
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("moot: error:") and "window:N" in err[0]
    assert not out.exists()


def test_summarize_names_the_society_method_and_needs_a_preset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "o"
    argv = ["bench", "--methods", "single,society:3:4", "--n", "2", "--history", "summarize:300"]
    assert main([*argv, "--out", str(out), "--no-plots"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("moot: error:")
    assert "society:3:4" in err[0] and "preset" in err[0]
    assert not out.exists()
    with pytest.raises(UsageError, match="society:3:2 cannot summarize"):
        _society("society:3:2", HistorySpec(max_tokens=300, strategy="summarize"), FunctionModel(_talkative))
    # A preset may: the dry run lays it out.
    argv = ["bench", "--methods", "answer", "--n", "2", "--history", "summarize:300", "--dry-run"]
    assert main([*argv, "--model", "openai:gpt-4o-mini", "--out", str(out), "--no-plots"]) in (0, None)


def test_resume_with_another_history_is_refused_and_an_older_run_without_it_resumes(tmp_path: Path) -> None:
    out = tmp_path / "run"
    config = BenchConfig(task="arithmetic", methods=["society:3:3"], n=2, history=HistorySpec(max_tokens=300))
    asyncio.run(run_bench(config, model=FunctionModel(_talkative), out=out))
    other = config.model_copy(update={"history": HistorySpec(max_tokens=400), "n": 3})
    with pytest.raises(UsageError, match="different history"):
        asyncio.run(run_bench(other, model=FunctionModel(_talkative), out=out, resume=True))
    with pytest.raises(UsageError, match="different history"):
        asyncio.run(
            run_bench(
                config.model_copy(update={"history": None}),
                model=FunctionModel(_talkative),
                out=out,
                resume=True,
            )
        )
    more = asyncio.run(
        run_bench(config.model_copy(update={"n": 3}), model=FunctionModel(_talkative), out=out, resume=True)
    )
    assert more.complete and more.resumed == 2

    # A run.json and results.jsonl written before --history existed: no field, resumed without it.
    older = tmp_path / "older"
    plain = BenchConfig(task="arithmetic", methods=["society:3:2"], n=1)
    asyncio.run(run_bench(plain, model=FunctionModel(_talkative), out=older))
    meta = json.loads((older / "run.json").read_text())
    meta.pop("history")
    (older / "run.json").write_text(json.dumps(meta))
    lines = [json.loads(x) for x in (older / "results.jsonl").read_text().splitlines()]
    for line in lines:
        line.pop("history_shortened"), line.pop("history_left_out")
    (older / "results.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    again = asyncio.run(
        run_bench(plain.model_copy(update={"n": 2}), model=FunctionModel(_talkative), out=older, resume=True)
    )
    assert again.complete and again.resumed == 1 and again.records[0].history_shortened == 0


def test_the_cli_resume_refuses_another_history(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_provider: Callable[..., None]
) -> None:
    fake_provider("histcli", lambda rest: FunctionModel(_talkative))
    out = tmp_path / "o"
    argv = ["bench", "--methods", "society:3:3", "--n", "2", "--model", "histcli:a", "--no-plots"]
    assert main([*argv, "--history", "window:300", "--out", str(out)]) == 0
    capsys.readouterr()
    assert "--history window:300" in (out / "report.md").read_text()
    assert main([*argv, "--history", "window:400", "--resume", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "different history" in err[0]
    assert main([*argv, "--resume", str(out)]) == 0  # not given: the recorded one is kept


def _prompt_tokens(out: str, method: str) -> int:
    found = re.search(rf"{re.escape(method)}: [\d,]+ calls · ~([\d,]+) prompt", out)
    assert found, out
    return int(found[1].replace(",", ""))


def test_dry_run_shows_what_the_history_saves(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "--methods", "society:3:5", "--n", "10", "--model", "openai:gpt-4o-mini", "--dry-run"]
    argv += ["--out", str(tmp_path / "o"), "--no-plots"]
    assert main(argv) in (0, None)
    whole = _prompt_tokens(capsys.readouterr().out, "society:3:5")
    assert main([*argv, "--history", "window:300"]) in (0, None)
    bounded = _prompt_tokens(capsys.readouterr().out, "society:3:5")
    assert bounded < whole * 0.7  # rounds 2 to 4 keep only their latest exchange (one passes 300)
    assert not (tmp_path / "o").exists()


def test_the_cli_says_the_window_warning_once_and_the_report_counts_the_shortened_calls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_provider: Callable[..., None]
) -> None:
    def windowed(rest: str) -> FunctionModel:
        model = FunctionModel(_talkative)
        model.context_window = 700
        return model

    fake_provider("histwin", windowed)
    out = tmp_path / "o"
    argv = ["bench", "--methods", "society:3:5", "--n", "3", "--model", "histwin:a", "--max-tokens", "100"]
    assert main([*argv, "--out", str(out), "--no-plots"]) == 0
    err = capsys.readouterr().err
    assert sum("context window" in line for line in err.splitlines()) == 1, err
    report = (out / "report.md").read_text()
    assert "- history: none set" in report and "calls had their history shortened" in report
