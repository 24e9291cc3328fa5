"""Benchmark tasks: items, the one prompt every method sees, and the answer parser.

Task specs (``--task``):

==========================  ================================================================
``arithmetic``              Du et al.'s generator: six integers in [0, 30), ``a+b*c+d-e*f``
``gsm8k:FILE.jsonl``        GSM8K lines: ``question``, ``answer`` ending in ``#### N``
``mcq:FILE.jsonl``          ``question``, ``choices`` (list or {letter: text}), ``answer``
                            (a letter, or a 0-based index)
``absa:FILE.jsonl``         aspect sentiment: one item per labelled aspect of the ABSA
                            pipeline's data (``moot absa`` format: ``sentence``, ``aspects``
                            with ``term``/``start``/``end``/``polarity``); gold is the
                            aspect's polarity (positive, negative or neutral)
``absa``                    the same on the dataset shipped with moot (112 sentences, EN/KO)
==========================  ================================================================

The ``absa`` task scores aspect-level polarity given the gold aspect term (the
ABSC subtask), which is what a vote or a debate can be compared on item by
item. Aspect *extraction* and the full pipeline (tuple F1, the moderator) are
scored by ``moot absa-eval``. Sentences without aspects give no items; item ids
are ``SENTENCE_ID@START`` (the aspect's character offset, unique in a sentence).

Data files are read from disk; nothing is fetched. ``--n`` items are a seeded
sample: the item order is a shuffle of the whole file by ``random.Random(seed)``
and the first ``n`` are taken, so a larger ``n`` with the same seed extends the
same sample (which is what lets ``--resume`` grow a run). Item ids are the
file's ``id`` field if present, else ``TASK-LINE`` (1-based line number).

The arithmetic items are exactly those of Du et al.'s script for the same seed
(``np.random.seed(seed)``, then ``np.random.randint(0, 30, size=6)`` per item),
reproduced without numpy: numpy's legacy seeding is MT19937's ``init_genrand``
and its ``randint(0, 30)`` draws 32-bit words masked to 5 bits, rejecting
values above 29. Seed 0 gives the paper's items; the first is ``12+15*21+0-3*27``.
"""

from __future__ import annotations

import json
import random
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Any

from ..errors import UsageError
from ..prompting import load_prompt
from .parsers import (
    Parsed,
    canonical_number,
    lenient_choice,
    lenient_label,
    lenient_number,
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
    """

    id: str
    prompt: str
    gold: str
    letters: str = ""
    aspect: str = ""


class Task(ABC):
    """A benchmark task: where items come from and how replies are scored."""

    spec: str = ""
    """The ``--task`` string this task was made from."""
    kind: str = ""
    """``arithmetic``, ``gsm8k``, ``mcq`` or ``absa``."""
    format_rule: str = "paren"
    """The parser rule of the answer format the prompt asks for (``paren`` or ``boxed``)."""

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


def _read_jsonl(path: Path, task: str) -> list[tuple[int, dict[str, Any]]]:
    if not path.is_file():
        raise UsageError(f"{task} data file not found: {path}")
    rows: list[tuple[int, dict[str, Any]]] = []
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise UsageError(f"{path}:{number}: not valid JSON ({err.msg})") from None
            if not isinstance(row, dict):
                raise UsageError(f"{path}:{number}: each line must be a JSON object")
            rows.append((number, row))
    if not rows:
        raise UsageError(f"{path} holds no items")
    return rows


def _sample(items: list[Item], n: int | None, seed: int) -> list[Item]:
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
        for line, row in _read_jsonl(self.path, "gsm8k"):
            question, answer = row.get("question"), row.get("answer")
            if not isinstance(question, str) or answer is None:
                raise UsageError(f"{self.path}:{line}: a gsm8k line needs 'question' and 'answer'")
            gold = canonical_number(str(answer).split("####")[-1])
            if gold is None:
                raise UsageError(f"{self.path}:{line}: the answer does not end in '#### NUMBER'")
            prompt = render_prompt("bench_gsm8k.md", question=question.strip(), format=fmt)
            items.append(Item(id=_item_id(row, "gsm8k", line), prompt=prompt, gold=gold))
        return _sample(items, n, seed)

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
    """Multiple choice (MMLU style): ``question``, ``choices``, ``answer`` letter or index."""

    kind = "mcq"

    def __init__(self, path: str | Path) -> None:
        self.path = _data_file(self.kind, path)
        self.spec = f"mcq:{path}"

    @staticmethod
    def _choices(row: dict[str, Any], where: str) -> dict[str, str]:
        raw = row.get("choices", row.get("options"))
        if isinstance(raw, list) and 2 <= len(raw) <= 26:
            return {chr(ord("A") + i): str(text) for i, text in enumerate(raw)}
        if isinstance(raw, dict) and raw and all(len(str(k)) == 1 and str(k).isupper() for k in raw):
            return {str(k): str(v) for k, v in sorted(raw.items())}
        raise UsageError(f"{where}: 'choices' must be a list of 2-26 options or a {{letter: text}} mapping")

    @staticmethod
    def _gold(row: dict[str, Any], letters: str, where: str) -> str:
        answer = row.get("answer")
        if isinstance(answer, int) and not isinstance(answer, bool) and 0 <= answer < len(letters):
            return letters[answer]
        if isinstance(answer, str) and answer.strip().strip("()").upper() in letters and answer.strip():
            return answer.strip().strip("()").upper()
        raise UsageError(f"{where}: 'answer' must be one of {', '.join(letters)} or a 0-based index")

    def items(self, n: int | None, seed: int) -> list[Item]:
        """A seeded sample of the file's items (see the module docstring).

        Raises:
            UsageError: a line lacks a question, valid choices or a valid answer.
        """
        items = []
        for line, row in _read_jsonl(self.path, "mcq"):
            where = f"{self.path}:{line}"
            question = row.get("question")
            if not isinstance(question, str) or not question.strip():
                raise UsageError(f"{where}: an mcq line needs a 'question'")
            choices = self._choices(row, where)
            letters = "".join(choices)
            gold = self._gold(row, letters, where)
            lines = "\n".join(f"{k}) {v}" for k, v in choices.items())
            fmt = render_prompt("bench_format_choice.md", letters=", ".join(letters))
            prompt = render_prompt("bench_mcq.md", question=question.strip(), choices=lines, format=fmt)
            items.append(Item(id=_item_id(row, "mcq", line), prompt=prompt, gold=gold, letters=letters))
        return _sample(items, n, seed)

    def parse(self, text: str, item: Item, *, truncated: bool = False) -> Parsed:
        """Letter parser restricted to the item's letters."""
        return parse_choice(text, item.letters)

    def lenient(self, text: str, item: Item) -> str | None:
        """The last valid letter standing alone."""
        return lenient_choice(text, item.letters)

    def format_instruction(self, item: Item) -> str:
        """``bench_format_choice.md`` with the item's letters."""
        return render_prompt("bench_format_choice.md", letters=", ".join(item.letters))


class AbsaTask(Task):
    """Aspect sentiment on the ABSA pipeline's data: one item per gold aspect.

    The data file is validated with :func:`moot.absa.evaluate.load_dataset` (the
    same schema as ``moot absa-eval``); ``path`` None reads the shipped dataset.
    """

    kind = "absa"
    labels: tuple[str, ...] = ("positive", "negative", "neutral")
    """The valid answers, in the order the prompt lists them."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = _data_file(self.kind, path) if path is not None else None
        self.spec = f"absa:{path}" if path is not None else "absa"

    def items(self, n: int | None, seed: int) -> list[Item]:
        """A seeded sample of the (sentence, aspect) pairs (see the module docstring).

        Raises:
            UsageError: a line is not a valid ABSA item (its line number is named).
        """
        from ..absa.evaluate import load_dataset

        fmt = self.format_instruction(Item(id="", prompt="", gold=""))
        items = []
        for row in load_dataset(self.path):
            for aspect in row.aspects:
                prompt = render_prompt("bench_absa.md", term=aspect.term, sentence=row.sentence, format=fmt)
                items.append(
                    Item(
                        id=f"{row.id}@{aspect.start}", prompt=prompt, gold=aspect.polarity, aspect=aspect.term
                    )
                )
        if not items:
            raise UsageError(f"{self.path or 'the absa dataset'} holds no labelled aspects")
        return _sample(items, n, seed)

    def parse(self, text: str, item: Item, *, truncated: bool = False) -> Parsed:
        """Label parser (marker, statements about the asked aspect, bare label)."""
        return parse_label(text, self.labels, item.aspect)

    def lenient(self, text: str, item: Item) -> str | None:
        """The last label word."""
        return lenient_label(text, self.labels)

    def format_instruction(self, item: Item) -> str:
        """``bench_format_label.md`` with the labels."""
        return render_prompt("bench_format_label.md", labels=", ".join(self.labels))


def make_task(spec: str) -> Task:
    """The task for a ``--task`` string.

    Raises:
        UsageError: unknown task or missing file.
    """
    kind, _, rest = spec.strip().partition(":")
    if kind == "arithmetic" and not rest:
        return ArithmeticTask()
    if kind == "gsm8k" and rest:
        return GSM8KTask(rest)
    if kind == "mcq" and rest:
        return MCQTask(rest)
    if kind == "absa":
        return AbsaTask(rest or None)
    raise UsageError(
        f"unknown task {spec!r}; use arithmetic, gsm8k:FILE.jsonl, mcq:FILE.jsonl or absa[:FILE.jsonl]"
    )
