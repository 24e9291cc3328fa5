"""Seed 001 section 4: turn a debate into the Debate Review Context that Stage 2 reads.

The context holds the judge's ``summary``, one ``rebuttal_point`` per debate
turn, the Stage-1 ``aspect_terms`` with ``synonym_hints``, per-aspect
``aspect_hints`` (speaker, stance, weight, polarity hint), and the mapping
bookkeeping ``mapping_stats`` / ``mapping_fail_reasons``.

Mapping a turn to aspects, in this order (the first that applies decides):

1. no Stage-1 aspect terms at all -> ``no_aspects`` (unmapped);
2. a term, or a synonym of it, occurs in the turn's message or key points after
   normalisation (NFKC, case-folded, whitespace, punctuation and symbols
   removed) -> mapped *direct*;
3. the turn's stance is neutral (or unknown), so it carries no polarity to
   match -> ``neutral_stance`` (unmapped);
4. fallback via ATSA polarity: the aspects whose Stage-1 ATSA polarity equals
   the turn's polarity hint -> mapped *fallback*, reason ``fallback_used``;
5. otherwise -> ``no_match`` (unmapped).

In patch mode the context is built from the judge's ``final_patch``: each edit
names its target aspect, so it is mapped by the same normalised/synonym match
against the Stage-1 terms (no polarity fallback: an edit that names an unknown
aspect is ``no_match``).
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping
from functools import lru_cache
from importlib import resources
from typing import Any, get_args

from ..transcript import DebateResult, Turn
from .schemas import FailReason, HintPolarity, RebuttalPoint, ReviewContext, Stage1Result

__all__ = [
    "FAIL_REASONS",
    "build_review_context",
    "expand_synonyms",
    "load_synonym_groups",
    "match_aspects",
    "normalize",
    "stance_to_polarity",
    "stance_weight",
]

FAIL_REASONS: tuple[FailReason, ...] = get_args(FailReason)
"""The mapping fail reasons counted in ``mapping_fail_reasons``."""

REVIEW_GUIDANCE = (
    "Use the debate as extra evidence, not as ground truth. aspect_hints list, per aspect, which speakers "
    "argued for which polarity and with what weight (pro/con 1.0, other 0.8, neutral 0.6). Change an aspect "
    "only when the sentence itself supports the change."
)
FALLBACK_POLICY = (
    "A turn that names no Stage-1 aspect (after normalisation and synonym expansion) is mapped to the "
    "aspects whose Stage-1 ATSA polarity equals the turn's stance polarity;"
    " neutral-stance turns are not mapped."
)


def normalize(text: str) -> str:
    """NFKC, case-fold, and drop whitespace, punctuation and symbols (Unicode categories Z*, P*, S*, C*)."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return "".join(ch for ch in text if unicodedata.category(ch)[0] not in "ZPSC")


@lru_cache(maxsize=1)
def load_synonym_groups() -> tuple[tuple[str, ...], ...]:
    """Synonym groups from ``moot/resources/synonyms/ko.json`` and ``en.json`` (cached)."""
    groups: list[tuple[str, ...]] = []
    base = resources.files("moot").joinpath("resources/synonyms")
    for name in ("ko.json", "en.json"):
        data = json.loads(base.joinpath(name).read_text("utf-8"))
        groups.extend(tuple(str(w) for w in g) for g in data["groups"])
    return tuple(groups)


def expand_synonyms(term: str) -> list[str]:
    """The synonyms of ``term``: every member of each group that contains it (normalised), term excluded."""
    key = normalize(term)
    out: list[str] = []
    seen = {key}
    for group in load_synonym_groups():
        if any(normalize(w) == key for w in group):
            for w in group:
                nw = normalize(w)
                if nw and nw not in seen:
                    seen.add(nw)
                    out.append(w)
    return out


def stance_weight(stance: str | None) -> float:
    """Seed 001 ``_stance_weight``: neutral 0.6, pro/con 1.0, anything else 0.8."""
    s = (stance or "").strip().lower()
    if s == "neutral":
        return 0.6
    if s in ("pro", "con"):
        return 1.0
    return 0.8


def stance_to_polarity(stance: str | None) -> HintPolarity:
    """Seed 001 ``_stance_to_polarity``: pro -> positive, con -> negative, anything else -> neutral."""
    s = (stance or "").strip().lower()
    return "positive" if s == "pro" else "negative" if s == "con" else "neutral"


def match_aspects(text: str, aspect_terms: list[str]) -> list[str]:
    """The aspect terms that ``text`` mentions, directly or through a synonym (normalised substring match)."""
    norm_text = normalize(text)
    found: list[str] = []
    if not norm_text:
        return found
    for term in aspect_terms:
        for cand in (term, *expand_synonyms(term)):
            nc = normalize(cand)
            if nc and nc in norm_text:
                found.append(term)
                break
    return found


def _aspect_terms(stage1: Stage1Result) -> list[str]:
    terms: list[str] = []
    seen: set[str] = set()
    for term in [a.term for a in stage1.aspects] + [s.aspect for s in stage1.sentiments]:
        key = normalize(term)
        if key and key not in seen:
            seen.add(key)
            terms.append(term)
    return terms


def _turn_stance(turn: Turn) -> str:
    # The persona's configured stance is authoritative; a model's self-declared one is a fallback.
    if turn.stance:
        return turn.stance
    declared = turn.get("stance")
    return str(declared).strip().lower() if isinstance(declared, str) and declared.strip() else "other"


def _map_turn(
    texts: list[str], stance: str, terms: list[str], atsa_polarity: Mapping[str, str]
) -> tuple[list[str], str, str | None]:
    if not terms:
        return [], "none", "no_aspects"
    direct = match_aspects("\n".join(texts), terms)
    if direct:
        return direct, "direct", None
    hint = stance_to_polarity(stance)
    if hint == "neutral":
        return [], "none", "neutral_stance"
    fallback = [t for t in terms if atsa_polarity.get(normalize(t)) == hint]
    if fallback:
        return fallback, "fallback", "fallback_used"
    return [], "none", "no_match"


def _persona_points(
    debate: DebateResult, terms: list[str], atsa_polarity: Mapping[str, str]
) -> list[RebuttalPoint]:
    points: list[RebuttalPoint] = []
    for turn in debate.turns():
        if not turn.ok or turn.phase != "turn":
            continue  # failed turns say nothing; they are counted by the engine, not mapped
        stance = _turn_stance(turn)
        key_points = [str(k) for k in turn.get("key_points", []) or []]
        message = str(turn.get("message", "") or "")
        refs, provenance, reason = _map_turn([message, *key_points], stance, terms, atsa_polarity)
        points.append(
            RebuttalPoint(
                speaker=turn.speaker,
                stance=stance,
                key_points=key_points,
                message=message,
                aspect_refs=refs,
                weight=stance_weight(stance),
                polarity_hint=stance_to_polarity(stance),
                provenance_hint=provenance,
                fail_reason=reason,
            )
        )
    return points


_POLARITY_STANCE = {"positive": "pro", "negative": "con", "neutral": "neutral"}


def _edit_polarity(edit: dict[str, Any]) -> str:
    op = edit.get("op")
    target = edit.get("target") or {}
    if op == "set_polarity":
        return str(edit.get("value") or "").strip().lower()
    if op == "confirm_tuple":
        return str(target.get("polarity") or "").strip().lower()
    return ""


def _patch_points(verdict: Turn, terms: list[str]) -> list[RebuttalPoint]:
    points: list[RebuttalPoint] = []
    for edit in verdict.get("final_patch", []) or []:
        target = edit.get("target") or {}
        ref = str(target.get("aspect_ref") or "")
        polarity = _edit_polarity(edit)
        stance = _POLARITY_STANCE.get(polarity, "other")
        refs: list[str] = []
        reason: str | None = "no_aspects"
        if terms:
            nref = normalize(ref)
            refs = [t for t in terms if nref and normalize(t) == nref] or match_aspects(ref, terms)
            if not refs and nref:
                refs = [t for t in terms if nref in normalize(t)]
            reason = None if refs else "no_match"
        message = f"{edit.get('op')} {ref}" + (f" -> {edit.get('value')}" if edit.get("value") else "")
        points.append(
            RebuttalPoint(
                speaker=verdict.speaker,
                stance=stance,
                key_points=[str(edit["evidence"])] if edit.get("evidence") else [],
                message=message,
                aspect_refs=refs,
                weight=stance_weight(stance),
                polarity_hint=stance_to_polarity(stance),
                provenance_hint="direct" if refs else "none",
                fail_reason=reason,
            )
        )
    return points


def build_review_context(
    debate: DebateResult | None, stage1: Stage1Result, *, mode: str = "persona"
) -> ReviewContext:
    """Build the Debate Review Context of seed 001 section 4.

    Args:
        debate: the debate result, or None when the debate did not run (the
            context then has the aspect terms and synonym hints only).
        stage1: the verified Stage-1 result.
        mode: ``persona`` (map every speaker turn) or ``patch`` (map the judge's final_patch).

    Returns:
        The context, JSON-serialisable for the Stage-2 prompts.
    """
    terms = _aspect_terms(stage1)
    atsa_polarity = {normalize(s.aspect): s.polarity for s in stage1.sentiments}
    synonym_hints = {t: syn for t in terms if (syn := expand_synonyms(t))}
    points: list[RebuttalPoint] = []
    summary: dict[str, Any] | None = None
    if debate is not None:
        if debate.verdict is not None and debate.verdict.ok:
            summary = dict(debate.verdict.content or {})
        if mode == "patch":
            points = (
                _patch_points(debate.verdict, terms)
                if debate.verdict is not None and debate.verdict.ok
                else []
            )
        else:
            points = _persona_points(debate, terms, atsa_polarity)

    hints: dict[str, list[dict[str, Any]]] = {}
    for p in points:
        for ref in p.aspect_refs:
            hints.setdefault(ref, []).append(
                {
                    "speaker": p.speaker,
                    "stance": p.stance,
                    "weight": p.weight,
                    "polarity_hint": p.polarity_hint,
                    "provenance": p.provenance_hint,
                }
            )
    stats = {
        "total": len(points),
        "direct": sum(p.provenance_hint == "direct" for p in points),
        "fallback": sum(p.provenance_hint == "fallback" for p in points),
        "none": sum(p.provenance_hint == "none" for p in points),
    }
    reasons = {r: sum(p.fail_reason == r for p in points) for r in FAIL_REASONS}
    return ReviewContext(
        summary=summary,
        rebuttal_points=points,
        aspect_terms=terms,
        synonym_hints=synonym_hints,
        aspect_hints=hints,
        mapping_stats=stats,
        mapping_fail_reasons=reasons,
        review_guidance=REVIEW_GUIDANCE if debate is not None else "",
        fallback_mapping_policy=FALLBACK_POLICY,
    )
