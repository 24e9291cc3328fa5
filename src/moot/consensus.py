"""Turning a transcript into a decision, and measuring the debate (seed 002).

Arguments:
    The *counted speakers* are the protocol's ``decision_speakers`` (seed 002:
    the proponent and the opponent; in the extended mode the advocate and the
    critic feed the moderator, not the margin), else every speaker whose
    persona has stance ``pro`` or ``con``. Their valid turns are the arguments.

Evidence score:
    ``min(1, 0.5 + 0.25 * n)`` where ``n`` counts the *usable* evidence items
    of the turn (``supporting_evidence``, ``citations`` or ``evidence``): items
    are compared lower-cased with whitespace collapsed, a repeated item counts
    once, and an item with fewer than two words of letters ("x", "fact",
    "confidence: 1.0"), a placeholder such as "none" or "n/a", or a copy of the
    argument itself is not evidence. A bare claim scores 0.5, two or more
    usable items score 1.0.

Logic score:
    From the moderator's evaluation of the same round: its ``pro_logic`` for
    arguments of stance pro, ``con_logic`` for stance con (0 to 1, how sound
    that side's reasoning was). It is 1.0 when the round has no moderator
    evaluation, the evaluation failed, or it gave no score, so protocols
    without a moderator keep ``confidence * evidence``.

Strength:
    ``confidence * evidence score * logic score`` (seed 002; confidence is
    0.5 when the turn gives none).

Missing information:
    A failed turn is missing information, not zero strength. The margin rules
    count only the rounds in which every counted speaker has a valid turn, so
    one side cannot win because the other side's call failed; each round left
    out, and each argument without usable evidence, adds a line to
    ``Decision.warnings``. With no complete round the decision is UNCERTAIN.
    When every turn succeeded the seed's numbers hold unchanged.

Strategies:
    ``confidence_weighted``: sum strengths per side; SUPPORT if pro > 1.2 x con,
    OPPOSE if con > 1.2 x pro, else UNCERTAIN; confidence is the winning share,
    capped at 0.95 (0.5 for UNCERTAIN). This is seed 002's rule.
    ``evidence_based``: the same rule over evidence scores only, ignoring the
    speakers' self-reported confidence (which small models inflate).
    ``majority_vote``: every moderator evaluation (one per round) votes with its
    ``leaning``; the judge's ``leaning`` votes too if it has one. More support
    than oppose votes gives SUPPORT and vice versa; a tie or no votes gives
    UNCERTAIN. Confidence is the winning share of the votes. A failed
    evaluation is a missing vote and a warning.
    ``majority``: the most frequent normalised answer (``answer_field``) among
    the last round's valid turns; ties go to the answer given first.

Quality metrics (``DebateResult.metrics``; None where there is nothing to measure):
    ``logical_consistency``: mean logic score the moderator gave the arguments.
    ``evidence_quality``: mean evidence score of the arguments.
    ``argument_diversity``: 1 - mean pairwise Jaccard similarity of the word
    sets of the valid speaker turns (0 = everyone said the same words, 1 = no
    word shared).
    ``consensus_quality``: share of the moderator evaluations (and the judge's
    leaning) that agree with the decided label.
    ``decision_confidence``: the decision's confidence, else the judge's
    ``confidence`` field.
    ``overall_quality``: mean of the five above that are not None (the seed
    averages its scores).
    ``evidence_coverage``: share of valid speaker turns giving usable evidence.
    ``participation``: share of speaker turns that were valid.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Collection
from typing import Any

from .transcript import DebateResult, Decision, Round, Turn

__all__ = [
    "argument_strength",
    "best_answer",
    "decide",
    "evidence_score",
    "normalise",
    "quality_metrics",
    "usable_evidence",
]

MARGIN = 1.2
CAP = 0.95
_EVIDENCE_KEYS = ("supporting_evidence", "citations", "evidence")
_PLACEHOLDERS = frozenset({"none", "n/a", "na", "no evidence", "evidence", "todo", "tbd", "unknown"})
_LEANING_OF = {"SUPPORT": "support", "OPPOSE": "oppose", "UNCERTAIN": "uncertain"}


def normalise(value: Any) -> str:
    """Lower-cased, whitespace-collapsed text of an answer, without trailing punctuation."""
    if value is None:
        return ""
    text = re.sub(r"\s+", " ", str(value)).strip().lower()
    return text.rstrip(".!?;:")


def _evidence_items(turn: Turn) -> list[str]:
    for key in _EVIDENCE_KEYS:
        value = turn.get(key)
        if isinstance(value, list):
            return [str(v) for v in value if v]
        if isinstance(value, str) and value:
            return [value]
    return []


def usable_evidence(turn: Turn) -> list[str]:
    """The turn's evidence items that count (module docstring): distinct, substantive, not the claim."""
    claim = normalise(turn.text)
    seen: list[str] = []
    for item in _evidence_items(turn):
        norm = normalise(item)
        words = re.findall(r"[^\W\d_]+", norm)  # words of letters: "confidence: 1.0" has one
        if norm in seen or norm in _PLACEHOLDERS or len(words) < 2 or norm == claim:
            continue
        seen.append(norm)
    return seen


def evidence_score(turn: Turn) -> float:
    """``min(1, 0.5 + 0.25 * n_usable_evidence)``."""
    return min(1.0, 0.5 + 0.25 * len(usable_evidence(turn)))


def _logic_score(turn: Turn, rnd: Round | None) -> float:
    mod = rnd.moderator if rnd is not None else None
    if mod is None or not mod.ok or turn.stance not in ("pro", "con"):
        return 1.0
    value = mod.get(f"{turn.stance}_logic")
    return min(1.0, max(0.0, float(value))) if isinstance(value, int | float) else 1.0


def argument_strength(turn: Turn, rnd: Round | None = None) -> float:
    """``confidence * evidence score * logic score`` (confidence 0.5 if absent; logic from ``rnd``)."""
    conf = turn.get("confidence")
    conf = float(conf) if isinstance(conf, int | float) else 0.5
    return conf * evidence_score(turn) * _logic_score(turn, rnd)


def _counted(turn: Turn, speakers: Collection[str] | None) -> bool:
    if speakers is not None:
        return turn.speaker in speakers
    return turn.stance in ("pro", "con")


def _arguments(result: DebateResult, speakers: Collection[str] | None) -> list[tuple[Round, Turn]]:
    return [(r, t) for r in result.rounds for t in r.turns if t.ok and _counted(t, speakers)]


def _complete_rounds(
    result: DebateResult, speakers: Collection[str] | None, warnings: list[str]
) -> list[Round]:
    """Rounds in which every counted speaker has a valid turn; each other round is a warning."""
    kept = []
    for rnd in result.rounds:
        counted = [t for t in rnd.turns if _counted(t, speakers)]
        failed = [t.speaker for t in counted if not t.ok]
        missing = sorted(set(speakers or ()) - {t.speaker for t in counted})
        if failed or missing:
            who = ", ".join(failed + missing)
            verb = "failed" if failed and not missing else "is missing"
            warnings.append(
                f"round {rnd.number} is left out of the decision: the turn of {who} {verb} (missing "
                "information, not zero strength)"
            )
        elif counted:
            kept.append(rnd)
    return kept


def _evidence_warnings(rounds: list[Round], speakers: Collection[str] | None, warnings: list[str]) -> None:
    for rnd in rounds:
        for turn in rnd.turns:
            if not _counted(turn, speakers):
                continue
            items = _evidence_items(turn)
            if not items:
                warnings.append(f"{turn.speaker} gave no evidence in round {rnd.number}")
            elif not usable_evidence(turn):
                warnings.append(
                    f"{turn.speaker}'s evidence in round {rnd.number} is degenerate ({len(items)} items, "
                    "none distinct and substantive)"
                )


def _margin_rule(strategy: str, result: DebateResult, speakers: Collection[str] | None) -> Decision:
    warnings: list[str] = []
    rounds = _complete_rounds(result, speakers, warnings)
    _evidence_warnings(rounds, speakers, warnings)
    pro = con = 0.0
    for rnd in rounds:
        for turn in rnd.turns:
            if turn.ok and _counted(turn, speakers):
                score = (
                    argument_strength(turn, rnd)
                    if strategy == "confidence_weighted"
                    else evidence_score(turn)
                )
                if turn.stance == "pro":
                    pro += score
                elif turn.stance == "con":
                    con += score
    details = {
        "pro_strength": round(pro, 4),
        "con_strength": round(con, 4),
        "margin": MARGIN,
        "rounds_counted": [r.number for r in rounds],
    }
    if not rounds:
        warnings.append("no round in which every counted speaker argued: the decision is UNCERTAIN")
    label, conf = "UNCERTAIN", 0.5
    if pro > con * MARGIN and pro > 0:
        label, conf = "SUPPORT", min(pro / (pro + con), CAP)
    elif con > pro * MARGIN and con > 0:
        label, conf = "OPPOSE", min(con / (pro + con), CAP)
    return Decision(strategy=strategy, label=label, confidence=conf, details=details, warnings=warnings)


def _leanings(result: DebateResult, warnings: list[str] | None = None) -> list[str]:
    out = []
    for rnd in result.rounds:
        if rnd.moderator is None:
            continue
        if not rnd.moderator.ok:
            if warnings is not None:
                warnings.append(
                    f"the moderator's evaluation of round {rnd.number} failed: its vote is missing"
                )
            continue
        out.append(str(rnd.moderator.get("leaning")))
    if result.verdict is not None and result.verdict.ok and result.verdict.get("leaning") is not None:
        out.append(str(result.verdict.get("leaning")))
    return out


def _vote(result: DebateResult) -> Decision:
    warnings: list[str] = []
    votes = Counter(v for v in _leanings(result, warnings) if v in ("support", "oppose", "uncertain"))
    total = sum(votes.values())
    details = {"votes": dict(votes)}
    label, conf = "UNCERTAIN", 0.5
    if total and votes["support"] > votes["oppose"]:
        label, conf = "SUPPORT", votes["support"] / total
    elif total and votes["oppose"] > votes["support"]:
        label, conf = "OPPOSE", votes["oppose"] / total
    return Decision(
        strategy="majority_vote", label=label, confidence=conf, details=details, warnings=warnings
    )


def _majority(result: DebateResult, answer_field: str) -> Decision:
    last = next((r for r in reversed(result.rounds) if any(t.ok for t in r.turns)), None)
    answers = [
        (normalise(t.get(answer_field)), t.get(answer_field)) for t in (last.turns if last else []) if t.ok
    ]
    answers = [(n, raw) for n, raw in answers if n]
    warnings = []
    if last is not None and any(not t.ok for t in last.turns):
        failed = ", ".join(t.speaker for t in last.turns if not t.ok)
        warnings.append(
            f"round {last.number}: the turn of {failed} failed; its answer is missing from the vote"
        )
    if not answers:
        return Decision(
            strategy="majority", label=None, confidence=None, details={"votes": {}}, warnings=warnings
        )
    counts = Counter(n for n, _ in answers)
    best = max(counts.values())
    winner = next(n for n, _ in answers if counts[n] == best)  # first-given among the tied
    raw = next(str(r) for n, r in answers if n == winner)
    return Decision(
        strategy="majority",
        label=raw,
        confidence=best / len(answers),
        details={"votes": dict(counts)},
        warnings=warnings,
    )


def decide(
    strategy: str,
    result: DebateResult,
    *,
    answer_field: str = "answer",
    speakers: Collection[str] | None = None,
) -> Decision:
    """Apply an aggregation strategy (see the module docstring) to a transcript.

    Args:
        strategy: ``confidence_weighted``, ``evidence_based``, ``majority_vote`` or ``majority``.
        result: the transcript so far.
        answer_field: the content field holding an answer (``majority``).
        speakers: the counted speakers of the margin rules (None: every pro/con speaker).
    """
    if strategy in ("confidence_weighted", "evidence_based"):
        return _margin_rule(strategy, result, speakers)
    if strategy == "majority_vote":
        return _vote(result)
    if strategy == "majority":
        return _majority(result, answer_field)
    raise ValueError(f"unknown aggregation strategy {strategy!r}")


def best_answer(result: DebateResult, answer_field: str = "answer") -> str | None:
    """The most confident valid answer of the latest round that has one (the fallback of seed 000)."""
    for rnd in reversed(result.rounds):
        candidates = [t for t in rnd.turns if t.ok and _answer_text(t, answer_field)]
        if candidates:
            top = max(candidates, key=lambda t: float(t.get("confidence") or 0.0))
            return _answer_text(top, answer_field)
    return None


def _answer_text(turn: Turn, answer_field: str) -> str:
    """The turn's answer (its ``answer_field``, else its main text); "" when that is blank."""
    value = turn.get(answer_field)
    text = str(value) if value is not None and str(value).strip() else turn.text
    return text if text.strip() else ""


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def quality_metrics(result: DebateResult, speakers: Collection[str] | None = None) -> dict[str, Any]:
    """Debate quality metrics, as defined in the module docstring."""
    all_turns = [t for r in result.rounds for t in r.turns]
    valid = [t for t in all_turns if t.ok]
    sets = [_words(t.text) for t in valid if t.text]
    diversity = None
    if len(sets) >= 2:
        sims = [len(a & b) / len(a | b) if a | b else 1.0 for a, b in itertools.combinations(sets, 2)]
        diversity = round(1 - sum(sims) / len(sims), 4)
    args = _arguments(result, speakers)
    logic = []  # only arguments the moderator actually scored
    for rnd, turn in args:
        mod = rnd.moderator
        if mod is not None and mod.ok and isinstance(mod.get(f"{turn.stance}_logic"), int | float):
            logic.append(_logic_score(turn, rnd))
    confidence = None
    if result.decision is not None and result.decision.confidence is not None:
        confidence = round(result.decision.confidence, 4)
    elif result.verdict is not None and isinstance(result.verdict.get("confidence"), int | float):
        confidence = float(result.verdict.get("confidence"))
    consensus = None
    label = result.decision.label if result.decision is not None else None
    leanings = _leanings(result)
    if label in _LEANING_OF and leanings:
        consensus = round(sum(1 for v in leanings if v == _LEANING_OF[label]) / len(leanings), 4)
    metrics: dict[str, Any] = {
        "logical_consistency": _mean(logic),
        "evidence_quality": _mean([evidence_score(t) for _, t in args]),
        "argument_diversity": diversity,
        "consensus_quality": consensus,
        "decision_confidence": confidence,
    }
    metrics["overall_quality"] = _mean([v for v in metrics.values() if v is not None])
    metrics["evidence_coverage"] = (
        round(sum(1 for t in valid if usable_evidence(t)) / len(valid), 4) if valid else None
    )
    metrics["participation"] = round(len(valid) / len(all_turns), 4) if all_turns else None
    return metrics
