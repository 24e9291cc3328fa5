"""Sentence ids name stored units: a batch or an evaluation that gives one id twice is refused whole."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from moot.absa import evaluate, load_config, load_dataset, run_absa_batch
from moot.cli import main
from moot.errors import UsageError
from moot.models import ModelRequest
from moot.models.testing import FunctionModel
from moot.runs import RunStore

from .test_absa_cli import brain


@pytest.fixture
def asked(fake_provider: Callable[..., None]) -> list[str]:
    """The requests the ``dupfake`` model received (none, for a refused input)."""
    seen: list[str] = []

    def counted(request: ModelRequest) -> dict[str, Any]:
        seen.append(str(request.metadata.get("speaker")))
        return brain(request)

    fake_provider("dupfake", lambda rest: FunctionModel(counted, name="dupfake:x"))
    return seen


def _runs(store: Path) -> int:
    if not store.exists():
        return 0
    with RunStore(store) as runs:
        return len(runs.list())


def test_absa_input_with_an_id_twice_is_refused_naming_it_and_its_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], asked: list[str]
) -> None:
    inp, out, store = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "runs.db"
    inp.write_text(
        '{"id": "a", "sentence": "The battery life is terrible."}\n'
        '{"id": "b", "sentence": "Nice place."}\n'
        "\n"
        '{"id": "a", "sentence": "Lovely staff."}\n',
        encoding="utf-8",
    )
    argv = ["absa", "--input", str(inp), "--output", str(out), "--model", "dupfake:x", "--store", str(store)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("moot: error: ")
    assert f"{inp}: duplicate item ids: a (lines 1, 4)" in err
    # Nothing ran, nothing was recorded, nothing was written (not even a hidden staging file).
    assert asked == [] and _runs(store) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


def test_an_explicit_id_equal_to_another_lines_number_is_a_duplicate_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], asked: list[str]
) -> None:
    # A line without an id is named by its number: line 2's sentence would be unit "2" as line 1's.
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text('{"id": 2, "sentence": "Nice place."}\n"Lovely staff."\n', encoding="utf-8")
    assert (
        main(["absa", "--input", str(inp), "--output", str(out), "--model", "dupfake:x", "--no-store"]) == 2
    )
    assert "duplicate item ids: 2 (lines 1, 2)" in capsys.readouterr().err
    assert not out.exists() and asked == []


def test_run_absa_batch_refuses_an_id_twice_before_recording_or_asking(
    tmp_path: Path, asked: list[str]
) -> None:
    store = tmp_path / "runs.db"
    with pytest.raises(UsageError, match=r"^ids: duplicate item ids: s1 \(items 1, 3\); every id must be"):
        asyncio.run(
            run_absa_batch(["One.", "Two.", "Three."], model="dupfake:x", ids=["s1", "s2", "s1"], store=store)
        )
    with pytest.raises(UsageError, match="2 ids for 3 sentences"):
        asyncio.run(run_absa_batch(["One.", "Two.", "Three."], model="dupfake:x", ids=["s1", "s2"]))
    assert asked == [] and _runs(store) == 0


def test_absa_eval_refuses_gold_ids_twice_naming_their_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], asked: list[str]
) -> None:
    items = load_dataset(limit=2)
    data, out, store = tmp_path / "d.jsonl", tmp_path / "eval", tmp_path / "runs.db"
    rows = [i.model_dump(mode="json") for i in items]
    rows.append(rows[0])  # the first sentence again, same id
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    argv = ["absa-eval", str(data), "--model", "dupfake:x", "--out", str(out), "--store", str(store)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"moot: error: {data}: duplicate item ids: {items[0].id} (lines 1, 3)")
    assert not out.exists() and _runs(store) == 0 and asked == []
    # The Python door refuses the same items the same way.
    with pytest.raises(UsageError, match=rf"items: duplicate item ids: {items[0].id} \(items 1, 3\)"):
        asyncio.run(
            evaluate([*items, items[0]], {"d": load_config("abl_no_debate")}, model="dupfake:x", store=store)
        )
    assert _runs(store) == 0 and asked == []


def test_semeval_xml_duplicates_are_named_by_their_sentence_ordinals(tmp_path: Path) -> None:
    from moot.absa.dataset import read_dataset

    sentence = '<sentence id="s1"><text>Good tea.</text></sentence>'
    path = tmp_path / "d.xml"
    path.write_text(
        f'<sentences>{sentence}<sentence id="s2"><text>Bad tea.</text></sentence>{sentence}</sentences>',
        encoding="utf-8",
    )
    with pytest.raises(UsageError, match=r"duplicate item ids: s1 \(sentences 1, 3\)"):
        read_dataset(path)


@pytest.mark.parametrize(
    ("value", "refused"), [("null", False), ("true", True), ('{"a": 1}', True), ("[1]", True), ("1.5", True)]
)
def test_an_id_is_a_string_or_an_integer_null_is_none(tmp_path: Path, value: str, refused: bool) -> None:
    from moot.cli.absa import read_inputs

    path = tmp_path / "in.jsonl"
    path.write_text(f'"First."\n{{"id": {value}, "sentence": "Second."}}\n', encoding="utf-8")
    if refused:  # was read as the unit "True", "{'a': 1}", ...
        with pytest.raises(UsageError, match=r"line 2: 'id' must be a string or an integer"):
            read_inputs(path)
    else:  # no id: the line's number, as for a line without one (was the unit "None")
        assert read_inputs(path) == [("1", "First."), ("2", "Second.")]
