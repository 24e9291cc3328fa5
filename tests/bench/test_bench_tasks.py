from __future__ import annotations

import json
from pathlib import Path

import pytest

from moot.bench.tasks import AbsaTask, ArithmeticTask, GSM8KTask, MCQTask, du_arithmetic_operands, make_task
from moot.errors import UsageError


def test_arithmetic_is_deterministic_for_a_seed() -> None:
    task = ArithmeticTask()
    assert task.items(20, 7) == task.items(20, 7)
    assert task.items(20, 7) != task.items(20, 8)


def test_arithmetic_first_items_of_seed_0_are_du_et_al_items() -> None:
    items = ArithmeticTask().items(3, 0)
    assert items[0].id == "arithmetic-0"
    assert "12+15*21+0-3*27" in items[0].prompt
    assert items[0].gold == "246"
    assert du_arithmetic_operands(2, 1) == [(5, 11, 12, 8, 9, 11), (5, 15, 0, 16, 1, 12)]


def test_arithmetic_matches_numpy_legacy_stream() -> None:
    np = pytest.importorskip("numpy")
    for seed in (0, 3, 2**32 - 1):
        np.random.seed(seed)
        expected = [tuple(int(x) for x in np.random.randint(0, 30, size=6)) for _ in range(50)]
        assert du_arithmetic_operands(50, seed) == expected


def test_arithmetic_is_a_prefix_stream_and_in_range() -> None:
    ops = du_arithmetic_operands(200, 5)
    assert ops[:50] == du_arithmetic_operands(50, 5)
    assert all(0 <= v < 30 for row in ops for v in row)
    assert {v for row in ops for v in row} == set(range(30))


def test_arithmetic_prompt_asks_for_the_answer_format() -> None:
    item = ArithmeticTask().items(1, 0)[0]
    assert item.prompt.startswith("What is the result of 12+15*21+0-3*27?")
    assert "(X)" in item.prompt


def test_bad_seed_is_a_usage_error() -> None:
    with pytest.raises(UsageError):
        du_arithmetic_operands(1, 2**32)


def _write(path: Path, rows: list[object]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def test_gsm8k_reads_the_gold_after_hashes_and_samples_prefix_stably(tmp_path: Path) -> None:
    rows = [{"question": f"Q{i}?", "answer": f"work <<{i}>>\n#### {i * 1000:,}"} for i in range(30)]
    task = make_task(f"gsm8k:{_write(tmp_path / 'g.jsonl', rows)}")
    assert isinstance(task, GSM8KTask)
    ten, twenty = task.items(10, 1), task.items(20, 1)
    assert twenty[:10] == ten
    assert len({i.id for i in task.items(None, 1)}) == 30
    by_id = {i.id: i for i in task.items(None, 1)}
    item = by_id["gsm8k-4"]  # line 4 holds i = 3
    assert item.gold == "3000"
    assert "Q3?" in item.prompt and "\\boxed{answer}" in item.prompt


def test_gsm8k_rejects_answers_without_a_number(tmp_path: Path) -> None:
    task = make_task(f"gsm8k:{_write(tmp_path / 'g.jsonl', [{'question': 'Q', 'answer': '#### many'}])}")
    with pytest.raises(UsageError, match="g.jsonl:1"):
        task.items(None, 0)


def test_mcq_accepts_lists_dicts_letters_and_indices(tmp_path: Path) -> None:
    rows = [
        {"id": "q1", "question": "Sky?", "choices": ["red", "blue", "green"], "answer": "B"},
        {"id": "q2", "question": "Two?", "choices": {"A": "1", "B": "2"}, "answer": 1},
        {"id": "q3", "question": "Three?", "options": ["3", "4", "5", "6"], "answer": "(a)"},
    ]
    task = make_task(f"mcq:{_write(tmp_path / 'm.jsonl', rows)}")
    assert isinstance(task, MCQTask)
    items = {i.id: i for i in task.items(None, 0)}
    assert (items["q1"].gold, items["q1"].letters) == ("B", "ABC")
    assert (items["q2"].gold, items["q2"].letters) == ("B", "AB")
    assert items["q3"].gold == "A"
    assert "B) blue" in items["q1"].prompt and "A, B, C" in items["q1"].prompt
    assert task.parse("so (C)", items["q1"]).value == "C"
    assert task.parse("so (D)", items["q1"]).value is None  # not a letter of this item


@pytest.mark.parametrize(
    "row",
    [
        {"question": "Q", "choices": ["a"], "answer": "A"},
        {"question": "Q", "choices": ["a", "b"], "answer": "C"},
        {"question": "", "choices": ["a", "b"], "answer": "A"},
        {"question": "Q", "choices": ["a", "b"], "answer": True},
    ],
)
def test_mcq_rejects_malformed_lines(tmp_path: Path, row: dict[str, object]) -> None:
    task = make_task(f"mcq:{_write(tmp_path / 'm.jsonl', [row])}")
    with pytest.raises(UsageError):
        task.items(None, 0)


def test_task_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not found"):
        make_task(f"gsm8k:{tmp_path / 'missing.jsonl'}")
    with pytest.raises(UsageError, match="absa data file not found"):
        make_task("absa:whatever.jsonl")
    with pytest.raises(UsageError, match="unknown task"):
        make_task("chess")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "Q", "answer": "#### 1"}\nnot json\n', encoding="utf-8")
    with pytest.raises(UsageError, match="bad.jsonl:2"):
        make_task(f"gsm8k:{bad}").items(None, 0)


def test_debate_prompt_lists_every_peer_and_repeats_the_format() -> None:
    task = ArithmeticTask()
    item = task.items(1, 0)[0]
    text = task.debate_prompt(item, ["peer one says (1)", "peer two says (2)"])
    assert "peer one says (1)" in text and "peer two says (2)" in text
    assert text.count("One agent response") == 2
    assert text.rstrip().endswith(task.format_instruction(item))


def test_absa_task_makes_one_item_per_gold_aspect_of_the_shipped_data() -> None:
    from moot.absa.evaluate import load_dataset

    rows = load_dataset()
    task = make_task("absa")
    assert isinstance(task, AbsaTask) and task.spec == "absa"
    items = task.items(None, 0)
    aspects = {(r.id, a.start): (r, a) for r in rows for a in r.aspects}
    assert len(items) == len(aspects) == len({i.id for i in items})
    for item in items:
        sentence_id, start = item.id.rsplit("@", 1)
        row, aspect = aspects[(sentence_id, int(start))]
        assert item.gold == aspect.polarity
        assert f'aspect "{aspect.term}"' in item.prompt and row.sentence in item.prompt
        assert "positive, negative, neutral" in item.prompt
    assert task.items(10, 3) == task.items(None, 3)[:10]  # a prefix-stable seeded sample
    assert task.items(10, 3) != task.items(10, 4)


def test_absa_task_reads_a_file_and_names_bad_lines(tmp_path: Path) -> None:
    row = {
        "id": "s1",
        "lang": "en",
        "sentence": "Great food, rude staff.",
        "label": "mixed",
        "aspects": [
            {"term": "food", "start": 6, "end": 10, "polarity": "positive"},
            {"term": "staff", "start": 17, "end": 22, "polarity": "negative"},
        ],
    }
    task = make_task(f"absa:{_write(tmp_path / 'a.jsonl', [row])}")
    items = sorted(task.items(None, 0), key=lambda i: i.id)
    assert [(i.id, i.gold) for i in items] == [("s1@17", "negative"), ("s1@6", "positive")]
    assert task.parse("Rude staff, so (Negative).", items[0]).value == "negative"
    assert task.is_correct("negative", items[0]) and not task.is_correct(None, items[0])
    empty = {**row, "aspects": [], "label": "neutral"}
    with pytest.raises(UsageError, match="no labelled aspects"):
        make_task(f"absa:{_write(tmp_path / 'e.jsonl', [empty])}").items(None, 0)
    with pytest.raises(UsageError, match="line 2"):
        make_task(f"absa:{_write(tmp_path / 'b.jsonl', [row, {'id': 'x'}])}").items(None, 0)
