"""Reading benchmark data files: JSONL and CSV rows, the common multiple-choice shapes, unique ids.

Multiple-choice rows are accepted in the shapes public datasets publish:

=====================================  =============================================================
MMLU, MMLU-Redux (Hugging Face JSONL)  ``question``, ``choices`` (list), ``answer`` (0-based index)
ARC (Hugging Face JSONL)               ``question``, ``choices: {"text": [...], "label": [...]}``,
                                       ``answerKey`` (a label: ``A``-``E`` or ``1``-``5``)
ARC (original JSONL)                   ``question: {"stem", "choices": [{"text", "label"}]}``,
                                       ``answerKey``
letter columns                         ``question``, ``A``, ``B``, ``C``, ``D`` (...), ``answer``
CSV with a header                      the same columns; ``choices`` is a JSON or Python list
CSV without a header (MMLU's own)      question, A, B, C, D, answer letter
=====================================  =============================================================

``answer`` may be a 0-based index (an integer, or digits in a CSV cell) or a
letter, optionally in brackets (``(B)``). Item ids come from an ``id`` field
when present (else ``KIND-LINE``) and must be unique: duplicates are an error
naming them, since two items with one id would be merged by ``--resume`` and
the report but not by ``results.jsonl``.
"""

from __future__ import annotations

import ast
import csv
import io
import json
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..jsontext import check_unique_ids, jsonl_rows

__all__ = ["check_unique_ids", "jsonl_rows", "mcq_fields", "read_rows"]


def read_rows(path: Path, kind: str) -> list[tuple[int, dict[str, Any]]]:
    """``(line number, row)`` of a JSONL file, or of a CSV file (``.csv``) as dicts.

    Raises:
        UsageError: a line that is not a JSON object, an unreadable file, or no rows at all.
    """
    try:
        text = path.read_text(encoding="utf-8-sig")  # spreadsheet exports start with a BOM
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"cannot read {kind} data file {path}: {err}") from None
    rows = _csv_rows(text) if path.suffix.lower() == ".csv" else jsonl_rows(text, path)
    if not rows:
        raise UsageError(f"{path} holds no items")
    return rows


def _csv_rows(text: str) -> list[tuple[int, dict[str, Any]]]:
    table = [r for r in csv.reader(io.StringIO(text)) if any(cell.strip() for cell in r)]
    if not table:
        return []
    # "Question", "Answer" as some exports write them; single letters (option columns) stay upper case.
    header = [h.strip() if len(h.strip()) == 1 else h.strip().lower() for h in table[0]]
    if "question" in header:
        return [(i + 2, dict(zip(header, r, strict=False))) for i, r in enumerate(table[1:])]
    # MMLU's own CSV files have no header: question, the options, the answer letter.
    out = []
    for i, r in enumerate(table):
        options = r[1:-1]
        row: dict[str, Any] = {"question": r[0], "answer": r[-1] if len(r) > 1 else ""}
        row.update({chr(ord("A") + j): text for j, text in enumerate(options)})
        out.append((i + 1, row))
    return out


def _choice_list(raw: Any) -> Any:
    """A CSV cell holding a list (JSON or Python literal) as a list; anything else unchanged."""
    if isinstance(raw, str) and raw.strip().startswith("["):
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            try:
                return ast.literal_eval(raw.strip())
            except (ValueError, SyntaxError):
                return raw
    return raw


def _choices(row: dict[str, Any], where: str) -> tuple[dict[str, str], list[str]]:
    """The options by letter, and the dataset's own labels for them (ARC numbers some ``1``-``5``)."""
    question = row.get("question")
    raw = _choice_list(row.get("choices", row.get("options")))
    if raw is None and isinstance(question, dict):
        raw = question.get("choices")
    if raw is None:
        raw = [row[k] for k in "ABCDEFGHIJ" if isinstance(row.get(k), str) and row[k].strip()] or None
    labels: list[str] = []
    if isinstance(raw, dict) and isinstance(raw.get("text"), list):
        labels = [str(label) for label in raw.get("label") or []]
        raw = raw["text"]
    elif isinstance(raw, list) and raw and all(isinstance(c, dict) and "text" in c for c in raw):
        labels = [str(c.get("label", "")) for c in raw]
        raw = [c["text"] for c in raw]
    if isinstance(raw, list) and 2 <= len(raw) <= 26:
        letters = [chr(ord("A") + i) for i in range(len(raw))]
        return dict(zip(letters, (str(t) for t in raw), strict=True)), labels or letters
    if isinstance(raw, dict) and raw and all(len(str(k)) == 1 and str(k).isupper() for k in raw):
        ordered = sorted((str(k), str(v)) for k, v in raw.items())
        return dict(ordered), [k for k, _ in ordered]
    raise UsageError(
        f"{where}: 'choices' must be a list of 2-26 options, a {{letter: text}} mapping, ARC's "
        "{'text': [...], 'label': [...]}, or columns A, B, C, D"
    )


def _gold(row: dict[str, Any], letters: str, labels: list[str], where: str) -> str:
    answer = row.get("answer", row.get("answerKey"))
    if isinstance(answer, str) and answer.strip().isdigit() and answer.strip() not in labels:
        answer = int(answer.strip())  # a CSV cell holding an index
    if isinstance(answer, int) and not isinstance(answer, bool) and 0 <= answer < len(letters):
        return letters[answer]
    if isinstance(answer, str) and answer.strip():
        key = answer.strip().strip("()").strip()
        if key in labels:
            return letters[labels.index(key)]
        if key.upper() in letters:
            return key.upper()
    raise UsageError(
        f"{where}: 'answer' must be one of {', '.join(letters)} or a 0-based index, got {answer!r}"
    )


def mcq_fields(row: dict[str, Any], where: str) -> tuple[str, dict[str, str], str]:
    """``(question, options by letter, gold letter)`` of one multiple-choice row.

    Raises:
        UsageError: no question, no valid options or no valid answer (``where`` names the line).
    """
    question = row.get("question")
    if isinstance(question, dict):
        question = question.get("stem")
    if not isinstance(question, str) or not question.strip():
        raise UsageError(f"{where}: an mcq line needs a 'question' (or ARC's question.stem)")
    choices, labels = _choices(row, where)
    letters = "".join(choices)
    return question.strip(), choices, _gold(row, letters, labels, where)
