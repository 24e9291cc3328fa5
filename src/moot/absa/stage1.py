"""Stage 1: ATE, ATSA and the validator, each one validated structured call.

Every span the model gives is checked against the sentence (see
:func:`moot.absa._common.find_span`): a wrong offset with the right words is
repaired, a term that is not in the sentence is dropped, and both are noted in
``Stage1Result.span_notes``. Nothing is invented: a failed call leaves its part
empty and is recorded in ``errors``.
"""

from __future__ import annotations

from ..models.base import Model
from ._common import Recorder, find_span, render_prompt
from .config import AbsaConfig
from .review_context import normalize
from .schemas import (
    Aspect,
    AspectSentiment,
    AteOutput,
    AtsaOutput,
    Stage1Result,
    StageSignal,
    ValidatorOutput,
)

__all__ = ["aggregate_label", "atsa_signal", "run_stage1", "verify_aspects", "verify_sentiments"]

_USER = "Analyse the sentence in the instructions. Reply with JSON only."


def aggregate_label(polarities: list[str]) -> str | None:
    """A sentence label from aspect polarities.

    Both positive and negative (or any ``mixed``) -> mixed; else the one
    non-neutral polarity; all neutral -> neutral; no polarities -> None.
    """
    if not polarities:
        return None
    kinds = set(polarities)
    if "mixed" in kinds or {"positive", "negative"} <= kinds:
        return "mixed"
    for p in ("positive", "negative"):
        if p in kinds:
            return p
    return "neutral"


def atsa_signal(sentiments: list[AspectSentiment]) -> StageSignal:
    """The ATSA aggregate the moderator reads.

    ``label`` is :func:`aggregate_label` of the polarities, ``confidence`` their
    mean confidence, and ``span`` the opinion span (else the aspect span) of the
    most confident sentiment: the one Rule A compares across stages.
    """
    if not sentiments:
        return StageSignal()
    best = max(sentiments, key=lambda s: s.confidence)
    span: tuple[int, int] | None = None
    if best.opinion_start is not None and best.opinion_end is not None:
        span = (best.opinion_start, best.opinion_end)
    elif best.start is not None and best.end is not None:
        span = (best.start, best.end)
    return StageSignal(
        label=aggregate_label([s.polarity for s in sentiments]),
        confidence=round(sum(s.confidence for s in sentiments) / len(sentiments), 6),
        span=span,
    )


def verify_aspects(sentence: str, ate: AteOutput, notes: list[str]) -> list[Aspect]:
    """Check ATE spans against the sentence: repair offsets, drop absent terms, drop duplicates."""
    out: list[Aspect] = []
    seen: set[tuple[int, int]] = set()
    for a in ate.aspects:
        span = find_span(sentence, a.term.strip(), a.start, a.end)
        if span is None:
            notes.append(f"ate: dropped {a.term!r} (not in the sentence)")
            continue
        if span != (a.start, a.end):
            notes.append(f"ate: repaired span of {a.term!r} {a.start}:{a.end} -> {span[0]}:{span[1]}")
        if span in seen:
            continue
        seen.add(span)
        out.append(Aspect(term=sentence[span[0] : span[1]], start=span[0], end=span[1]))
    return out


def verify_sentiments(
    sentence: str, atsa: AtsaOutput, aspects: list[Aspect], notes: list[str]
) -> list[AspectSentiment]:
    """Check ATSA entries: the aspect must be a known aspect, the opinion span must be in the sentence.

    An opinion that is not in the sentence is dropped (the polarity stays);
    an entry for an unknown aspect is dropped; a second entry for the same aspect is ignored.
    """
    by_norm = {normalize(a.term): a for a in aspects}
    out: list[AspectSentiment] = []
    seen: set[str] = set()
    for s in atsa.aspect_sentiments:
        key = normalize(s.aspect)
        aspect = by_norm.get(key)
        if aspect is None or key in seen:
            notes.append(
                f"atsa: dropped entry for {s.aspect!r} ({'duplicate' if key in seen else 'unknown aspect'})"
            )
            continue
        seen.add(key)
        opinion, o_start, o_end = s.opinion, None, None
        if s.opinion:
            span = find_span(sentence, s.opinion.strip(), s.opinion_start, s.opinion_end)
            if span is None:
                notes.append(f"atsa: dropped opinion {s.opinion!r} of {s.aspect!r} (not in the sentence)")
                opinion = None
            else:
                o_start, o_end = span
                opinion = sentence[o_start:o_end]
        out.append(
            AspectSentiment(
                aspect=aspect.term,
                polarity=s.polarity,
                confidence=s.confidence,
                start=aspect.start,
                end=aspect.end,
                opinion=opinion,
                opinion_start=o_start,
                opinion_end=o_end,
            )
        )
    return out


async def run_stage1(sentence: str, model: Model, config: AbsaConfig, rec: Recorder) -> Stage1Result:
    """Run ATE, then ATSA on the verified aspects, then the validator.

    ATSA is skipped when ATE found no aspect (there is nothing to classify);
    the validator always runs (it judges the sentence label too).
    """
    result = Stage1Result()
    prompt = render_prompt("ate", AteOutput, sentence=sentence)
    ate = await rec.call(model, "ate", prompt, _USER, AteOutput, config, result.errors)
    if ate is not None:
        result.aspects = verify_aspects(sentence, ate, result.span_notes)
        result.ate = StageSignal(label=ate.label, confidence=ate.confidence)

    if result.aspects:
        terms = [a.term for a in result.aspects]
        prompt = render_prompt("atsa", AtsaOutput, sentence=sentence, aspects=terms)
        atsa = await rec.call(model, "atsa", prompt, _USER, AtsaOutput, config, result.errors)
        if atsa is not None:
            result.sentiments = verify_sentiments(sentence, atsa, result.aspects, result.span_notes)
            result.atsa = atsa_signal(result.sentiments)
    else:
        rec.skip("atsa", "no aspects")

    stage1_view = {
        "aspects": [a.model_dump() for a in result.aspects],
        "aspect_sentiments": [s.prompt_view() for s in result.sentiments],
        "label": result.ate.label,
    }
    prompt = render_prompt("validator", ValidatorOutput, sentence=sentence, stage1=stage1_view)
    result.validator = await rec.call(
        model, "validator", prompt, _USER, ValidatorOutput, config, result.errors
    )
    return result
