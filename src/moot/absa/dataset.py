"""Labelled ABSA data: moot's JSONL and the SemEval-2014/2015/2016 XML, validated on load.

Formats (chosen by ``semeval:`` prefix or the ``.xml`` extension, else JSONL):

* **moot JSONL** (``moot/data/absa_sentences.jsonl``): one object per line with
  ``id``, ``sentence``, ``aspects`` (``term``, ``start``, ``end``, ``polarity``,
  optional ``category``), optional ``label`` (positive, negative, neutral,
  mixed), optional ``lang`` (any code) and ``phenomena``.
* **SemEval-2014 Task 4** XML: ``<sentence id>`` with ``<text>`` and
  ``<aspectTerm term polarity from to>``.
* **SemEval-2015 Task 12 / 2016 Task 5** XML: ``<sentence id>`` with
  ``<Opinion target category polarity from to>``; an implicit target is
  ``target="NULL"`` at ``0:0`` and becomes an aspect with an empty term and
  its category. Sentences marked ``OutOfScope="TRUE"`` are skipped.

Checks, so that no figure is silently corrupted:

* every explicit aspect's span must hold its term (``sentence[start:end] ==
  term``); a sentence that fails is **rejected**: left out, with the reason
  kept in :attr:`Dataset.rejected` for the caller to show;
* sentence ids must be unique: duplicates are an error naming them and where each was read;
* a line that does not fit the schema is an error naming the line and the
  fields at fault.

The ``conflict`` polarity (SemEval-2014) is kept as its own class, or left
out with ``conflict="exclude"`` (the count is kept in
:attr:`Dataset.excluded_conflict`).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import UsageError
from ..jsontext import check_unique_ids, jsonl_rows

__all__ = [
    "Dataset",
    "GoldAspect",
    "GoldItem",
    "Polarity",
    "describe_validation_error",
    "load_dataset",
    "read_dataset",
]

Polarity = Literal["positive", "negative", "neutral", "conflict"]
ConflictRule = Literal["keep", "exclude"]


class GoldAspect(BaseModel):
    """A labelled aspect; ``sentence[start:end] == term``, or an implicit one (empty term at 0:0)."""

    model_config = ConfigDict(extra="forbid")

    term: str
    start: int = Field(ge=0)
    end: int = Field(ge=0)
    polarity: Polarity
    category: str | None = None
    """The aspect category (SemEval-2015/16 ``ENTITY#ATTRIBUTE``), when the data has one."""

    @property
    def implicit(self) -> bool:
        """True for an aspect without a term in the sentence (SemEval's ``NULL`` target)."""
        return not self.term

    @property
    def name(self) -> str:
        """The term; for an implicit aspect, its category in words (``FOOD#QUALITY``: ``food quality``)."""
        if self.term:
            return self.term
        return (self.category or "the whole sentence").replace("#", " ").replace("_", " ").lower()


class GoldItem(BaseModel):
    """One labelled sentence."""

    model_config = ConfigDict(extra="forbid")

    id: str
    sentence: str
    lang: str | None = None
    """Any language code, or None."""
    label: Literal["positive", "negative", "neutral", "mixed"] | None = None
    """The sentence label; None where the data has none (label accuracy skips it)."""
    aspects: list[GoldAspect] = Field(default_factory=list)
    phenomena: list[str] = Field(default_factory=list)


@dataclass
class Dataset:
    """A loaded dataset.

    Attributes:
        items: the accepted sentences, in file order.
        rejected: ``"WHERE: reason"`` of each sentence left out (a span that does not hold its term).
        excluded_conflict: ``conflict`` aspects left out by ``conflict="exclude"``.
        source: the file read (``None``: the shipped data).
    """

    items: list[GoldItem]
    rejected: list[str] = field(default_factory=list)
    excluded_conflict: int = 0
    source: str | None = None


def describe_validation_error(err: ValidationError) -> str:
    """One line naming each field at fault: ``aspects.0.polarity: Input should be ...``."""
    parts = []
    for e in err.errors():
        where = ".".join(str(p) for p in e["loc"]) or "line"
        parts.append(f"{where}: {e['msg']}")
    return "; ".join(parts)


def _span_problem(item: GoldItem) -> str | None:
    for a in item.aspects:
        if a.implicit:
            if a.start or a.end:
                return f"an aspect without a term must be at 0:0, got {a.start}:{a.end}"
            continue
        found = item.sentence[a.start : a.end]
        if found != a.term:
            return f"span {a.start}:{a.end} holds {found!r}, not the term {a.term!r}"
    return None


_SEMEVAL_POLARITIES = {"positive", "negative", "neutral", "conflict"}


def _semeval_rows(text: str, source: str) -> list[tuple[str, int, dict[str, object]]]:
    """``(where, ordinal of the <sentence>, row)`` of each sentence in scope."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise UsageError(f"{source}: not valid XML ({exc})") from None
    rows: list[tuple[str, int, dict[str, object]]] = []
    for number, sent in enumerate(root.iter("sentence"), 1):
        if sent.get("OutOfScope", "").upper() == "TRUE":
            continue
        sid = sent.get("id") or str(number)
        where = f"{source} sentence {sid}"
        text_el = sent.find("text")
        if text_el is None or text_el.text is None:
            raise UsageError(f"{where}: no <text>")
        aspects: list[dict[str, object]] = []
        # 2014: <aspectTerms><aspectTerm/>; 2015/16: <Opinions><Opinion/>.
        for el in [*sent.iter("aspectTerm"), *sent.iter("Opinion")]:
            term = el.get("term", el.get("target", ""))
            polarity = el.get("polarity", "")
            if polarity not in _SEMEVAL_POLARITIES:
                raise UsageError(
                    f"{where}: polarity {polarity!r} is not one of {sorted(_SEMEVAL_POLARITIES)}"
                )
            try:
                start, end = int(el.get("from", "0")), int(el.get("to", "0"))
            except ValueError:
                raise UsageError(f"{where}: 'from'/'to' must be integers") from None
            aspects.append(
                {
                    "term": "" if term == "NULL" else term,
                    "start": start,
                    "end": end,
                    "polarity": polarity,
                    "category": el.get("category"),
                }
            )
        rows.append((where, number, {"id": sid, "sentence": text_el.text, "aspects": aspects}))
    return rows


def _is_semeval(spec: str) -> tuple[bool, str]:
    if spec.startswith("semeval:"):
        return True, spec.removeprefix("semeval:")
    return spec.lower().endswith(".xml"), spec


def read_dataset(
    path: str | Path | None = None, *, limit: int | None = None, conflict: ConflictRule = "keep"
) -> Dataset:
    """Read and check a dataset (default: the shipped ``moot/data/absa_sentences.jsonl``).

    Args:
        path: a JSONL file, a SemEval XML file (``.xml``), or ``semeval:FILE``.
        limit: keep only the first ``limit`` accepted sentences.
        conflict: ``keep`` the ``conflict`` polarity as its own class, or ``exclude`` those aspects.

    Raises:
        UsageError: unreadable file, a line or sentence that does not fit the schema (naming the
            fields), or duplicate sentence ids (naming them and their lines, or for XML the
            ordinals of their ``<sentence>`` elements).
    """
    xml, name = _is_semeval(str(path)) if path is not None else (False, "")
    try:
        if path is None:
            text = resources.files("moot").joinpath("data/absa_sentences.jsonl").read_text("utf-8")
        else:
            text = Path(name).read_text("utf-8-sig")  # a BOM, as some editors write, is no part of line 1
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read dataset {name}: {exc}") from None
    source = name or "dataset"
    if xml:
        rows = _semeval_rows(text, source)
    else:
        rows = [(f"{source} line {number}", number, row) for number, row in jsonl_rows(text, source)]
    out = Dataset(items=[], source=name or None)
    places: list[int] = []  # where each item was read: its line, or its <sentence> in XML
    for where, place, row in rows:
        try:
            item = GoldItem.model_validate(row)
        except ValidationError as exc:
            raise UsageError(f"{where}: invalid item: {describe_validation_error(exc)}") from None
        problem = _span_problem(item)
        if problem is not None:
            out.rejected.append(f"{where} (id {item.id}): {problem}")
            continue
        if conflict == "exclude":
            kept = [a for a in item.aspects if a.polarity != "conflict"]
            out.excluded_conflict += len(item.aspects) - len(kept)
            item.aspects = kept
        out.items.append(item)
        places.append(place)
        if limit is not None and len(out.items) >= limit:
            break
    check_unique_ids((it.id for it in out.items), source, places=places, unit="sentence" if xml else "line")
    return out


def load_dataset(path: str | Path | None = None, *, limit: int | None = None) -> list[GoldItem]:
    """The accepted sentences of :func:`read_dataset` (rejected ones are left out)."""
    return read_dataset(path, limit=limit).items
