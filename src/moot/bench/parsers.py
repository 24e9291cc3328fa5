r"""Answer parsers for the benchmark tasks: documented rules, and no guessing.

Every parser returns a :class:`Parsed` with the answer in canonical form (or
None) and the name of the rule that found it, so a report can say how many
answers needed the fallback rule. A parse failure (``value is None``) is scored
as a wrong answer by the harness: never correct, never replaced by a random
choice.

Numeric answers (``arithmetic``, ``gsm8k``), tried in order:

1. ``marker``: the *last* answer marker in the text, either ``(X)`` or
   ``\boxed{X}``, whose content is a number (``(-12)``, ``(1,234)``,
   ``\boxed{\$18.00}``). A marker without a number is ignored.
2. ``last_number``: otherwise the last number in the text (the rule of Du et
   al.'s arithmetic script). A ``-`` counts as a sign only when it is attached
   to the digits and does not follow a digit, a letter or a closing bracket,
   so ``12-5`` and ``20 - 5`` end in ``5`` and ``= -5`` in ``-5``.
3. otherwise a parse failure.

Numbers are canonicalised: thousands separators and ``$``/``%`` dropped,
``18.00`` -> ``18``, ``0.50`` -> ``0.5``; two answers are equal when their
canonical strings are.

Multiple choice (``mcq``), letters restricted to the item's own letters:

1. ``marker``: the last ``(X)`` or ``\boxed{X}`` holding a valid capital
   letter (lower case is left out: ``(a)``, ``(b)`` are usually enumerations).
2. ``phrase``: the last "answer is X", "answer: X" or "option X" phrase, X a capital letter.
3. ``bare``: the whole reply is one valid letter, optionally with
   punctuation (``B``, ``B.``, ``B)``).
4. otherwise a parse failure. There is no "last capital letter" fallback: "A"
   is an English word.

Sentiment labels (``absa``), case-insensitive, restricted to the task's labels:

1. ``marker``: the last ``(X)`` or ``\boxed{X}`` whose content is a label.
2. ``phrase``: every statement of the form "a X sentiment" (or polarity, tone,
   opinion) and "sentiment ... is X" / "polarity: X" / "answer is X" /
   "label: X" within one clause. They must all name the same label; if two
   name different labels ("a positive sentiment ... and is neutral"), or one
   is negated ("not a positive sentiment"), the reply is a parse failure.
3. ``bare``: the whole reply is one label, optionally with punctuation.
4. otherwise a parse failure. There is no "any label word in the text"
   fallback: "not positive at all" would be read as positive.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

__all__ = [
    "Parsed",
    "canonical_number",
    "parse_choice",
    "parse_label",
    "parse_number",
]


@dataclass(frozen=True)
class Parsed:
    """The outcome of parsing one reply.

    Attributes:
        value: the answer in canonical form, or None when nothing could be parsed.
        rule: which rule found it (``marker``, ``last_number``, ``phrase``, ``bare``) or ``none``.
    """

    value: str | None
    rule: str

    @property
    def failed(self) -> bool:
        """True when no answer could be parsed."""
        return self.value is None


_FAILED = Parsed(None, "none")

# A number as models write it: optional sign, thousands separators or plain digits, decimals.
_NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+"
# A sign only where it cannot be a binary minus (not after a digit, letter, '.' or closing bracket),
# and only when attached to the digits: in "20 - 5" the last number is 5.
_SIGNED = rf"(?:(?<![\w)\]}}.])-)?(?:{_NUM})"
_NUMBER_RE = re.compile(_SIGNED)
_PAREN_RE = re.compile(r"\(\s*([^()]{1,40}?)\s*\)")
_BOXED_RE = re.compile(r"\\boxed\s*\{((?:[^{}]|\{[^{}]*\})*)\}")
_MINUS_CHARS = str.maketrans({"\u2212": "-", "\u2013": "-", "\u2014": "-", "\u00a0": " "})


def canonical_number(text: str) -> str | None:
    """The canonical string of a number written as text, or None if it is not one number.

    ``"1,234"`` -> ``"1234"``, ``"-18.00"`` -> ``"-18"``, ``"$0.50"`` -> ``"0.5"``,
    ``"12 apples"`` -> None (not a bare number).
    """
    s = text.translate(_MINUS_CHARS).strip()
    s = s.replace("\\$", "").replace("$", "").replace("\\%", "").replace("%", "").strip()
    s = s.rstrip(".").strip()
    negative = s.startswith("-")
    if negative:
        s = s[1:].strip()
    if not re.fullmatch(_NUM, s):
        return None
    try:
        value = Decimal(s.replace(",", ""))
    except InvalidOperation:  # pragma: no cover - the regex admits only valid decimals
        return None
    if negative:
        value = -value
    if value == 0:
        return "0"
    out = format(value.normalize(), "f")
    return out


def _marker_number(content: str) -> str | None:
    r"""A number inside ``(…)`` or ``\boxed{…}``: the whole content, or its single number."""
    direct = canonical_number(content)
    if direct is not None:
        return direct
    # \boxed{\$18} or \boxed{18 \text{ dollars}}: accept when exactly one number is inside.
    if "\\" in content or "text" in content:
        found = _NUMBER_RE.findall(content.translate(_MINUS_CHARS))
        if len(found) == 1:
            return canonical_number(found[0])
    return None


def _markers(text: str) -> list[tuple[int, str]]:
    r"""(position, content) of every ``(…)`` and ``\boxed{…}`` marker, in text order."""
    found = [(m.start(), m.group(1)) for m in _PAREN_RE.finditer(text)]
    found += [(m.start(), m.group(1)) for m in _BOXED_RE.finditer(text)]
    return sorted(found)


def parse_number(text: str) -> Parsed:
    """Parse a numeric answer (``arithmetic`` and ``gsm8k``); see the module docstring for the rules."""
    if not text:
        return _FAILED
    clean = text.translate(_MINUS_CHARS)
    for _, content in reversed(_markers(clean)):
        value = _marker_number(content)
        if value is not None:
            return Parsed(value, "marker")
    numbers = _NUMBER_RE.findall(clean)
    for raw in reversed(numbers):
        value = canonical_number(raw)
        if value is not None:
            return Parsed(value, "last_number")
    return _FAILED


# The keywords are case-insensitive, the letter is not: "the answer is a bit unclear" is no answer.
_PHRASE_RE = re.compile(
    r"(?i:answer\s*(?:is|would be|:)|option|choice)\s*[:\-]?\s*\(?\s*\**([A-Z])\**\s*\)?(?![A-Za-z])"
)
_BARE_RE = re.compile(r"\(?\s*([A-Z])\s*[).:]?")


def parse_choice(text: str, letters: str) -> Parsed:
    """Parse a multiple-choice letter; ``letters`` are the item's valid letters, e.g. ``"ABCD"``.

    See the module docstring for the rules.
    """
    if not text:
        return _FAILED
    valid = letters.upper()
    for _, content in reversed(_markers(text)):
        cand = content.strip().strip("*").strip()
        if len(cand) == 1 and cand in valid:
            return Parsed(cand, "marker")
    for m in reversed(list(_PHRASE_RE.finditer(text))):
        cand = m.group(1).upper()
        if cand in valid:
            return Parsed(cand, "phrase")
    bare = _BARE_RE.fullmatch(text.strip().strip("*").strip())
    if bare is not None and bare.group(1) in valid:
        return Parsed(bare.group(1), "bare")
    return _FAILED


_LABELS_RE = r"(positive|negative|neutral|mixed|conflict)"
# "a positive sentiment", "negative polarity": the label right before the noun.
_LABEL_BEFORE_RE = re.compile(rf"(?i)\b{_LABELS_RE}\s+(?:sentiment|polarity|tone|opinion)\b")
# "The sentiment expressed in the sentence is positive", "Polarity: negative": within one clause.
_LABEL_AFTER_RE = re.compile(
    rf"(?i)\b(?:sentiment|polarity|answer|label)\b[^.;\n]{{0,80}}?(?:\bis|\bwould be|:)\s*"
    rf"(not\s+)?[(\"'*]*\s*{_LABELS_RE}\b"
)
_NEGATION_RE = re.compile(r"(?i)\b(?:not|no|never|n't|without)\s+(?:\w+\s+)?$")


def _label_phrases(text: str) -> list[tuple[str, bool]]:
    """(label, negated) of every label statement in ``text``."""
    found = []
    for m in _LABEL_BEFORE_RE.finditer(text):
        negated = _NEGATION_RE.search(text[max(0, m.start() - 20) : m.start()]) is not None
        found.append((m.group(1).lower(), negated))
    for m in _LABEL_AFTER_RE.finditer(text):
        found.append((m.group(2).lower(), m.group(1) is not None))
    return found


def parse_label(text: str, labels: tuple[str, ...]) -> Parsed:
    """Parse a sentiment label; ``labels`` are the valid ones in lower case.

    See the module docstring for the rules.
    """
    if not text:
        return _FAILED
    valid = {label.lower() for label in labels}
    for _, content in reversed(_markers(text)):
        cand = content.strip().strip("*").strip().lower()
        if cand in valid:
            return Parsed(cand, "marker")
    phrases = _label_phrases(text)
    if phrases:
        named = {label for label, _ in phrases}
        # Conflicting or negated statements are no answer: the parser never picks one for the model.
        if len(named) == 1 and not any(neg for _, neg in phrases) and named <= valid:
            return Parsed(named.pop(), "phrase")
        return _FAILED
    bare = text.strip().strip("*().:!\"' ").lower()
    if bare in valid:
        return Parsed(bare, "bare")
    return _FAILED
