"""Bad input gets one ``moot: error:`` line, exit 2, no traceback and no file left behind.

The table covers every subcommand and every class of bad input issue 10 found:
bytes that are not UTF-8 in each file and argument, output paths that are
directories, under missing folders or under files, ``extends:`` cycles,
configs of the wrong shape, empty files, multi-line errors and values past
their documented bounds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from moot.cli import main
from moot.errors import ModelConnectionError
from moot.models import ModelRequest
from moot.models.testing import FunctionModel, SchemaModel

BAD = b"caf\xe9 \xff\xfe au lait\n"  # Latin-1 and stray bytes: not UTF-8
BAD_ARG = os.fsdecode(b"caf\xe9")  # what Python makes of such bytes in argv

_REPORTS = [{"agent": "a"}, {"agent": "b"}]
_GOLD = {"id": "g1", "sentence": "The soup was cold.", "label": "negative", "aspects": []}


def _down(request: ModelRequest) -> str:
    raise ModelConnectionError("connection refused", model="down:x")


@pytest.fixture(autouse=True)
def _providers(fake_provider: Callable[..., None]) -> None:
    fake_provider("fake", lambda rest: SchemaModel(name=f"fake:{rest}"))
    fake_provider("down", lambda rest: FunctionModel(_down, name=f"down:{rest}"))


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder of hostile inputs; the test runs inside it."""
    monkeypatch.chdir(tmp_path)
    files: dict[str, bytes | str] = {
        "bad.yaml": b"name: " + BAD,
        "bad.txt": BAD,
        "bad.json": b'{"a": "' + BAD.strip() + b'"}',
        "bad.jsonl": b'{"sentence": "' + BAD.strip() + b'"}\n',
        "invalid.json": "{not json",
        "empty.json": "",
        "list.yaml": "- a\n- b\n",
        "scalar.yaml": "just a string\n",
        "invalid.yaml": "name: [unclosed\nmode: persona\n  bad: indent\n",
        "a.yaml": "extends: b.yaml\n",
        "b.yaml": "extends: a.yaml\n",
        "self.yaml": "extends: ./self.yaml\n",
        "over_list.json": "[1, 2]",
        "absa_over_list.yaml": "debate_override: over_list.json\n",
        "absa_over_bad.yaml": "debate_override: bad.json\n",
        "absa_over_missing.yaml": "debate_override: nowhere.json\n",
        "reports.json": json.dumps(_REPORTS),
        "sentences.jsonl": '{"sentence": "The soup was cold."}\n',
        "gold.jsonl": json.dumps(_GOLD) + "\n",
        "afile": "a file, not a folder\n",
        "emptyrun/run.json": "",
        "listrun/run.json": "[]",
        "badrun/run.json": BAD,
    }
    for name, content in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    (tmp_path / "adir").mkdir()
    return tmp_path


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


RUN = ["run", "Why?", "--model", "fake:x"]
BATCH_RUN = ["run", "--model", "fake:x", "--no-store", "--input"]
ABSA = ["absa", "--model", "fake:x"]
BATCH = [*ABSA, "--input", "sentences.jsonl"]
EVAL = ["absa-eval", "gold.jsonl", "--model", "fake:x", "--no-ablations"]
BENCH = ["bench", "--model", "fake:x", "--no-plots", "--n", "2", "--methods", "single"]

CASES: dict[str, tuple[list[str], str]] = {
    # run: argument text, every file it reads, every output path
    "run topic not utf-8": (["run", BAD_ARG, "--model", "fake:x"], "the topic is not valid UTF-8"),
    "run initial answer not utf-8": ([*RUN, "--initial-answer", BAD_ARG], "--initial-answer is not valid"),
    "run config not utf-8": ([*RUN, "--config", "bad.yaml"], "bad.yaml is not UTF-8"),
    "run override config not utf-8": ([*RUN, "--protocol", "answer", "--config", "bad.yaml"], "not UTF-8"),
    "run config is a list": ([*RUN, "--config", "list.yaml"], "mapping at the top level"),
    "run config is a directory": ([*RUN, "--config", "adir"], "adir"),
    "run text context not utf-8": ([*RUN, "--context", "bad.txt"], "bad.txt is not UTF-8"),
    "run json context not utf-8": ([*RUN, "--context", "bad.json"], "bad.json is not UTF-8"),
    "run context invalid json": ([*RUN, "--context", "invalid.json"], "is not valid JSON"),
    "run context empty json": ([*RUN, "--context", "empty.json"], "empty.json is empty"),
    "run context is a directory": ([*RUN, "--context", "adir"], "is a directory"),
    "run out is a directory": ([*RUN, "--out", "adir"], "is a directory"),
    "run out under missing folder": ([*RUN, "--out", "no/such/events.jsonl"], "does not exist"),
    "run out under a file": ([*RUN, "--out", "afile/events.jsonl"], "is a file, not a directory"),
    "run out when the model is down": (
        ["run", "Why?", "--model", "down:x", "--out", "events.jsonl"],
        "cannot reach the model endpoint",
    ),
    "run extends cycle": ([*RUN, "--config", "a.yaml"], "extends: cycle"),
    "run extends itself": ([*RUN, "--config", "self.yaml"], "extends: cycle"),
    "run rounds past bound": ([*RUN, "--rounds", "1000000000"], "rounds"),
    "run max tokens past bound": ([*RUN, "--max-tokens", "1000000000"], "less than or equal to 131072"),
    "run batch input not utf-8": ([*RUN[:1], "--input", "bad.jsonl", "--output", "o.jsonl"], "not UTF-8"),
    "run batch input is a directory": (
        [*RUN[:1], "--input", "adir", "--output", "o.jsonl"],
        "is a directory",
    ),
    # absa: sentence, config shapes and references, batch input and output
    "absa sentence not utf-8": ([*ABSA, BAD_ARG], "the sentence is not valid UTF-8"),
    "absa config not utf-8": ([*ABSA, "The soup.", "--config", "bad.yaml"], "bad.yaml is not UTF-8"),
    "absa config is a list": ([*ABSA, "The soup.", "--config", "list.yaml"], "must be a mapping"),
    "absa config is a scalar": ([*ABSA, "The soup.", "--config", "scalar.yaml"], "must be a mapping"),
    "absa config invalid yaml": ([*ABSA, "The soup.", "--config", "invalid.yaml"], "invalid YAML"),
    "absa config is a directory": ([*ABSA, "The soup.", "--config", "adir"], "adir"),
    "absa override json is a list": (
        [*ABSA, "The soup.", "--config", "absa_over_list.yaml"],
        "must be a JSON object",
    ),
    "absa override json not utf-8": ([*ABSA, "The soup.", "--config", "absa_over_bad.yaml"], "not UTF-8"),
    "absa override json missing": ([*ABSA, "The soup.", "--config", "absa_over_missing.yaml"], "not found"),
    "absa input not utf-8": (
        [*ABSA, "--input", "bad.jsonl", "--output", "o.jsonl"],
        "bad.jsonl is not UTF-8",
    ),
    "absa input is a directory": ([*ABSA, "--input", "adir", "--output", "o.jsonl"], "is a directory"),
    "absa output is a directory": ([*BATCH, "--output", "adir"], "is a directory"),
    "absa output under missing folder": ([*BATCH, "--output", "no/o.jsonl"], "does not exist"),
    "absa output under a file": ([*BATCH, "--output", "afile/o.jsonl"], "is a file, not a directory"),
    "absa concurrency past bound": (
        [*BATCH, "--output", "o.jsonl", "--concurrency", "1000000000"],
        "less than or equal to 1000",
    ),
    # absa-eval: dataset, config, errors before any progress output, bounds
    "absa-eval dataset not utf-8": (
        ["absa-eval", "bad.jsonl", "--model", "fake:x"],
        "utf-8",
    ),
    "absa-eval dataset is a directory": (["absa-eval", "adir", "--model", "fake:x"], "adir"),
    "absa-eval dataset empty": (["absa-eval", "empty.json", "--model", "fake:x"], "no items"),
    "absa-eval config invalid yaml": ([*EVAL, "--config", "invalid.yaml"], "invalid YAML"),
    "absa-eval config is a list": ([*EVAL, "--config", "list.yaml"], "must be a mapping"),
    "absa-eval unknown provider": (
        ["absa-eval", "gold.jsonl", "--model", "nope:x"],
        "unknown model provider",
    ),
    "absa-eval concurrency past bound": (
        [*EVAL, "--concurrency", "1000000000"],
        "less than or equal to 1000",
    ),
    # arbitrate: the reports file, bounds
    "arbitrate reports not utf-8": (["arbitrate", "bad.json", "--model", "fake:x"], "bad.json is not UTF-8"),
    "arbitrate reports is a directory": (["arbitrate", "adir", "--model", "fake:x"], "is a directory"),
    "arbitrate reports empty": (["arbitrate", "empty.json", "--model", "fake:x"], "empty.json is empty"),
    "arbitrate reports invalid json": (["arbitrate", "invalid.json", "--model", "fake:x"], "not valid JSON"),
    "arbitrate concurrency past bound": (
        ["arbitrate", "reports.json", "--model", "fake:x", "--concurrency", "1000000000"],
        "less than or equal to 1000",
    ),
    # bench: data files, output folder, --report-only files, bounds
    "bench max tokens past bound": (
        [*BENCH, "--max-tokens", "1000000000", "--out", "o"],
        "less than or equal to 131072",
    ),
    "bench gsm8k data not utf-8": (
        [*BENCH, "--task", "gsm8k:bad.jsonl", "--out", "o"],
        "utf-8",
    ),
    "bench mcq data is a directory": ([*BENCH, "--task", "mcq:adir", "--out", "o"], "adir"),
    "bench absa data not utf-8": (
        [*BENCH, "--task", "absa:bad.jsonl", "--out", "o"],
        "utf-8",
    ),
    "bench out is a file": ([*BENCH, "--out", "afile"], "is a file, not a directory"),
    "bench out under a file": ([*BENCH, "--out", "afile/run"], "is a file, not a directory"),
    "bench report-only empty run.json": ([*BENCH, "--report-only", "--out", "emptyrun"], "run.json is empty"),
    "bench report-only run.json a list": ([*BENCH, "--report-only", "--out", "listrun"], "JSON object"),
    "bench report-only run.json not utf-8": ([*BENCH, "--report-only", "--out", "badrun"], "not UTF-8"),
    "bench n past bound": ([*BENCH, "--n", "1000000000", "--out", "o"], "less than or equal to 100000"),
    "bench vote past bound": ([*BENCH, "--methods", "vote:1000000000", "--out", "o"], "at most"),
    "bench society agents past bound": ([*BENCH, "--methods", "society:1000000:2", "--out", "o"], "at most"),
    "bench society rounds past bound": ([*BENCH, "--methods", "society:3:1000000", "--out", "o"], "at most"),
    "bench concurrency past bound": (
        [*BENCH, "--concurrency", "1000000000", "--out", "o"],
        "less than or equal to 1000",
    ),
    "bench model concurrency past bound": (
        [*BENCH, "--model-concurrency", "1000000000", "--out", "o"],
        "less than or equal to 1000",
    ),
    # protocols
    "protocols extra argument": (["protocols", "extra"], "No such command"),
}


@pytest.mark.parametrize("argv,needle", list(CASES.values()), ids=list(CASES))
def test_bad_input_is_one_line_exit_2_and_leaves_nothing(
    argv: list[str], needle: str, work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _tree(work)
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 2, captured.err
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("moot: error: "), captured.err
    assert needle in lines[0]
    assert "Traceback" not in captured.err + captured.out
    assert _tree(work) == before


def test_the_table_covers_every_subcommand() -> None:
    commands = {argv[0] for argv, _ in CASES.values()}
    assert commands == {"run", "absa", "absa-eval", "arbitrate", "bench", "protocols"}
    assert len(CASES) >= 40


def test_real_non_utf8_argv_bytes_through_the_console_script(tmp_path: Path) -> None:
    """End to end: the bytes reach moot as the OS passes them, not as a test spells them."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from moot.cli import main; sys.exit(main())", "run", b"caf\xe9"],
        capture_output=True,
        cwd=tmp_path,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 2
    err = proc.stderr.decode("utf-8", "replace")
    assert err.count("\n") == 1 and err.startswith("moot: error: the topic is not valid UTF-8")


def test_an_unexpected_exception_is_one_line_and_exit_3(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def boom(*args: object, **kwargs: object) -> object:
        raise ZeroDivisionError("the bug")

    monkeypatch.setattr("moot.cli.protocols.presets", boom)
    monkeypatch.delenv("MOOT_DEBUG", raising=False)
    assert main(["protocols"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("moot: error: internal error: ZeroDivisionError: the bug") and "MOOT_DEBUG=1" in err

    monkeypatch.setenv("MOOT_DEBUG", "1")
    assert main(["protocols"]) == 3
    err = capsys.readouterr().err
    assert "Traceback" in err and "ZeroDivisionError" in err
    assert err.splitlines()[-1].startswith("moot: error: internal error:")


def test_a_run_that_succeeds_replaces_out_atomically(work: Path) -> None:
    (work / "events.jsonl").write_text("old\n", encoding="utf-8")
    assert main([*RUN, "--json", "--out", "events.jsonl"]) == 0
    kinds = [json.loads(line)["kind"] for line in (work / "events.jsonl").read_text().splitlines()]
    assert kinds[0] == "debate_started" and kinds[-1] == "debate_completed"
    assert sorted(p.name for p in work.glob(".events.jsonl.*")) == []


def test_a_failed_run_keeps_an_existing_out_file(work: Path) -> None:
    (work / "events.jsonl").write_text("old\n", encoding="utf-8")
    assert main(["run", "Why?", "--model", "down:x", "--out", "events.jsonl"]) == 2
    assert (work / "events.jsonl").read_text() == "old\n"
