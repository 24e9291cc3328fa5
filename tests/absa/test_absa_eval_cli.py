"""``moot absa-eval``: --configs, --out predictions and metrics, progress lines, SemEval XML, --timeout."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from moot.absa import load_dataset
from moot.cli import main
from moot.models.testing import FunctionModel

from .test_absa_cli import brain as _brain

DATA = Path(__file__).parent.parent / "data"


@pytest.fixture(autouse=True)
def provider(fake_provider: Callable[..., None]) -> None:
    fake_provider("evalfake", lambda rest: FunctionModel(_brain, name=f"evalfake:{rest}"))
    fake_provider("evalslow", lambda rest: FunctionModel(_brain, name="evalslow", delay=0.2))


def _data(tmp_path: Path) -> Path:
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(i.model_dump_json() for i in load_dataset(limit=3)) + "\n", encoding="utf-8")
    return path


def test_configs_out_predictions_and_progress_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, out = _data(tmp_path), tmp_path / "eval"
    argv = [
        "absa-eval",
        str(data),
        "--model",
        "evalfake:x",
        "--configs",
        "default",
        "--out",
        str(out),
        "--no-store",
    ]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "default" in captured.out and "abl_no_debate" not in captured.out
    assert "majority-class baseline" in captured.out
    # Not a terminal: plain progress lines, ending with the config's total.
    assert "absa-eval: default 3/3 sentences" in captured.err
    lines = [json.loads(x) for x in (out / "predictions.jsonl").read_text(encoding="utf-8").splitlines()]
    assert sorted(x["id"] for x in lines) == ["en-001", "en-002", "en-003"]
    by_id = {x["id"]: x for x in lines}
    assert by_id["en-002"]["label"] == "negative" and by_id["en-002"]["label_correct"] is True
    assert by_id["en-002"]["gold_aspects"] == [{"term": "battery life", "polarity": "negative"}]
    assert {x["config"] for x in lines} == {"default"}
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    assert list(metrics["configs"]) == ["default"] and metrics["run"]["sentences"] == 3
    label_right = sum(x["label_correct"] for x in lines)
    assert metrics["configs"]["default"]["label_correct"] == label_right  # a recount of the predictions

    assert main([*argv[:4], "--configs", "default,abl_no_debate", "--json", "--no-store"]) == 0
    assert list(json.loads(capsys.readouterr().out)) == ["default", "abl_no_debate"]


def test_semeval_xml_without_sentence_labels(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["absa-eval", f"semeval:{DATA / 'semeval2014_restaurants.xml'}", "--model", "evalfake:x"]
    assert main([*argv, "--configs", "default", "--json", "--no-store", "--exclude-conflict"]) == 0
    captured = capsys.readouterr()
    scores = json.loads(captured.out)["default"]
    assert scores["n"] == 3 and scores["labelled"] == 0 and scores["accuracy"] is None
    assert scores["fn"] == 4  # lamb, waiter, menu, prices; the conflict aspect was excluded
    assert "excluded 1 aspects labelled conflict" in captured.err


def test_timeout_scores_unfinished_sentences_failed_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "eval"
    argv = ["absa-eval", str(_data(tmp_path)), "--model", "evalslow:x", "--configs", "default"]
    started = time.perf_counter()
    assert main([*argv, "--timeout", "0.3", "--out", str(out), "--no-store"]) == 1
    assert time.perf_counter() - started < 5
    assert "scored failed" in capsys.readouterr().err
    lines = [json.loads(x) for x in (out / "predictions.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(lines) == 3 and all(x["failed"] and "deadline" in x["errors"] for x in lines)


def test_bad_configs_name_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["absa-eval", str(_data(tmp_path)), "--configs", "nope", "--no-store"]) == 2
    assert "nope" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["absa-eval"], ["absa-eval", "builtin"]])
def test_builtin_data_is_found_outside_a_source_checkout(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # no src/moot/data/ below the working directory
    args = [*argv, "--model", "evalfake:x", "--configs", "default", "--limit", "2", "--no-store"]
    assert main(args) == 0
    assert "absa-eval: default 2/2 sentences" in capsys.readouterr().err


def test_missing_data_file_names_builtin(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["absa-eval", str(tmp_path / "nope.jsonl"), "--model", "evalfake:x", "--no-store"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("moot: error: dataset not found") and "builtin" in err[0]


def test_a_run_that_fails_leaves_no_empty_out_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import moot.cli.absa_eval as absa_eval

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(absa_eval, "evaluate", broken)
    out = tmp_path / "eval"
    argv = ["absa-eval", str(_data(tmp_path)), "--model", "evalfake:x", "--configs", "default"]
    assert main([*argv, "--out", str(out), "--no-store"]) == 3
    assert "boom" in capsys.readouterr().err
    assert not out.exists()
    # A folder that was there before stays, empty of this run's files.
    out.mkdir()
    assert main([*argv, "--out", str(out), "--no-store"]) == 3
    assert out.is_dir() and not any(out.iterdir())
