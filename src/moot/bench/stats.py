"""Statistics for the benchmark: Wilson intervals, McNemar tests, majority votes.

Everything is computed in pure Python from counts, so the numbers in a report
can be checked by hand:

* **Wilson score interval** (95%, z = 1.959964) for an accuracy k/n:
  ``(p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)``. For n = 0 it is
  the uninformative (0, 1).
* **McNemar test** for two methods run on the same items: only discordant
  pairs count, ``b`` (A right, B wrong) and ``c`` (A wrong, B right). With
  ``b + c < 25`` the exact two-sided binomial test is used,
  ``p = min(1, 2·P[X <= min(b, c)])`` with ``X ~ Binomial(b + c, 1/2)``;
  otherwise the chi-square statistic with continuity correction,
  ``(|b - c| - 1)² / (b + c)``, on one degree of freedom. ``b + c = 0``
  gives p = 1.
* **Majority (plurality) vote** over parsed answers; parse failures do not
  vote. Ties go to the tied answer given first in agent order, a fixed rule
  that never looks at the gold answer. No parsed answer at all means the vote
  itself is a parse failure.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from ..judging import Z95, wilson_interval  # one implementation: the swap audit's intervals too

__all__ = [
    "EXACT_THRESHOLD",
    "Z95",
    "McNemar",
    "binomial_two_sided",
    "majority",
    "mcnemar",
    "unanimous",
    "wilson_interval",
]

EXACT_THRESHOLD = 25
"""Below this many discordant pairs McNemar uses the exact binomial test."""


def binomial_two_sided(b: int, c: int) -> float:
    """Exact two-sided p-value of ``b`` vs ``c`` under Binomial(b + c, 1/2)."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1))
    return min(1.0, float(Fraction(2 * tail, 2**n)))


@dataclass(frozen=True)
class McNemar:
    """A paired comparison of method ``a`` against method ``b`` on the same items.

    Attributes:
        a: the first method.
        b: the second method.
        n: items both methods finished.
        both: items both got right.
        only_a: items ``a`` got right and ``b`` wrong (discordant ``b`` in the usual notation).
        only_b: items ``b`` got right and ``a`` wrong.
        p_value: two-sided p-value.
        test: ``exact`` (binomial) or ``chi2_cc`` (chi-square with continuity correction).
    """

    a: str
    b: str
    n: int
    both: int
    only_a: int
    only_b: int
    p_value: float
    test: str

    @property
    def diff(self) -> float:
        """Accuracy of ``a`` minus accuracy of ``b`` on the shared items."""
        return (self.only_a - self.only_b) / self.n if self.n else 0.0


def mcnemar(a: str, b: str, a_correct: Sequence[bool], b_correct: Sequence[bool]) -> McNemar:
    """McNemar's test on paired outcomes (``a_correct[i]`` and ``b_correct[i]`` are the same item).

    Raises:
        ValueError: the sequences differ in length.
    """
    if len(a_correct) != len(b_correct):
        raise ValueError("paired outcomes must have the same length")
    both = sum(1 for x, y in zip(a_correct, b_correct, strict=True) if x and y)
    only_a = sum(1 for x, y in zip(a_correct, b_correct, strict=True) if x and not y)
    only_b = sum(1 for x, y in zip(a_correct, b_correct, strict=True) if y and not x)
    discordant = only_a + only_b
    if discordant < EXACT_THRESHOLD:
        p, test = binomial_two_sided(only_a, only_b), "exact"
    else:
        stat = (abs(only_a - only_b) - 1) ** 2 / discordant
        p, test = math.erfc(math.sqrt(stat / 2)), "chi2_cc"
    return McNemar(a, b, len(a_correct), both, only_a, only_b, p, test)


def majority(answers: Sequence[str | None]) -> str | None:
    """The plurality answer (ties: first in order); None when no answer was parsed."""
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return None
    top = max(counts.values())
    for answer in answers:
        if answer is not None and counts[answer] == top:
            return answer
    raise AssertionError("unreachable")  # pragma: no cover


def unanimous(answers: Sequence[str | None]) -> bool:
    """True when every agent parsed an answer and all answers are the same."""
    return bool(answers) and all(a is not None for a in answers) and len(set(answers)) == 1
