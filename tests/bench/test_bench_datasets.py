"""Data formats and data checks: the shapes public datasets come in, ids, spans, named fields."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from moot.absa.dataset import read_dataset
from moot.bench.tasks import AbsaTask, make_task
from moot.errors import UsageError

DATA = Path(__file__).parent.parent / "data"


def _write(path: Path, rows: list[object]) -> Path:
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("name", "golds"),
    [
        ("mmlu_style.csv", {"m1": "B", "m2": "B", "m3": "B"}),  # choices list column, index or letter
        ("mmlu_headerless.csv", {"mcq-1": "B", "mcq-2": "D"}),  # MMLU's own CSV: no header
        ("mmlu_redux.jsonl", {"mcq-1": "B", "mcq-2": "B"}),  # choices list, answer index
        ("arc_hf.jsonl", {"arc-1": "C", "arc-2": "B"}),  # {"text", "label"}; labels 1-3 on arc-2
        ("arc_original.jsonl", {"arco-1": "C"}),  # question.stem, choices [{text, label}]
        ("mcq_letter_columns.jsonl", {"lc-1": "B"}),  # A-D keys, answer "(B)"
    ],
)
def test_mcq_formats_load_and_score(name: str, golds: dict[str, str]) -> None:
    task = make_task(f"mcq:{DATA / name}")
    items = {i.id: i for i in task.items(None, 0)}
    assert {k: i.gold for k, i in items.items()} == golds
    for item in items.values():
        assert f"{item.letters[0]}) " in item.prompt
        right = task.parse(f"The answer is ({item.gold}).", item)
        assert task.is_correct(right.value, item) and right.rule == task.format_rule
        assert not task.is_correct(task.parse("A) x\nB) y\nC) z", item).value, item)


def test_arc_numeric_labels_become_letters() -> None:
    item = {i.id: i for i in make_task(f"mcq:{DATA / 'arc_hf.jsonl'}").items(None, 0)}["arc-2"]
    assert item.letters == "ABC" and "B) precipitation" in item.prompt


def test_semeval_2014_xml_keeps_conflict_as_a_class_or_excludes_it_with_a_count() -> None:
    task = make_task(f"absa:{DATA / 'semeval2014_restaurants.xml'}")
    assert isinstance(task, AbsaTask)
    items = {i.id: i for i in task.items(None, 0)}
    assert {k: i.gold for k, i in items.items()} == {
        "t14-1@4": "positive",
        "t14-1@28": "negative",
        "t14-2@4": "neutral",
        "t14-2@27": "positive",
        "t14-2@72": "conflict",
    }
    assert task.labels == ("positive", "negative", "neutral", "conflict")
    assert "one of positive, negative, neutral, conflict" in items["t14-2@72"].prompt
    assert task.parse("Mixed feelings: (conflict)", items["t14-2@72"]).value == "conflict"
    excluded = make_task(f"absa:{DATA / 'semeval2014_restaurants.xml'}", exclude_conflict=True)
    assert len(excluded.items(None, 0)) == 4
    assert excluded.labels == ("positive", "negative", "neutral")
    assert excluded.data_notes == ("1 aspects labelled conflict excluded (--exclude-conflict)",)


def test_semeval_2016_xml_implicit_targets_get_unique_ids_and_their_category() -> None:
    task = make_task(f"semeval:{DATA / 'semeval2016_restaurants.xml'}")
    items = {i.id: i for i in task.items(None, 0)}
    assert sorted(items) == ["r1:0@0", "r1:0@0#2", "r1:0@30", "r1:1@4", "r1:1@4#2"]
    assert 'aspect "restaurant prices"' in items["r1:0@0"].prompt
    assert 'aspect "ambience general"' in items["r1:0@0#2"].prompt
    assert 'aspect "wine list (drinks style options)"' in items["r1:1@4"].prompt
    assert 'aspect "wine list (drinks prices)"' in items["r1:1@4#2"].prompt
    data = read_dataset(DATA / "semeval2016_restaurants.xml")
    assert [i.id for i in data.items] == ["r1:0", "r1:1", "r1:3"]  # r1:2 is OutOfScope
    assert all(i.label is None and i.lang is None for i in data.items)


def test_duplicate_item_ids_are_an_error_naming_them(tmp_path: Path) -> None:
    rows = [
        {"id": i, "question": f"Q{n}?", "answer": f"#### {n}"}
        for n, i in enumerate(["a", "b", "a", "c", "c"])
    ]
    with pytest.raises(UsageError, match="duplicate item ids: a, c"):
        make_task(f"gsm8k:{_write(tmp_path / 'g.jsonl', rows)}").items(None, 0)
    mcq = [{"id": "q", "question": "Q?", "choices": ["x", "y"], "answer": 0}] * 2
    with pytest.raises(UsageError, match="duplicate item ids: q"):
        make_task(f"mcq:{_write(tmp_path / 'm.jsonl', mcq)}").items(None, 0)
    sentence = {
        "id": "s1",
        "sentence": "Good tea.",
        "aspects": [{"term": "tea", "start": 5, "end": 8, "polarity": "positive"}],
    }
    with pytest.raises(UsageError, match="duplicate item ids: s1"):
        make_task(f"absa:{_write(tmp_path / 'a.jsonl', [sentence, sentence])}").items(None, 0)


def test_a_bad_span_rejects_the_line_with_its_reason(tmp_path: Path) -> None:
    good = {
        "id": "s1",
        "sentence": "Good tea.",
        "aspects": [{"term": "tea", "start": 5, "end": 8, "polarity": "positive"}],
    }
    bad = {
        "id": "s2",
        "sentence": "Cold soup.",
        "aspects": [{"term": "soup", "start": 4, "end": 8, "polarity": "negative"}],
    }
    path = _write(tmp_path / "a.jsonl", [good, bad])
    data = read_dataset(path)
    assert [i.id for i in data.items] == ["s1"]
    assert data.rejected == [f"{path} line 2 (id s2): span 4:8 holds ' sou', not the term 'soup'"]
    task = make_task(f"absa:{path}")
    assert [i.id for i in task.items(None, 0)] == ["s1@5"]
    assert task.data_notes == (f"rejected {data.rejected[0]}",)
    implicit_off_zero = {
        **good,
        "id": "s3",
        "aspects": [{"term": "", "start": 2, "end": 3, "polarity": "neutral"}],
    }
    assert "must be at 0:0" in read_dataset(_write(tmp_path / "b.jsonl", [implicit_off_zero])).rejected[0]


def test_validation_errors_name_the_fields(tmp_path: Path) -> None:
    row = {
        "id": "s1",
        "sentence": "Good tea.",
        "aspects": [{"term": "tea", "start": 5, "end": 8, "polarity": "great"}],
    }
    with pytest.raises(UsageError, match=r"line 1: invalid item: aspects\.0\.polarity: Input should be"):
        read_dataset(_write(tmp_path / "a.jsonl", [row]))
    semeval_shaped = {"sentence_id": "1", "text": "Good tea.", "aspectTerms": []}
    with pytest.raises(UsageError) as err:
        read_dataset(_write(tmp_path / "b.jsonl", [semeval_shaped]))
    message = str(err.value)
    for name in (
        "id: Field required",
        "sentence: Field required",
        "sentence_id: Extra inputs",
        "aspectTerms",
    ):
        assert name in message
    assert "\n" not in message


def test_lang_is_any_code_and_the_label_optional(tmp_path: Path) -> None:
    row = {
        "id": "d1",
        "lang": "de",
        "sentence": "Guter Tee.",
        "aspects": [{"term": "Tee", "start": 6, "end": 9, "polarity": "positive"}],
    }
    item = read_dataset(_write(tmp_path / "a.jsonl", [row])).items[0]
    assert (item.lang, item.label) == ("de", None)


def test_bad_xml_and_bad_polarity_are_usage_errors(tmp_path: Path) -> None:
    broken = tmp_path / "x.xml"
    broken.write_text("<sentences><sentence", encoding="utf-8")
    with pytest.raises(UsageError, match="not valid XML"):
        read_dataset(broken)
    odd = tmp_path / "y.xml"
    odd.write_text(
        '<sentences><sentence id="1"><text>Tea.</text><aspectTerms>'
        '<aspectTerm term="Tea" polarity="great" from="0" to="3"/></aspectTerms></sentence></sentences>',
        encoding="utf-8",
    )
    with pytest.raises(UsageError, match="sentence 1: polarity 'great'"):
        read_dataset(odd)


def test_gsm8k_format_file_loads_and_scores() -> None:
    task = make_task(f"gsm8k:{DATA / 'gsm8k_style.jsonl'}")
    items = {i.id: i for i in task.items(None, 0)}
    assert {k: i.gold for k, i in items.items()} == {"g1": "12", "g2": "210", "g3": "38", "g4": "51"}
    item = items["g3"]
    assert task.is_correct(task.parse("4 * 8 = 32, 2 * 3 = 6. The answer is \\boxed{38}.", item).value, item)
    assert task.parse("4 * 8 = 32, 2 * 3 = 6, so 32 +", item, truncated=True).failed


def test_csv_with_a_bom_and_capitalised_headers(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    path.write_text('\ufeffQuestion,Choices,Answer\nTwo?,"[""1"", ""2""]",B\n', encoding="utf-8")
    (item,) = make_task(f"mcq:{path}").items(None, 0)
    assert (item.gold, item.letters, item.id) == ("B", "AB", "mcq-2")
    jsonl = _write(tmp_path / "a.jsonl", [{"id": "s", "sentence": "Tea.", "aspects": []}])
    jsonl.write_bytes(b"\xef\xbb\xbf" + jsonl.read_bytes())
    assert [i.id for i in read_dataset(jsonl).items] == ["s"]


def test_jsonl_strings_may_hold_unicode_line_separators(tmp_path: Path) -> None:
    # MMLU's test split holds a raw U+0085 inside a question; U+2028 is as legal in JSON strings.
    rows = [
        {"question": "Which holds\x85a NEL?", "choices": ["this", "that"], "answer": 0},
        {"question": "And\u2028this\u2029one?", "choices": ["x", "y", "z"], "answer": 2},
    ]
    path = _write(tmp_path / "mmlu.jsonl", rows)
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))  # and Windows line ends
    items = make_task(f"mcq:{path}").items(None, 0)
    assert sorted((i.id, i.gold) for i in items) == [("mcq-1", "A"), ("mcq-2", "C")]
    assert any("\x85" in i.prompt for i in items)
