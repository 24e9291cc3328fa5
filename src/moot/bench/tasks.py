"""Benchmark tasks: items, the one prompt every method sees, and the answer parser.

Task specs (``--task``):

==========================  ================================================================
``arithmetic``              Du et al.'s generator: six integers in [0, 30), ``a+b*c+d-e*f``
``gsm8k:FILE.jsonl``        GSM8K lines: ``question``, ``answer`` ending in ``#### N``
``mcq:FILE.jsonl|.csv``     multiple choice in the MMLU, MMLU-Redux and ARC shapes (see
                            :mod:`moot.bench.datasets`); answer a letter or 0-based index
``absa:FILE.jsonl|.xml``    aspect sentiment: one item per labelled aspect of moot's ABSA
                            JSONL or SemEval-2014/15/16 XML (:mod:`moot.absa.dataset`);
                            gold is the aspect's polarity (``conflict`` kept as a class)
``semeval:FILE.xml``        the same as ``absa:FILE.xml``
``absa``                    the same on the dataset shipped with moot (112 sentences, EN/KO)
==========================  ================================================================

The ``absa`` task scores aspect-level polarity given the gold aspect term (the
ABSC subtask), which is what a vote or a debate can be compared on item by
item. Aspect *extraction* and the full pipeline (tuple F1, the moderator) are
scored by ``moot absa-eval``. Sentences without aspects give no items; item ids
are ``SENTENCE_ID@START`` (see :class:`AbsaTask` for aspects sharing an offset).

Data files are read from disk; nothing is fetched. ``--n`` items are a seeded
sample: the item order is a shuffle of the whole file by ``random.Random(seed)``
and the first ``n`` are taken, so a larger ``n`` with the same seed extends the
same sample (which is what lets ``--resume`` grow a run). Item ids are the
file's ``id`` field if present, else ``TASK-LINE`` (1-based line number); a
file whose ids repeat is an error naming them.

The arithmetic items are exactly those of Du et al.'s script for the same seed
(``np.random.seed(seed)``, then ``np.random.randint(0, 30, size=6)`` per item),
reproduced without numpy: numpy's legacy seeding is MT19937's ``init_genrand``
and its ``randint(0, 30)`` draws 32-bit words masked to 5 bits, rejecting
values above 29. Seed 0 gives the paper's items; the first is ``12+15*21+0-3*27``.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Any

from ..errors import UsageError
from ..prompting import load_prompt
from .datasets import check_unique_ids, mcq_fields, read_rows
from .parsers import (
    Parsed,
    canonical_number,
    lenient_choice,
    lenient_label,
    lenient_number,
    matchable_options,
    parse_choice,
    parse_label,
    parse_number,
)

__all__ = [
    "AbsaTask",
    "ArithmeticTask",
    "GSM8KTask",
    "Item",
    "MCQTask",
    "Task",
    "du_arithmetic_operands",
    "make_task",
    "render_prompt",
]


def render_prompt(name: str, **values: str) -> str:
    """Fill prompt file ``name`` (from ``moot/prompts``) with ``$placeholders``.

    Raises:
        KeyError: a placeholder of the file was not given.
    """
    return Template(load_prompt(name)).substitute(values)


@dataclass(frozen=True)
class Item:
    """One benchmark question.

    Attributes:
        id: stable identifier (resume and paired tests key on it).
        prompt: the first-round user message, identical for every method.
        gold: the correct answer in canonical form (a canonical number or a letter).
        letters: the valid letters of a multiple-choice item, else "".
        aspect: the aspect term an ``absa`` item asks about, else "".
        options: a multiple-choice item's option texts in letter order ("" for an option that
            the question itself contains), for the parser's ``text`` rule; else empty.
    """

    id: str
    prompt: str
    gold: str
    letters: str = ""
    aspect: str = ""
    options: tuple[str, ...] = ()


class Task(ABC):
    """A benchmark task: where items come from and how replies are scored."""

    spec: str = ""
    """The ``--task`` string this task was made from."""
    kind: str = ""
    """``arithmetic``, ``gsm8k``, ``mcq`` or ``absa``."""
    format_rule: str = "paren"
    """The parser rule of the answer format the prompt asks for (``paren`` or ``boxed``)."""
    data_notes: tuple[str, ...] = ()
    """What reading the data left out, and why (filled by :meth:`items`; shown in the report)."""

    @abstractmethod
    def items(self, n: int | None, seed: int) -> list[Item]:
        """The first ``n`` items of the seeded order (all items when ``n`` is None)."""

    @abstractmethod
    def parse(self, text: str, item: Item, *, truncated: bool = False) -> Parsed:
        """Parse one reply to ``item``; ``truncated``: it was cut at the token cap."""

    @abstractmethod
    def lenient(self, text: str, item: Item) -> str | None:
        """The answer a lenient parser would read (reported beside the parse failures, never scored)."""

    @abstractmethod
    def format_instruction(self, item: Item) -> str:
        """The sentence asking for the answer format, repeated in debate rounds."""

    def is_correct(self, value: str | None, item: Item) -> bool:
        """True when a parsed answer equals the gold one; a parse failure (None) is never correct."""
        return value is not None and value == item.gold

    def debate_prompt(self, item: Item, peer_replies: list[str]) -> str:
        """The user message of a debate round: the peers' previous replies, then the format again."""
        peers = "\n\n".join(render_prompt("bench_peer.md", response=r) for r in peer_replies)
        return render_prompt("bench_debate.md", peers=peers, format=self.format_instruction(item))


def du_arithmetic_operands(n: int, seed: int) -> list[tuple[int, int, int, int, int, int]]:
    """The operands of Du et al.'s first ``n`` arithmetic items for ``seed`` (numpy-identical)."""
    if not 0 <= seed <= 0xFFFFFFFF:
        raise UsageError(f"the arithmetic seed must be in [0, 2**32), got {seed}")
    state = [seed & 0xFFFFFFFF]
    for i in range(1, 624):  # MT19937 init_genrand, as numpy.random.seed(int)
        prev = state[-1]
        state.append((1812433253 * (prev ^ (prev >> 30)) + i) & 0xFFFFFFFF)
    rng = random.Random()
    rng.setstate((3, (*state, 624), None))  # CPython's generator is MT19937 too; 624 = regenerate first

    def draw() -> int:  # numpy legacy randint(0, 30): masked rejection sampling on 32-bit words
        while True:
            value = rng.getrandbits(32) & 31
            if value <= 29:
                return value

    out: list[tuple[int, int, int, int, int, int]] = []
    for _ in range(n):
        a, b, c, d, e, f = (draw() for _ in range(6))
        out.append((a, b, c, d, e, f))
    return out


class ArithmeticTask(Task):
    """Du et al.'s arithmetic: ``a+b*c+d-e*f`` with six integers in [0, 30).

    The prompt is Du et al.'s question sentence with an explicit answer format
    (``bench_arithmetic.md`` + ``bench_format_number.md``); the parser is
    :func:`moot.bench.parsers.parse_number`.
    """

    spec = "arithmetic"
    kind = "arithmetic"

    def items(self, n: int | None, seed: int) -> list[Item]:
        """Items ``arithmetic-0`` ... ``arithmetic-{n-1}`` for ``seed`` (default n: 100)."""
        count = 100 if n is None else n
        fmt = load_prompt("bench_format_number.md")
        out = []
        for i, (a, b, c, d, e, f) in enumerate(du_arithmetic_operands(count, seed)):
            expression = f"{a}+{b}*{c}+{d}-{e}*{f}"
            prompt = render_prompt("bench_arithmetic.md", expression=expression, format=fmt)
            out.append(Item(id=f"arithmetic-{i}", prompt=prompt, gold=str(a + b * c + d - e * f)))
        return out

    def parse(self, text: str, item: Item, *, truncated: bool = False) -> Parsed:
        """Numeric parser (final statement, closing ``(X)``, then last number)."""
        return parse_number(text, truncated=truncated)

    def lenient(self, text: str, item: Item) -> str | None:
        """The last number."""
        return lenient_number(text)

    def format_instruction(self, item: Item) -> str:
        """``bench_format_number.md``."""
        return load_prompt("bench_format_number.md")


def _data_file(kind: str, path: str | Path) -> Path:
    """``path`` as a Path, or a UsageError naming the task when the file does not exist."""
    out = Path(path)
    if not out.is_file():
        raise UsageError(f"{kind} data file not found: {out}")
    return out


def _sample(items: list[Item], n: int | None, seed: int, source: str | Path) -> list[Item]:
    check_unique_ids((i.id for i in items), source)
    order = list(items)
    random.Random(seed).shuffle(order)
    return order if n is None else order[:n]


def _item_id(row: dict[str, Any], kind: str, line: int) -> str:
    raw = row.get("id")
    return str(raw) if raw not in (None, "") else f"{kind}-{line}"


class GSM8KTask(Task):
    """GSM8K-format word problems; gold is the number after ``####`` in ``answer``."""

    kind = "gsm8k"
    format_rule = "boxed"

    def __init__(self, path: str | Path) -> None:
        self.path = _data_file(self.kind, path)
        self.spec = f"gsm8k:{path}"

    def items(self, n: int | None, seed: int) -> list[Item]:
        """A seeded sample of the file's items (see the module docstring).

        Raises:
            UsageError: a line lacks ``question``/``answer`` or its answer is not a number.
        """
        fmt = load_prompt("bench_format_boxed.md")
        items = []
        for line, row in read_rows(self.path, "gsm8k"):
            question, answer = row.get("question"), row.get("answer")
            if not isinstance(question, str) or answer is None:
                raise UsageError(f"{self.path}:{line}: a gsm8k line needs 'question' and 'answer'")
            gold = canonical_number(str(answer).split("####")[-1])
            if gold is None:
                raise UsageError(f"{self.path}:{line}: the answer does not end in '#### NUMBER'")
            prompt = render_prompt("bench_gsm8k.md", question=question.strip(), format=fmt)
            items.append(Item(id=_item_id(row, "gsm8k", line), prompt=prompt, gold=gold))
        return _sample(items, n, seed, self.path)

    def parse(self, text: str, item: Item, *, truncated: bool = False) -> Parsed:
        r"""Numeric parser (``\boxed{}``, ``####`` or final statement, closing ``(X)``, last number)."""
        return parse_number(text, truncated=truncated)

    def lenient(self, text: str, item: Item) -> str | None:
        """The last number."""
        return lenient_number(text)

    def format_instruction(self, item: Item) -> str:
        """``bench_format_boxed.md``."""
        return load_prompt("bench_format_boxed.md")


class MCQTask(Task):
    """Multiple choice: the JSONL and CSV shapes of MMLU, MMLU-Redux and ARC (see :mod:`.datasets`)."""

    kind = "mcq"

    def __init__(self, path: str | Path) -> None:
        self.path = _data_file(self.kind, path)
        self.spec = f"mcq:{path}"

    def items(self, n: int | None, seed: int) -> list[Item]:
        """A seeded sample of the file's items (see the module docstring).

        Raises:
            UsageError: a line lacks a question, valid choices or a valid answer.
        """
        items = []
        for line, row in read_rows(self.path, "mcq"):
            question, choices, gold = mcq_fields(row, f"{self.path}:{line}")
            letters = "".join(choices)
            lines = "\n".join(f"{k}) {v}" for k, v in choices.items())
            fmt = render_prompt("bench_format_choice.md", letters=", ".join(letters))
            prompt = render_prompt("bench_mcq.md", question=question, choices=lines, format=fmt)
            options = matchable_options(question, list(choices.values()))
            item_id = _item_id(row, "mcq", line)
            items.append(Item(id=item_id, prompt=prompt, gold=gold, letters=letters, options=options))
        return _sample(items, n, seed, self.path)

    def parse(self, text: str, item: Item, *, truncated: bool = False) -> Parsed:
        """Letter parser restricted to the item's letters."""
        return parse_choice(text, item.letters, item.options)

    def lenient(self, text: str, item: Item) -> str | None:
        """The last valid letter standing alone."""
        return lenient_choice(text, item.letters)

    def format_instruction(self, item: Item) -> str:
        """``bench_format_choice.md`` with the item's letters."""
        return render_prompt("bench_format_choice.md", letters=", ".join(item.letters))


class AbsaTask(Task):
    """Aspect sentiment on labelled ABSA data: one item per gold aspect.

    The data file is read by :func:`moot.absa.dataset.read_dataset` (moot's
    JSONL or SemEval-2014/15/16 XML, the same as ``moot absa-eval``); ``path``
    None reads the shipped dataset. Item ids are ``SENTENCE_ID@START``; when a
    sentence has two aspects at one offset (SemEval-2015/16 implicit ``NULL``
    targets at 0, or one target with two categories) the later ones get
    ``#2``, ``#3``... in file order. An implicit aspect is asked about by its
    category in words (``FOOD#QUALITY`` -> "food quality"), a target with two
    categories by both ("wine list (drinks prices)"). The labels are
    positive, negative and neutral, plus ``conflict`` when the data has that
    class (SemEval-2014); ``exclude_conflict`` leaves those aspects out instead,
    and :attr:`data_notes` says how many.
    """

    kind = "absa"

    def __init__(self, path: str | Path | None = None, *, exclude_conflict: bool = False) -> None:
        if path is not None:
            _data_file(self.kind, str(path).removeprefix("semeval:"))
        self.path = path
        self.spec = f"absa:{path}" if path is not None else "absa"
        self.exclude_conflict = exclude_conflict
        self.labels: tuple[str, ...] = ("positive", "negative", "neutral")
        """The valid answers, in the order the prompt lists them (``conflict`` added when the data has it)."""

    def items(self, n: int | None, seed: int) -> list[Item]:
        """A seeded sample of the (sentence, aspect) pairs (see the module docstring).

        Raises:
            UsageError: a line is not a valid ABSA item (its line and fields are named), or
                sentence ids repeat.
        """
        from ..absa.dataset import read_dataset

        data = read_dataset(self.path, conflict="exclude" if self.exclude_conflict else "keep")
        notes = [f"rejected {r}" for r in data.rejected]
        if data.excluded_conflict:
            notes.append(f"{data.excluded_conflict} aspects labelled conflict excluded (--exclude-conflict)")
        self.data_notes = tuple(notes)
        if any(a.polarity == "conflict" for row in data.items for a in row.aspects):
            self.labels = ("positive", "negative", "neutral", "conflict")
        fmt = self.format_instruction(Item(id="", prompt="", gold=""))
        items = []
        for row in data.items:
            shared = Counter(a.start for a in row.aspects)
            seen: Counter[int] = Counter()
            for aspect in row.aspects:
                seen[aspect.start] += 1
                suffix = f"#{seen[aspect.start]}" if seen[aspect.start] > 1 else ""
                name = aspect.name
                if aspect.term and aspect.category and shared[aspect.start] > 1:  # one term, two categories
                    name = f"{aspect.term} ({aspect.category.replace('#', ' ').replace('_', ' ').lower()})"
                prompt = render_prompt("bench_absa.md", term=name, sentence=row.sentence, format=fmt)
                item_id = f"{row.id}@{aspect.start}{suffix}"
                items.append(Item(id=item_id, prompt=prompt, gold=aspect.polarity, aspect=name))
        if not items:
            raise UsageError(f"{self.path or 'the absa dataset'} holds no labelled aspects")
        return _sample(items, n, seed, self.path or "the absa dataset")

    def parse(self, text: str, item: Item, *, truncated: bool = False) -> Parsed:
        """Label parser (marker, statements about the asked aspect, bare label)."""
        return parse_label(text, self.labels, item.aspect)

    def lenient(self, text: str, item: Item) -> str | None:
        """The last label word."""
        return lenient_label(text, self.labels)

    def format_instruction(self, item: Item) -> str:
        """``bench_format_label.md`` with the labels."""
        return render_prompt("bench_format_label.md", labels=", ".join(self.labels))


def make_task(spec: str, *, exclude_conflict: bool = False) -> Task:
    """The task for a ``--task`` string (``exclude_conflict``: leave out ABSA ``conflict`` aspects).

    Raises:
        UsageError: unknown task or missing file.
    """
    kind, _, rest = spec.strip().partition(":")
    if kind == "semeval" and rest:
        return AbsaTask(spec.strip(), exclude_conflict=exclude_conflict)
    if kind == "arithmetic" and not rest:
        return ArithmeticTask()
    if kind == "gsm8k" and rest:
        return GSM8KTask(rest)
    if kind == "mcq" and rest:
        return MCQTask(rest)
    if kind == "absa":
        return AbsaTask(rest or None, exclude_conflict=exclude_conflict)
    raise UsageError(
        f"unknown task {spec!r}; use arithmetic, gsm8k:FILE.jsonl, mcq:FILE.jsonl|.csv, "
        "absa[:FILE.jsonl|.xml] or semeval:FILE.xml"
    )
