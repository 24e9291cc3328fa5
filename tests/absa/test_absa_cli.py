"""``moot absa`` and ``moot absa-eval`` through the main CLI entry point."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from moot.absa import FinalResult
from moot.cli import main
from moot.models import ModelRequest
from moot.models.testing import FunctionModel

from .scripts import aspect_free_reply
from .test_dataset_eval import gold_brain


def brain(request: ModelRequest) -> dict[str, Any]:
    """Answers any sentence: one aspect-free positive reading (and the gold answer for en-002)."""
    prompt = request.messages[0].content
    if "The battery life is terrible." in prompt or request.metadata["speaker"] in (
        "analyst",
        "critic",
        "empath",
        "judge",
    ):
        return gold_brain(request)
    return aspect_free_reply(request)


@pytest.fixture(autouse=True)
def absa_provider(fake_provider: Callable[..., None]) -> None:
    fake_provider("absafake", lambda rest: FunctionModel(brain, name=f"absafake:{rest}"))


def test_single_sentence_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["absa", "The battery life is terrible.", "--model", "absafake:x", "--json"]) == 0
    res = FinalResult.model_validate_json(capsys.readouterr().out)
    assert res.label == "negative" and [a["aspect"] for a in res.aspects] == ["battery life"]


def test_single_sentence_human(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["absa", "The battery life is terrible.", "--model", "absafake:x", "--config", "abl_no_debate"])
        == 0
    )
    out = capsys.readouterr().out
    assert "negative" in out and "battery life" in out and "rules" in out and "moderator" in out


def test_batch_writes_one_line_per_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inp = tmp_path / "in.jsonl"
    inp.write_text(
        '{"id": "a", "sentence": "The battery life is terrible."}\n\n"Nice place."\n'
        '{"text": "Lovely staff."}\n',
        encoding="utf-8",
    )
    out = tmp_path / "out.jsonl"
    code = main(
        [
            "absa",
            "--input",
            str(inp),
            "--output",
            str(out),
            "--model",
            "absafake:x",
            "--concurrency",
            "2",
            "--report",
        ]
    )
    assert code == 0
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert sorted(line["id"] for line in lines) == ["3", "4", "a"]
    by_id = {line["id"]: line for line in lines}
    assert by_id["a"]["label"] == "negative" and by_id["3"]["label"] == "positive"
    captured = capsys.readouterr()
    assert "debate_mapping_coverage" in captured.out
    assert "wrote 3 results" in captured.err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["absa"], "give a SENTENCE"),
        (["absa", "x", "--input", "in.jsonl", "--output", "o.jsonl"], "not both"),
        (["absa", "--input", "in.jsonl"], "--output"),
        (["absa", "--input", "missing.jsonl", "--output", "o.jsonl"], "input file not found"),
        (["absa", "x", "--config", "nope.yaml"], "no such ABSA config"),
        (["absa", "x", "--model", "absafake:x", "--config", "bad.yaml"], "unknown config key 'enable_debat'"),
        (["absa", "--input", "bad.jsonl", "--output", "o.jsonl"], "line 2"),
        (["absa-eval", "missing.jsonl"], "dataset not found"),
    ],
)
def test_usage_errors_exit_2(
    argv: list[str],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.jsonl").write_text('"x"\n')
    (tmp_path / "bad.yaml").write_text("enable_debat: true\n")
    (tmp_path / "bad.jsonl").write_text('{"sentence": "ok"}\n{"id": 2}\n')
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_absa_eval_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from moot.absa import load_dataset

    data = tmp_path / "d.jsonl"
    data.write_text(
        "\n".join(i.model_dump_json() for i in load_dataset(limit=2)[1:]) + "\n", encoding="utf-8"
    )
    assert main(["absa-eval", str(data), "--model", "absafake:x", "--json"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert list(scores) == ["default", "abl_no_debate_override", "abl_no_debate"]
    assert all(s["accuracy"] == 1.0 and s["f1"] == 1.0 for s in scores.values())
    assert main(["absa-eval", str(data), "--model", "absafake:x", "--no-ablations", "--report"]) == 0
    out = capsys.readouterr().out
    assert "label accuracy" in out and "abl_no_debate" not in out and "Debate mapping" in out


def test_absa_eval_limit(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib import resources

    path = str(resources.files("moot").joinpath("data/absa_sentences.jsonl"))
    assert (
        main(
            [
                "absa-eval",
                path,
                "--model",
                "absafake:x",
                "--limit",
                "3",
                "--no-ablations",
                "--json",
                "--config",
                "abl_no_debate",
            ]
        )
        == 0
    )
    scores = json.loads(capsys.readouterr().out)
    assert scores["abl_no_debate"]["n"] == 3


def test_input_sentences_may_hold_unicode_line_separators(tmp_path: Path) -> None:
    from moot.cli.absa import read_inputs

    path = tmp_path / "in.jsonl"
    rows = [{"id": "a", "sentence": "Great\u2028tea."}, {"id": "b", "sentence": "Cold\x85soup."}]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    assert read_inputs(path) == [("a", "Great\u2028tea."), ("b", "Cold\x85soup.")]


async def hangs_in_debate(request: ModelRequest) -> dict[str, Any]:
    """Stage 1 answers; the debate on the zqx sentence hangs (a server that never replies)."""
    about_zqx = any("zqx" in m.content for m in request.messages)
    if about_zqx and request.metadata["speaker"] in ("analyst", "critic", "empath", "judge"):
        await asyncio.sleep(60)
    return brain(request)


def test_timeout_single_sentence_keeps_what_completed_and_exits_1(
    fake_provider: Callable[..., None], capsys: pytest.CaptureFixture[str]
) -> None:
    fake_provider("absahang", lambda rest: FunctionModel(hangs_in_debate, name="absahang"))
    argv = ["absa", "The zqx hinge is terrible.", "--model", "absahang:x", "--no-store"]
    started = time.perf_counter()
    assert main([*argv, "--json", "--timeout", "0.5"]) == 1
    assert time.perf_counter() - started < 5
    captured = capsys.readouterr()
    res = FinalResult.model_validate_json(captured.out)
    assert res.failed and "deadline" in res.errors
    assert res.trace and res.trace[0].ok and res.usage.calls > 0  # stage 1 finished and is kept
    assert "timeout:" in captured.err
    assert main([*argv, "--timeout", "0.5"]) == 1  # the human rendering names the cut too
    assert "deadline" in capsys.readouterr().out


def test_timeout_batch_writes_finished_and_marks_unfinished(
    fake_provider: Callable[..., None], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_provider("absahang", lambda rest: FunctionModel(hangs_in_debate, name="absahang"))
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text('"Nice place."\n"The zqx hinge is terrible."\n', encoding="utf-8")
    argv = ["absa", "--input", str(inp), "--output", str(out), "--model", "absahang:x", "--no-store"]
    started = time.perf_counter()
    assert main([*argv, "--config", "default", "--timeout", "0.5"]) == 1
    assert time.perf_counter() - started < 5
    lines = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    by_id = {x["id"]: x for x in lines}
    assert len(lines) == 2 and "deadline" in by_id["2"]["errors"]
    assert not by_id["1"]["errors"] and by_id["1"]["trace"]  # finished before the deadline, kept whole
    assert "timeout: 1 sentences unfinished" in capsys.readouterr().err
    assert main([*argv, "--config", "abl_no_debate", "--timeout", "5"]) == 0  # no debate: nothing hangs


def test_timeout_counts_the_cut_debates_requests(
    fake_provider: Callable[..., None], capsys: pytest.CaptureFixture[str]
) -> None:
    """A debate cut by --timeout still reports the requests it sent: usage matches the server's count."""
    received: list[str] = []

    async def counted(request: ModelRequest) -> dict[str, Any]:
        received.append(str(request.metadata.get("speaker")))  # the server saw it, answered or not
        return await hangs_in_debate(request)

    fake_provider("absacount", lambda rest: FunctionModel(counted, name="absacount"))
    argv = ["absa", "The zqx hinge is terrible.", "--model", "absacount:x", "--no-store", "--json"]
    assert main([*argv, "--timeout", "0.5"]) == 1
    res = FinalResult.model_validate_json(capsys.readouterr().out)
    assert "deadline" in res.errors and "debate" in res.errors
    assert any(s in ("analyst", "critic", "empath") for s in received)  # the debate had started
    assert res.usage.attempts == len(received)
