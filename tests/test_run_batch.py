"""``moot run --input topics.jsonl --output results.jsonl``: many debates, resumable."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from moot.cli import main
from moot.errors import ModelHTTPError
from moot.models import ModelRequest
from moot.models.testing import FunctionModel
from moot.transcript import DebateResult


def _reply(req: ModelRequest) -> dict[str, object]:
    prompt = " ".join(m.content for m in req.messages)
    if "FAIL" in prompt:
        raise ModelHTTPError(400, body="refused", model="fake")
    if req.metadata["phase"] == "judge":
        return {"final_answer": "merged", "citations": []}
    return {"answer": "an answer", "confidence": 0.6}


@pytest.fixture
def model(fake_provider: Callable[..., None]) -> FunctionModel:
    instance = FunctionModel(_reply, name="fake:batch", delay=0.02)
    fake_provider("fake", lambda rest: instance)
    return instance


def _topics(tmp_path: Path, *lines: object) -> Path:
    path = tmp_path / "topics.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines) + "\n")
    return path


def _results(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_one_result_per_line_with_progress(
    model: FunctionModel, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topics = _topics(
        tmp_path,
        {"topic": "Is tea better than coffee?", "id": "tea"},
        "Why is the sky blue?",
        {"topic": "Tabs or spaces?", "context": {"docs": ["PEP 8 says spaces"]}, "initial_answer": "Spaces."},
    )
    out = tmp_path / "results.jsonl"
    argv = ["run", "--input", str(topics), "--output", str(out), "--concurrency", "3", "--model", "fake:x"]
    assert main(argv) == 0
    rows = _results(out)
    assert sorted(str(r["input_id"]) for r in rows) == ["Tabs or spaces?", "Why is the sky blue?", "tea"]
    for row in rows:
        result = DebateResult.model_validate({k: v for k, v in row.items() if k != "input_id"})
        assert result.final_answer == "merged" and result.usage.calls == 5
    tabs = next(r for r in rows if r["input_id"] == "Tabs or spaces?")
    assert tabs["topic"] == "Tabs or spaces?"
    assert any("PEP 8 says spaces" in m.content for req in model.requests for m in req.messages)
    # Three debates at once, each with two simultaneous speakers.
    assert model.max_in_flight > 2
    captured = capsys.readouterr()
    assert captured.out == ""  # stdout stays free; the progress and the summary go to stderr
    assert "debates" in captured.err and "wrote 3 results" in captured.err
    # Not a terminal: plain progress lines (every 10 s or 5% of the topics), the last at 3/3.
    progress = [line for line in captured.err.splitlines() if line.startswith("debates: ")]
    assert progress[-1].startswith("debates: 3/3 topics (100%), ") and len(progress) == 3


def test_concurrency_one_runs_debates_one_at_a_time(model: FunctionModel, tmp_path: Path) -> None:
    topics = _topics(tmp_path, "A?", "B?", "C?")
    out = tmp_path / "r.jsonl"
    assert main(["run", "--input", str(topics), "--output", str(out), "--model", "fake:x"]) == 0
    assert len(_results(out)) == 3 and model.max_in_flight == 2


def test_resume_skips_finished_topics_and_a_cut_off_line(
    model: FunctionModel, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topics = _topics(tmp_path, "A?", "B?", "C?")
    out = tmp_path / "r.jsonl"
    assert main(["run", "--input", str(topics), "--output", str(out), "--model", "fake:x"]) == 0
    first = out.read_text().splitlines(keepends=True)
    # As if the batch had been killed while writing its third line.
    out.write_text(first[0] + first[1] + first[2][:40])
    calls = len(model.requests)
    capsys.readouterr()
    assert main(["run", "--input", str(topics), "--output", str(out), "--model", "fake:x"]) == 0
    assert len(model.requests) - calls == 5  # one debate, not three
    rows = _results(out)
    assert len(rows) == 3 and len({str(r["input_id"]) for r in rows}) == 3
    assert "2 of 3 topics already in" in capsys.readouterr().err
    calls = len(model.requests)
    assert main(["run", "--input", str(topics), "--output", str(out), "--model", "fake:x"]) == 0
    assert len(model.requests) == calls


def test_a_fallen_back_topic_gives_exit_1_and_its_line(model: FunctionModel, tmp_path: Path) -> None:
    topics = _topics(tmp_path, "Fine?", {"topic": "FAIL now?", "initial_answer": "kept"})
    out = tmp_path / "r.jsonl"
    assert main(["run", "--input", str(topics), "--output", str(out), "--model", "fake:x"]) == 1
    rows = {str(r["input_id"]): r for r in _results(out)}
    assert rows["FAIL now?"]["final_answer"] == "kept" and rows["FAIL now?"]["fallback"]
    assert rows["Fine?"]["fallback"] is None
    # Resuming keeps the exit code: the file still holds a fallen-back result.
    assert main(["run", "--input", str(topics), "--output", str(out), "--model", "fake:x"]) == 1


@pytest.mark.parametrize(
    ("lines", "extra", "message"),
    [
        (['"A?"'], ["--json"], "--json is for a single debate"),
        (['"A?"'], ["TOPIC"], "either a TOPIC or --input"),
        (['{"topic": "A?", "contxt": 1}'], [], "line 1: unknown field 'contxt'"),
        (['"A?"', '"A?"'], [], "lines 1 and 2 have the same key 'A?'"),
        (['{"topic": ""}'], [], "line 1: 'topic' must be a non-empty string"),
        (["[1, 2]"], [], "line 1: expected an object with a 'topic'"),
        (["{oops"], [], "line 1: not valid JSON"),
        ([""], [], "holds no topics"),
    ],
)
def test_bad_batch_input_is_one_line_exit_2(
    model: FunctionModel,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    lines: list[str],
    extra: list[str],
    message: str,
) -> None:
    topics = tmp_path / "t.jsonl"
    topics.write_text("\n".join(lines) + "\n")
    out = tmp_path / "r.jsonl"
    argv = ["run", *[e for e in extra if e == "TOPIC"], "--input", str(topics), "--output", str(out)]
    argv += [e for e in extra if e != "TOPIC"] + ["--model", "fake:x"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("moot: error:") and message in err and err.count("\n") == 1
    assert not out.exists()


def test_batch_flags_need_each_other(
    model: FunctionModel, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "A?", "--output", str(tmp_path / "r.jsonl")]) == 2
    assert "give --input TOPICS.jsonl too" in capsys.readouterr().err
    assert main(["run", "--input", str(_topics(tmp_path, "A?"))]) == 2
    assert "--input needs --output" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["missing/r.jsonl", "."])
def test_output_in_a_missing_folder_or_a_folder_is_refused(
    where: str, model: FunctionModel, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", "--input", str(_topics(tmp_path, "A?")), "--output", str(tmp_path / where)]
    assert main([*argv, "--model", "fake:x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("moot: error: --output") and err.count("\n") == 1 and not model.requests


def test_output_that_is_not_results_is_refused(
    model: FunctionModel, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "notes.jsonl"
    out.write_text('{"something": "else"}\n{"more": 1}\n')
    argv = ["run", "--input", str(_topics(tmp_path, "A?")), "--output", str(out), "--model", "fake:x"]
    assert main(argv) == 2
    assert "line 1 is not a moot run result" in capsys.readouterr().err
    assert out.read_text() == '{"something": "else"}\n{"more": 1}\n'


def test_unicode_line_separators_inside_json_strings_do_not_split_lines(
    model: FunctionModel, tmp_path: Path
) -> None:
    # Results are written with ensure_ascii=False: a topic or reply may hold U+2028 or U+0085 raw.
    topics = tmp_path / "topics.jsonl"
    lines = [{"topic": "One\u2028two?", "id": "a"}, {"topic": "Three\x85four?", "id": "b"}]
    topics.write_text("".join(json.dumps(t, ensure_ascii=False) + "\r\n" for t in lines), encoding="utf-8")
    out = tmp_path / "r.jsonl"
    argv = ["run", "--input", str(topics), "--output", str(out), "--model", "fake:x"]
    assert main(argv) == 0
    assert "\u2028" in out.read_text(encoding="utf-8")
    calls = len(model.requests)
    assert main(argv) == 0  # resumes: both results read back, nothing run again
    assert len(model.requests) == calls
    assert sorted(
        json.loads(line)["input_id"] for line in out.read_text(encoding="utf-8").split("\n") if line
    ) == [
        "a",
        "b",
    ]
