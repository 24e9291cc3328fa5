r"""Answer parsers for the benchmark tasks: documented rules, and no guessing.

Every parser returns a :class:`Parsed` with the answer in canonical form (or
None) and the name of the rule that found it, so a report can say how many
replies used the requested format (each task names its format's rule) and
how many needed a fallback. A parse failure (``value is None``) is scored as a
wrong answer by the harness: never correct, never replaced by a random choice.

Numeric answers (``arithmetic``, ``gsm8k``):

1. An explicit final statement, the *last* one in the reply, wins over every
   other number, before or after it: ``\boxed{X}`` (rule ``boxed``),
   ``#### X`` (``hashes``), "the (final) answer is X" / "answer: X"
   (``final``, or ``paren`` when written "the answer is (X)"). A statement
   whose number is followed by an operator ("the answer is 12 + 5 = 17") is a
   calculation, not a statement; ``\boxed{answer}`` copied from the prompt
   holds no number and is no answer.
2. A reply cut at the token cap (``truncated``, finish reason ``length``)
   without such a statement is a parse failure: its last number is from
   mid-sentence.
3. ``paren``: a number in round brackets, ``(246)``, when no number follows
   it. A bracketed number inside the reasoning ("3 boxes (12 eggs) so 36")
   is not the answer.
4. ``last_number``: the last number in the reply (Du et al.'s rule). A ``-``
   counts as a sign only when it is attached to the digits and does not
   follow a digit, a letter or a closing bracket, so ``12-5`` and ``20 - 5``
   end in ``5`` and ``= -5`` in ``-5``.

Numbers are canonicalised: thousands separators and ``$``/``%`` dropped,
``18.00`` -> ``18``, ``0.50`` -> ``0.5``; two answers are equal when their
canonical strings are.

Multiple choice (``mcq``), letters restricted to the item's own letters:

* A reply that marks two or more different letters as options (``(A) ...
  (B) ...``, ``A) ... B) ...``, one letter per line) repeats or walks
  through the option list: its letter marks are not answers.
* Otherwise the last of: "the answer is X" / "answer: X" / "option X" /
  "I choose X" (``phrase``; ``paren`` when written ``(X)``), ``(X)``
  (``paren``), ``\boxed{X}`` (``boxed``), a letter mark like ``A)`` (``mark``).
* ``bare``: the whole reply is one valid letter (``B``, ``B.``).
* ``text``: a reply with no letter that names exactly one option's text (whole words, not
  negated, the option at least 4 characters with a letter and absent from the question), as
  "resulting in the same mass" for the option "mass." Two options named: no answer.
* There is no "last capital letter" rule: "A" is an English word.

Sentiment labels (``absa``), case-insensitive, restricted to the task's labels:

1. ``paren``: the last ``(X)`` or ``\boxed{X}`` whose content is a label.
2. ``phrase``: statements "a X sentiment toward T", "sentiment toward T is
   X", "T: X", "a X sentiment", "sentiment ... is X", "answer is X". When the
   asked aspect is known, a statement whose target ``T`` is another aspect is
   set aside ("positive toward 'wine' and neutral about 'food'", asked about
   wine, is positive). Negated statements ("not a positive sentiment",
   "neither positive nor negative") support no label. The remaining
   statements must all name the same label, and no negated one may deny it;
   otherwise (or when none remains) the reply is a parse failure.
3. ``bare``: the whole reply is one label, optionally with punctuation.
4. There is no "any label word in the text" rule: "not positive at all" would
   be read as positive.

**Lenient mode** (:func:`lenient_number`, :func:`lenient_choice`,
:func:`lenient_label`) is never used for scoring. It takes the last number
(truncated replies too), the last standalone valid letter, or the last label
word, and the report shows what accuracy it would give, so a reader sees how
much of a difference between methods is answer format.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

__all__ = [
    "Parsed",
    "canonical_number",
    "lenient_choice",
    "lenient_label",
    "lenient_number",
    "matchable_options",
    "parse_choice",
    "parse_label",
    "parse_number",
]


@dataclass(frozen=True)
class Parsed:
    """The outcome of parsing one reply.

    Attributes:
        value: the answer in canonical form, or None when nothing could be parsed.
        rule: which rule found it (``boxed``, ``paren``, ``final``, ``last_number``...) or ``none``.
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
_NUM_RE = re.compile(_NUM)
_PAREN_RE = re.compile(r"\(\s*([^()]{1,40}?)\s*\)")
_BOXED_RE = re.compile(r"\\boxed\s*\{((?:[^{}]|\{[^{}]*\})*)\}")
_HASHES_RE = re.compile(rf"####\s*\\?\$?\s*({_SIGNED})")
# "The final answer is 18", "**Answer:** $18", "the answer is (246)"; not "the answer is 12 + 5".
_FINAL_RE = re.compile(
    r"(?i:\banswer\b)[*_\s]*(?i:is|would be|should be|will be|:|=)?[*_:=\s]*(\()?\s*\\?\$?\s*"
    rf"({_SIGNED})(?![\d,]*\d)(?!\s*[-+*/×x÷^=]\s*[\d(])"
)
_MINUS_CHARS = str.maketrans({"\u2212": "-", "\u2013": "-", "\u2014": "-", "\u00a0": " "})


def _ascii_minus(text: str) -> str:
    """``text`` with Unicode minus signs and dashes as ``-`` and no-break spaces as spaces."""
    return text if text.isascii() else text.translate(_MINUS_CHARS)  # all four are non-ASCII


@functools.lru_cache(maxsize=4096)  # a bench reads the same few answers in thousands of replies
def canonical_number(text: str) -> str | None:
    """The canonical string of a number written as text, or None if it is not one number.

    ``"1,234"`` -> ``"1234"``, ``"-18.00"`` -> ``"-18"``, ``"$0.50"`` -> ``"0.5"``,
    ``"12 apples"`` -> None (not a bare number).
    """
    s = _ascii_minus(text).strip()
    s = s.replace("\\$", "").replace("$", "").replace("\\%", "").replace("%", "").strip()
    s = s.rstrip(".").strip()
    negative = s.startswith("-")
    if negative:
        s = s[1:].strip()
    if not _NUM_RE.fullmatch(s):
        return None
    try:
        value = Decimal(s.replace(",", ""))
    except InvalidOperation:  # pragma: no cover - the regex admits only valid decimals
        return None
    if negative:
        value = -value
    if value == 0:
        return "0"
    return format(value.normalize(), "f")


def _marker_number(content: str) -> str | None:
    r"""A number inside ``(…)`` or ``\boxed{…}``: the whole content, or its single number."""
    direct = canonical_number(content)
    if direct is not None:
        return direct
    # \boxed{\$18} or \boxed{18 \text{ dollars}}: accept when exactly one number is inside.
    if "\\" in content or "text" in content:
        found = _NUMBER_RE.findall(_ascii_minus(content))
        if len(found) == 1:
            return canonical_number(found[0])
    return None


def _final_statements(text: str) -> list[tuple[int, str, str]]:
    """(position, value, rule) of every explicit final statement with a number."""
    found = []
    for m in _BOXED_RE.finditer(text):
        value = _marker_number(m.group(1))
        if value is not None:
            found.append((m.start(), value, "boxed"))
    for m in _HASHES_RE.finditer(text):
        value = canonical_number(m.group(1))
        if value is not None:
            found.append((m.start(), value, "hashes"))
    for m in _FINAL_RE.finditer(text):
        value = canonical_number(m.group(2))
        if value is not None:
            found.append((m.start(), value, "paren" if m.group(1) else "final"))
    return sorted(found)


def parse_number(text: str, *, truncated: bool = False) -> Parsed:
    """Parse a numeric answer (``arithmetic`` and ``gsm8k``); see the module docstring for the rules.

    Args:
        text: the reply.
        truncated: the reply was cut at the token cap (finish reason ``length``).
    """
    if not text:
        return _FAILED
    clean = _ascii_minus(text)
    finals = _final_statements(clean)
    if finals:
        return Parsed(finals[-1][1], finals[-1][2])
    if truncated:
        return _FAILED
    numbers = list(_NUMBER_RE.finditer(clean))
    for m in reversed(list(_PAREN_RE.finditer(clean))):
        closing = _marker_number(m.group(1))
        if closing is not None:
            if all(n.start() < m.end() for n in numbers):  # no number after it: a closing answer
                return Parsed(closing, "paren")
            break
    for n in reversed(numbers):
        last = canonical_number(n.group())
        if last is not None:
            return Parsed(last, "last_number")
    return _FAILED


def lenient_number(text: str) -> str | None:
    """Lenient mode: the last number of the reply, truncated or not (never used for scoring)."""
    for raw in reversed(_NUMBER_RE.findall(_ascii_minus(text))):
        value = canonical_number(raw)
        if value is not None:
            return value
    return None


# The keywords are case-insensitive, the letter is not: "the answer is a bit unclear" is no answer.
_PHRASE_RE = re.compile(
    r"(?i:\b(?:answer|option|choice)\s*(?:is|would be|should be|will be|:)|\b(?:option|choice)"
    r"|\bI\s+(?:choose|pick|select|go with))"
    r"[\s*_:\-]*(\()?[\s*_]*([A-Z])[*_]*\)?(?![A-Za-z])"
    r"(?!\s+(?i:is|was)\s+(?i:not|incorrect|wrong|false))"
)
# A letter marked as an option: "(A)", "A)" after a space, or "A." / "A:" at a line start
# (not "vitamin C. So...": a capital letter ending a sentence is no mark).
_LETTER_MARK_RE = re.compile(
    r"\(([A-Z])\)|(?:(?<=[\s*])|^)([A-Z])\)(?=\s|$|\*)|^[\s*>#-]*([A-Z])[.:](?=\s|$|\*)", re.MULTILINE
)
_BARE_RE = re.compile(r"\(?\s*([A-Z])\s*[).:]?")


def parse_choice(text: str, letters: str, options: tuple[str, ...] = ()) -> Parsed:
    """Parse a multiple-choice letter; ``letters`` are the item's valid letters, e.g. ``"ABCD"``.

    ``options`` are the option texts in letter order; when given, a reply with no letter that names
    exactly one of them is read as that option (rule ``text``).

    See the module docstring for the rules.
    """
    if not text:
        return _FAILED
    valid = letters.upper()
    bare = _BARE_RE.fullmatch(text.strip().strip("*").strip())
    if bare is not None and bare.group(1) in valid:
        return Parsed(bare.group(1), "bare")
    found: list[tuple[int, str, str]] = []
    for m in _PHRASE_RE.finditer(text):
        if m.group(2) in valid:
            found.append((m.start(), m.group(2), "paren" if m.group(1) else "phrase"))
    marks = [
        (m.start(), m.group(1) or m.group(2) or m.group(3), m.group(1) is not None)
        for m in _LETTER_MARK_RE.finditer(text)
    ]
    marks = [(pos, letter, paren) for pos, letter, paren in marks if letter in valid]
    # Two or more letters marked as options: the reply walks through the list; none of its marks is an answer.
    if len({letter for _, letter, _ in marks}) == 1:
        found += [(pos, letter, "paren" if paren else "mark") for pos, letter, paren in marks]
    for m in _BOXED_RE.finditer(text):
        cand = m.group(1).strip().strip("*").strip()
        if len(cand) == 1 and cand in valid:
            found.append((m.start(), cand, "boxed"))
    if not found:
        return _option_text(text, valid, options) if options else _FAILED
    _, letter, rule = max(found, key=lambda f: f[0])
    return Parsed(letter, rule)


def _words(text: str) -> str:
    """Lower-case words separated by single spaces, punctuation dropped, padded for whole-word search."""
    return " " + " ".join(re.findall(r"[a-z0-9']+", text.lower().replace("’", "'"))) + " "


def matchable_options(question: str, options: list[str]) -> tuple[str, ...]:
    """``options`` for the ``text`` rule: "" for each option the question itself contains."""
    asked = _words(question)
    return tuple("" if _words(option) in asked else option for option in options)


def _option_text(text: str, letters: str, options: tuple[str, ...]) -> Parsed:
    """``text`` rule: with no letter at all, a reply that names exactly one option's text, not negated.

    Options of fewer than 4 characters or without a letter ("4", "no") are never matched: they
    occur in reasoning by chance. ``options`` holds "" for an option the task left out (one that
    the question itself contains, so that echoing the question is not an answer).
    """
    reply = _words(text)
    hits = []
    for letter, option in zip(letters, options, strict=False):
        words = _words(option)
        if len(words.strip()) < 4 or not re.search(r"[a-z]", words) or words not in reply:
            continue
        before = reply[: reply.index(words) + 1]  # keep the space before the option
        if _NEGATION_RE.search(before):
            continue
        hits.append(letter)
    return Parsed(hits[0], "text") if len(hits) == 1 else _FAILED


def lenient_choice(text: str, letters: str) -> str | None:
    """Lenient mode: the last valid capital letter standing alone (not "A" before a lower-case word)."""
    valid = letters.upper()
    for m in reversed(list(re.finditer(r"(?<![A-Za-z])([A-Z])(?![A-Za-z])", text))):
        if m.group(1) in valid and not re.match(r"A [a-z]", text[m.start() : m.start() + 3]):
            return m.group(1)
    return None


_LABEL_WORDS = r"(positive|negative|neutral|mixed|conflict)"
_NOUNS = r"(?:sentiment|polarity|tone|opinion|feeling|attitude|stance)"
_PREPS = r"(?:toward|towards|about|for|regarding|concerning|on|over|of)"
_ASPECT_WORD = r"(?:the[ \t]+)?(?:(?:aspect|term|target)[ \t]+)?"
# A target in straight or curly quotes (group 1), as in the two patterns below that start with one.
_QUOTED_TARGET = r"[\"“'‘]([^\"”'’\n]{1,60})[\"”'’]"
# "a positive sentiment toward <target>", "positive about <target>".
_LABEL_FIRST_RE = re.compile(rf"(?i)\b{_LABEL_WORDS}[ \t]+(?:{_NOUNS}[ \t]+)?{_PREPS}[ \t]+{_ASPECT_WORD}")
# "the sentiment toward <target> is positive".
_TARGET_FIRST_RE = re.compile(rf"(?i)\b{_NOUNS}[ \t]+{_PREPS}[ \t]+{_ASPECT_WORD}")
_TARGET_LABEL_RE = re.compile(
    rf"(?i)[^.;\n]{{0,40}}?(?:\bis|\bwas|\bwould be|\bremains|:)\s*(not\s+)?[(\"'*]*\s*{_LABEL_WORDS}\b"
)
# "a positive sentiment", "negative polarity": the label right before the noun.
_LABEL_BEFORE_RE = re.compile(rf"(?i)\b{_LABEL_WORDS}\s+{_NOUNS}\b")
# "The sentiment expressed in the sentence is positive", "Polarity: negative": within one clause.
_LABEL_AFTER_RE = re.compile(
    rf"(?i)\b(?:{_NOUNS}|answer|label)\b[^.;\n]{{0,80}}?(?:\bis|\bwould be|:)\s*"
    rf"(not\s+)?[(\"'*]*\s*{_LABEL_WORDS}\b"
)
# "'wine': positive", "Food - negative" (a target then a label).
_TARGET_COLON_RE = re.compile(rf"(?i){_QUOTED_TARGET}\s*[:\-–=]\s*[(*]*\s*{_LABEL_WORDS}\b")
# "- wine: positive" (a list line: a target then a label).
_LIST_LINE_RE = re.compile(
    rf"(?im)^[\s*#>•\-\d.)]*([^:\n*]{{1,40}}?)[*\s]*[:\-–=]\s*[(*]*\s*{_LABEL_WORDS}\b"
)
# "not a positive", "does not express a positive or negative": up to four words of reach.
_NEGATION_RE = re.compile(r"(?i)(?:\b(?:not|no|never|without|neither|nor)|n't)\s+(?:\w+\s+){0,4}$")
# '"빠르지만" (negative sentiment)': a label in brackets right after a quoted target.
_QUOTE_PAREN_RE = re.compile(rf"(?i){_QUOTED_TARGET}\s*\(\s*{_LABEL_WORDS}(?:\s+{_NOUNS})?\s*\)")
_QUOTED_RE = re.compile(r"[\"“'‘«「]([^\"”'’»」\n]{1,60})[\"”'’»」]")
_STOP_WORDS = frozenset(
    "and but or is was which while because as since whereas however in with that it its this".split()
    + list(",.:;!?")
)
# Targets that name no aspect ("Sentiment: positive", "Final answer: neutral").
_GENERIC_TARGET_RE = re.compile(
    r"(?:the|overall|final|sentiment|polarity|answer|label|tone|opinion|result|aspect|review|sentence|\s)+"
)


def _norm(text: str) -> str:
    return re.sub(r"[\W_]+", " ", text.casefold()).strip()


def _target_at(text: str, pos: int, aspect: str) -> tuple[str, int]:
    """The target named at ``text[pos:]`` and where it ends.

    A quoted string, the asked aspect, or up to four words (stopping at a conjunction or verb).
    """
    quoted = _QUOTED_RE.match(text, pos)
    if quoted:
        return quoted.group(1), quoted.end()
    if aspect and text[pos : pos + len(aspect)].casefold() == aspect.casefold():
        return aspect, pos + len(aspect)
    words, end = [], pos
    for m in list(re.finditer(r"[\w'-]+|[,.;:!?]", text[pos : pos + 80]))[:4]:
        if m.group().casefold() in _STOP_WORDS:
            break
        words.append(m.group())
        end = pos + m.end()
    return " ".join(words), end


@dataclass(frozen=True)
class _Statement:
    label: str
    negated: bool
    start: int
    """Where the label word is (two patterns finding the same label word are one statement)."""
    target: str | None


def _label_statements(text: str, aspect: str) -> list[_Statement]:
    """Every label statement in ``text``, with its target when the statement names one."""
    found: dict[int, _Statement] = {}

    def add(label_match: re.Match[str], group: int, negated: bool, target: str | None) -> None:
        start = label_match.start(group)
        if target is not None and (not target.strip() or _GENERIC_TARGET_RE.fullmatch(target.casefold())):
            target = None
        old = found.get(start)
        if old is None or (old.target is None and target is not None):
            found[start] = _Statement(label_match.group(group).lower(), negated, start, target)

    for m in _LABEL_FIRST_RE.finditer(text):
        negated = _NEGATION_RE.search(text[max(0, m.start() - 40) : m.start()]) is not None
        add(m, 1, negated, _target_at(text, m.end(), aspect)[0])
    for m in _TARGET_FIRST_RE.finditer(text):
        target, end = _target_at(text, m.end(), aspect)
        after = _TARGET_LABEL_RE.match(text, end)
        if target and after is not None:
            add(after, 2, after.group(1) is not None, target)
    for m in _TARGET_COLON_RE.finditer(text):
        add(m, 2, False, m.group(1))
    for m in _QUOTE_PAREN_RE.finditer(text):
        add(m, 2, False, m.group(1))
    for m in _LIST_LINE_RE.finditer(text):
        add(m, 2, False, m.group(1))
    for m in _LABEL_BEFORE_RE.finditer(text):
        negated = _NEGATION_RE.search(text[max(0, m.start() - 40) : m.start()]) is not None
        add(m, 1, negated, None)
    for m in _LABEL_AFTER_RE.finditer(text):
        add(m, 2, m.group(1) is not None, None)
    return sorted(found.values(), key=lambda s: s.start)


def _about(target: str, aspect: str) -> bool:
    """True when a statement's target names the asked aspect."""
    t, a = _norm(target), _norm(aspect)
    # The aspect may start a word of the target: Korean particles attach ("위치는" is about "위치").
    return bool(t and a) and (re.search(rf"(?:^| ){re.escape(a)}", t) is not None or f" {t} " in f" {a} ")


def parse_label(text: str, labels: tuple[str, ...], aspect: str = "") -> Parsed:
    """Parse a sentiment label; ``labels`` are the valid ones in lower case.

    Args:
        text: the reply.
        labels: the valid labels.
        aspect: the aspect term the question asked about; statements about other targets
            are set aside (see the module docstring).
    """
    if not text:
        return _FAILED
    valid = {label.lower() for label in labels}
    markers = [m.group(1) for m in _PAREN_RE.finditer(text)] + [m.group(1) for m in _BOXED_RE.finditer(text)]
    for content in reversed(markers):
        cand = content.strip().strip("*").strip().lower()
        if cand in valid:
            return Parsed(cand, "paren")
    statements = _label_statements(text, aspect)
    if aspect:
        statements = [s for s in statements if s.target is None or _about(s.target, aspect)]
    if statements:
        named = {s.label for s in statements if not s.negated}
        denied = {s.label for s in statements if s.negated}
        # Conflicting statements ("positive ... neutral", "positive ... not positive") are no answer:
        # the parser never picks one for the model. "Not X" alone states nothing.
        if len(named) == 1 and not named & denied and named <= valid:
            return Parsed(named.pop(), "phrase")
        return _FAILED
    bare = text.strip().strip("*().:!\"' ").lower()
    if bare in valid:
        return Parsed(bare, "bare")
    return _FAILED


def lenient_label(text: str, labels: tuple[str, ...]) -> str | None:
    """Lenient mode: the last valid label word in the reply, negated or not."""
    valid = {label.lower() for label in labels}
    words = [w.lower() for w in re.findall(r"(?i)\b[a-z]+\b", text) if w.lower() in valid]
    return words[-1] if words else None
