"""Contradictions between agent reports, found by rules without any LLM call (seed 004).

Detection rules (decisions where the seed is loose):
    * Same metric: names are compared after lower-casing and turning every run
      of non-alphanumerics into ``_`` ("Qatar unemployment rate" ==
      "qatar_unemployment_rate").
    * ``value``: ``|a - b| / min(|a|, |b|) > 0.05``, relative to the smaller
      value, as the seed's example computes 0.10 vs 0.12 as 20% (so 100 vs
      105.1 is a contradiction, 100 vs 105 is not; a zero against a non-zero
      value always is). Severity: ``high`` above 25%, ``medium`` above 10%,
      else ``low``.
    * ``interpretation``: one says improving/increasing/rising/growing/up/
      positive and the other declining/decreasing/falling/worsening/down/
      negative (whole words). Severity ``high`` if the values conflict too,
      else ``medium``.
    * ``source`` (the seed's "source data conflicts"): the values conflict and
      the two citations name different sources. A citation's source is the
      first name of the authority order found in it, else the citation with
      years, quarters, brackets and "per extraction" wording removed. The
      arbitrator's prompt carries the authority order to settle it.
    * ``confidence`` (the seed's "different confidence levels for the same
      claim"): the values agree (or neither has one) and the interpretations
      do not conflict, but the two confidences differ by more than 0.3.
      Severity ``low``: the claim is the same, its certainty is in question.
    * ``kind`` joins what conflicts with ``+`` (``value+source``). Equal
      values from different sources at similar confidence corroborate each
      other: not a contradiction.
    * Three or more agents disagreeing on one metric give one contradiction per
      conflicting pair; the metric is then settled by the consensus step.

Source authority: the arbitrator's prompt lists ``source_authority``, most
authoritative first, then "other" (seed 004: GCC-STAT > World Bank > other).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .schemas import Confidence

__all__ = [
    "CONFIDENCE_GAP",
    "REL_THRESHOLD",
    "SOURCE_AUTHORITY",
    "AgentReport",
    "Claim",
    "Contradiction",
    "Finding",
    "detect_contradictions",
    "norm_metric",
    "source_of",
]

REL_THRESHOLD = 0.05
"""Relative difference (to the smaller value) above which two values conflict."""
CONFIDENCE_GAP = 0.3
"""Confidence difference above which the same claim is a confidence conflict."""
SOURCE_AUTHORITY = ("GCC-STAT", "World Bank")
"""Seed 004's source-authority order, most authoritative first; every other source ranks after."""
_UP = {"improving", "improved", "increasing", "increase", "rising", "growing", "growth", "up", "positive"}
_DOWN = {"declining", "decline", "decreasing", "decrease", "falling", "worsening", "down", "negative"}


class Finding(BaseModel):
    """One reported value."""

    model_config = ConfigDict(extra="forbid")

    metric: str
    """Metric name, e.g. ``qatar_unemployment_rate``."""
    value: float | None = None
    """The number, if the finding has one."""
    citation: str = ""
    """Where it comes from."""
    confidence: Confidence = 0.5
    """The reporting agent's confidence."""
    interpretation: str | None = None
    """A reading such as "improving" or "declining"."""
    debate: dict[str, Any] | None = None
    """Filled in the adjusted reports: the debate outcome for this finding."""


class AgentReport(BaseModel):
    """One agent's report."""

    model_config = ConfigDict(extra="forbid")

    agent: str
    """The agent's name."""
    findings: list[Finding] = Field(default_factory=list)
    """What it found."""
    narrative: str | None = None
    """Free text, passed through."""


class Claim(BaseModel):
    """One side of a contradiction."""

    agent: str
    value: float | None
    citation: str
    confidence: float
    interpretation: str | None = None


class Contradiction(BaseModel):
    """A conflict between two agents' findings on one metric."""

    id: int
    """Position in detection order."""
    metric_name: str
    """The (normalised) metric."""
    agent1: Claim
    agent2: Claim
    kind: str
    """What conflicts: ``value``, ``interpretation``, ``source``, ``confidence``, joined with ``+``."""
    relative_difference: float | None = None
    """``|a - b| / min(|a|, |b|)`` when both values are non-zero numbers."""
    severity: Literal["high", "medium", "low"]
    """See the module docstring."""

    def describe(self, source_authority: Sequence[str] = SOURCE_AUTHORITY) -> str:
        """The contradiction as the arbitrator reads it (seed 004's prompt layout)."""

        def side(n: int, c: Claim) -> str:
            interp = f", interpretation: {c.interpretation}" if c.interpretation else ""
            return f"- Agent {n} ({c.agent}): {c.value} {c.citation} (confidence: {c.confidence}{interp})"

        order = " > ".join([*source_authority, "other"])
        return (
            f"CONTRADICTION:\n- Metric: {self.metric_name}\n{side(1, self.agent1)}\n{side(2, self.agent2)}\n"
            f"- Conflict: {self.kind}\n"
            f"SOURCE AUTHORITY (most authoritative first): {order}"
        )


def norm_metric(name: str) -> str:
    """A metric name as compared: lower case, runs of non-alphanumerics turned into ``_``."""
    return re.sub(r"[^0-9a-z]+", "_", name.lower()).strip("_")


def _direction(text: str | None) -> int:
    words = set(re.findall(r"[a-z]+", (text or "").lower()))
    up, down = bool(words & _UP), bool(words & _DOWN)
    return 1 if up and not down else -1 if down and not up else 0


def _severity(rel: float) -> Literal["high", "medium", "low"]:
    return "high" if rel > 0.25 else "medium" if rel > 0.10 else "low"


def _claim(agent: str, f: Finding) -> Claim:
    return Claim(
        agent=agent,
        value=f.value,
        citation=f.citation,
        confidence=f.confidence,
        interpretation=f.interpretation,
    )


def source_of(citation: str, source_authority: Sequence[str] = SOURCE_AUTHORITY) -> str:
    """The source a citation names: an authority from the order, else its normalised text."""
    lowered = citation.lower()
    for name in source_authority:
        if name.lower() in lowered:
            return name.lower()
    text = re.sub(r"per extraction:?|'[^']*'|\b(q[1-4]|h[12])\b|\b\d{4}\b|\bfrom\b", " ", lowered)
    return re.sub(r"[^0-9a-z]+", " ", text).strip()


def _relative_difference(a: float, b: float) -> float:
    """``|a - b|`` relative to the smaller magnitude (seed 004's arithmetic); inf against a zero."""
    low = min(abs(a), abs(b))
    if low == 0:
        return 0.0 if a == b else math.inf
    return abs(a - b) / low


def _conflicts(
    f1: Finding, f2: Finding, source_authority: Sequence[str]
) -> tuple[list[str], float | None, Literal["high", "medium", "low"]]:
    """What conflicts between two findings on one metric, the relative difference, the severity."""
    rel = None
    value_conflict = False
    if f1.value is not None and f2.value is not None:
        rel = _relative_difference(f1.value, f2.value)
        value_conflict = rel > REL_THRESHOLD
    interp_conflict = _direction(f1.interpretation) * _direction(f2.interpretation) == -1
    kinds = []
    if value_conflict:
        kinds.append("value")
        if f1.citation and f2.citation:
            if source_of(f1.citation, source_authority) != source_of(f2.citation, source_authority):
                kinds.append("source")
    if interp_conflict:
        kinds.append("interpretation")
    if not kinds and abs(f1.confidence - f2.confidence) > CONFIDENCE_GAP:
        kinds.append("confidence")
    severity: Literal["high", "medium", "low"] = "low"
    if value_conflict and interp_conflict:
        severity = "high"
    elif value_conflict and rel is not None:
        severity = _severity(rel)
    elif interp_conflict:
        severity = "medium"
    return kinds, rel, severity


def detect_contradictions(
    reports: Sequence[AgentReport], source_authority: Sequence[str] = SOURCE_AUTHORITY
) -> list[Contradiction]:
    """Find real conflicts between agents' findings (rules in the module docstring)."""
    by_metric: dict[str, list[tuple[str, Finding]]] = {}
    for report in reports:
        for finding in report.findings:
            by_metric.setdefault(norm_metric(finding.metric), []).append((report.agent, finding))
    out: list[Contradiction] = []
    for metric, items in by_metric.items():
        for (a1, f1), (a2, f2) in itertools.combinations(items, 2):
            if a1 == a2:
                continue
            kinds, rel, severity = _conflicts(f1, f2, source_authority)
            if not kinds:
                continue
            out.append(
                Contradiction(
                    id=len(out),
                    metric_name=metric,
                    agent1=_claim(a1, f1),
                    agent2=_claim(a2, f2),
                    kind="+".join(kinds),
                    relative_difference=round(rel, 4) if rel is not None and math.isfinite(rel) else None,
                    severity=severity,
                )
            )
    return out
