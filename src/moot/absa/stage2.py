"""Stage 2: reviews applied in seed 001 section 5's order, then the debate override or patch.

1. validator ``correction_proposals`` (FLIP_POLARITY, DROP_ASPECT, REVISE_SPAN)
2. ATE ``aspect_review`` (keep, revise_span, drop, add)
3. ATSA ``sentiment_review`` (maintain, flip_polarity, drop, add)
4. when ``enable_debate_override``: persona mode applies the thresholded debate
   override (:mod:`moot.absa.override`); patch mode applies the judge's
   ``final_patch`` instead (seed 003: the patch is "Stage2-ready"), each
   operation logged as ``debate_patch``.

Every edit is validated against the sentence; an edit that cannot apply (an
unknown aspect, a term not in the sentence) is logged with ``applied=False``
and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..models.base import Model
from ..schemas import ProposedEdit
from ._common import Recorder, find_span, render_prompt
from .config import AbsaConfig
from .override import apply_debate_override
from .review_context import normalize
from .schemas import (
    Aspect,
    AspectSentiment,
    AteReview,
    AtsaReview,
    Correction,
    CorrectionProposal,
    OverrideStats,
    ReviewContext,
    Stage1Result,
    Stage2Result,
    StageSignal,
)
from .stage1 import atsa_signal

__all__ = [
    "Workspace",
    "apply_ate_review",
    "apply_atsa_review",
    "apply_final_patch",
    "apply_validator_proposals",
    "run_stage2",
]

_USER = "Review the analysis in the instructions. Reply with JSON only."
_FLIP = {"positive": "negative", "negative": "positive"}


@dataclass
class Workspace:
    """The aspects and sentiments being edited, with the correction log."""

    sentence: str
    aspects: list[Aspect] = field(default_factory=list)
    sentiments: list[AspectSentiment] = field(default_factory=list)
    log: list[Correction] = field(default_factory=list)

    def aspect_index(self, term: str) -> int | None:
        """Index of the aspect whose normalised term equals ``term``'s."""
        key = normalize(term)
        return next((i for i, a in enumerate(self.aspects) if normalize(a.term) == key), None)

    def sentiment_index(self, term: str) -> int | None:
        """Index of the sentiment for ``term`` (normalised match)."""
        key = normalize(term)
        return next((i for i, s in enumerate(self.sentiments) if normalize(s.aspect) == key), None)

    def record(
        self,
        step: str,
        action: str,
        aspect: str,
        *,
        applied: bool,
        reason: str = "",
        before: dict[str, Any] | None = None,
        after: dict[str, Any] | None = None,
    ) -> bool:
        """Append a log entry; returns ``applied`` for convenience."""
        self.log.append(
            Correction(
                step=step,
                action=action,
                aspect=aspect,
                applied=applied,
                reason=reason,
                before=before,
                after=after,
            )
        )
        return applied

    def set_polarity(
        self,
        step: str,
        action: str,
        term: str,
        polarity: str | None,
        reason: str = "",
        confidence: float | None = None,
    ) -> bool:
        """Set (or, with ``polarity=None``, flip) an existing sentiment's polarity."""
        idx = self.sentiment_index(term)
        if idx is None:
            return self.record(
                step, action, term, applied=False, reason=f"no sentiment for the aspect; {reason}"
            )
        cur = self.sentiments[idx]
        new = polarity or _FLIP.get(cur.polarity)
        if new not in ("positive", "negative", "neutral"):
            return self.record(
                step, action, term, applied=False, reason=f"cannot flip {cur.polarity}; {reason}"
            )
        update: dict[str, Any] = {"polarity": new, "source": step}
        if confidence is not None:
            update["confidence"] = confidence
        self.sentiments[idx] = cur.model_copy(update=update)
        return self.record(
            step,
            action,
            term,
            applied=True,
            reason=reason,
            before=cur.model_dump(include={"polarity", "confidence"}),
            after=self.sentiments[idx].model_dump(include={"polarity", "confidence"}),
        )

    def drop(self, step: str, action: str, term: str, *, aspect_too: bool, reason: str = "") -> bool:
        """Remove the sentiment for ``term`` (and the aspect, when ``aspect_too``)."""
        s_idx, a_idx = self.sentiment_index(term), self.aspect_index(term) if aspect_too else None
        if s_idx is None and a_idx is None:
            return self.record(step, action, term, applied=False, reason=f"unknown aspect; {reason}")
        if s_idx is not None:
            del self.sentiments[s_idx]
        if a_idx is not None:
            del self.aspects[a_idx]
        return self.record(step, action, term, applied=True, reason=reason)

    def revise(
        self,
        step: str,
        action: str,
        term: str,
        new_term: str | None,
        start: int | None = None,
        end: int | None = None,
        reason: str = "",
    ) -> bool:
        """Move an aspect to a new span (found in the sentence), renaming its sentiment too."""
        idx = self.aspect_index(term)
        if (
            new_term is None
            and start is not None
            and end is not None
            and 0 <= start < end <= len(self.sentence)
        ):
            new_term = self.sentence[start:end]
        span = find_span(self.sentence, (new_term or "").strip(), start, end)
        if idx is None or span is None:
            why = "unknown aspect" if idx is None else f"{new_term!r} is not in the sentence"
            return self.record(step, action, term, applied=False, reason=f"{why}; {reason}")
        old = self.aspects[idx]
        new = Aspect(term=self.sentence[span[0] : span[1]], start=span[0], end=span[1])
        self.aspects[idx] = new
        s_idx = self.sentiment_index(term)
        if s_idx is not None:
            self.sentiments[s_idx] = self.sentiments[s_idx].model_copy(
                update={"aspect": new.term, "start": new.start, "end": new.end, "source": step}
            )
        return self.record(
            step, action, term, applied=True, reason=reason, before=old.model_dump(), after=new.model_dump()
        )

    def add_aspect(
        self,
        step: str,
        action: str,
        term: str,
        start: int | None = None,
        end: int | None = None,
        reason: str = "",
    ) -> Aspect | None:
        """Add an aspect found in the sentence; returns the existing one if already there."""
        idx = self.aspect_index(term)
        if idx is not None:
            return self.aspects[idx]
        span = find_span(self.sentence, term.strip(), start, end)
        if span is None:
            self.record(
                step, action, term, applied=False, reason=f"{term!r} is not in the sentence; {reason}"
            )
            return None
        aspect = Aspect(term=self.sentence[span[0] : span[1]], start=span[0], end=span[1])
        self.aspects.append(aspect)
        self.record(step, action, term, applied=True, reason=reason, after=aspect.model_dump())
        return aspect


def apply_validator_proposals(ws: Workspace, proposals: list[CorrectionProposal]) -> None:
    """Step 1: the validator's FLIP_POLARITY, DROP_ASPECT and REVISE_SPAN proposals."""
    for p in proposals:
        if p.type == "FLIP_POLARITY":
            ws.set_polarity("validator", p.type, p.aspect, p.new_polarity, p.reason)
        elif p.type == "DROP_ASPECT":
            ws.drop("validator", p.type, p.aspect, aspect_too=True, reason=p.reason)
        else:
            ws.revise("validator", p.type, p.aspect, p.new_term, p.new_start, p.new_end, p.reason)


def apply_ate_review(ws: Workspace, review: AteReview) -> None:
    """Step 2: the ATE review's revise_span, drop and add (keep changes nothing)."""
    for r in review.aspect_review:
        if r.action == "revise_span":
            ws.revise("ate_review", r.action, r.term, r.new_term, r.start, r.end, r.reason)
        elif r.action == "drop":
            ws.drop("ate_review", r.action, r.term, aspect_too=True, reason=r.reason)
        elif r.action == "add":
            ws.add_aspect("ate_review", r.action, r.term, r.start, r.end, r.reason)


def apply_atsa_review(ws: Workspace, review: AtsaReview) -> None:
    """Step 3: the ATSA review's maintain, flip_polarity, drop and add."""
    for r in review.sentiment_review:
        if r.action == "maintain":
            idx = ws.sentiment_index(r.aspect)
            if idx is not None and r.confidence is not None:
                ws.sentiments[idx] = ws.sentiments[idx].model_copy(update={"confidence": r.confidence})
        elif r.action == "flip_polarity":
            ws.set_polarity("atsa_review", r.action, r.aspect, r.polarity, r.reason, r.confidence)
        elif r.action == "drop":
            ws.drop("atsa_review", r.action, r.aspect, aspect_too=False, reason=r.reason)
        elif r.action == "add":
            _add_sentiment(ws, r.aspect, r.polarity, r.opinion, r.confidence, r.reason)


def _add_sentiment(
    ws: Workspace, term: str, polarity: str | None, opinion: str | None, confidence: float | None, reason: str
) -> None:
    if polarity is None:
        ws.record("atsa_review", "add", term, applied=False, reason=f"no polarity; {reason}")
        return
    if ws.sentiment_index(term) is not None:
        ws.set_polarity("atsa_review", "add", term, polarity, f"already present; {reason}", confidence)
        return
    aspect = ws.add_aspect("atsa_review", "add_aspect", term, reason=reason)
    if aspect is None:
        return
    o_span = find_span(ws.sentence, (opinion or "").strip())
    ws.sentiments.append(
        AspectSentiment(
            aspect=aspect.term,
            polarity=polarity,
            confidence=confidence if confidence is not None else 0.5,
            start=aspect.start,
            end=aspect.end,
            opinion=ws.sentence[o_span[0] : o_span[1]] if o_span else None,
            opinion_start=o_span[0] if o_span else None,
            opinion_end=o_span[1] if o_span else None,
            source="atsa_review",
        )
    )
    ws.record("atsa_review", "add", term, applied=True, reason=reason, after={"polarity": polarity})


def apply_final_patch(ws: Workspace, patch: list[ProposedEdit] | list[dict[str, Any]]) -> OverrideStats:
    """Patch mode step 4: apply the judge's ``final_patch`` (seed 003 operations).

    ``set_polarity`` sets the target's polarity to ``value``; ``set_aspect_ref``
    moves the target to the aspect term ``value`` (found in the sentence);
    ``merge_tuples`` drops the target's sentiment in favour of ``value``'s;
    ``drop_tuple`` drops the target's sentiment; ``confirm_tuple`` changes
    nothing. ``patch_applied`` counts operations that applied (confirmations
    included), ``patch_skipped`` those that could not (unknown target, bad value).
    """
    stats = OverrideStats()
    for raw in patch:
        edit = raw if isinstance(raw, ProposedEdit) else ProposedEdit.model_validate(raw)
        ref, step, reason = edit.target.aspect_ref, "debate_patch", edit.evidence or ""
        if edit.op == "set_polarity":
            value = (edit.value or "").strip().lower()
            if value in ("positive", "negative", "neutral"):
                ok = ws.set_polarity(step, edit.op, ref, value, reason, edit.confidence)
            else:
                ok = ws.record(step, edit.op, ref, applied=False, reason=f"invalid polarity {edit.value!r}")
        elif edit.op == "set_aspect_ref":
            ok = ws.revise(step, edit.op, ref, edit.value, reason=reason)
        elif edit.op == "merge_tuples":
            if edit.value is not None and ws.sentiment_index(edit.value) is not None:
                ok = ws.drop(
                    step, edit.op, ref, aspect_too=False, reason=f"merged into {edit.value}; {reason}"
                )
            else:
                ok = ws.record(
                    step, edit.op, ref, applied=False, reason=f"merge target {edit.value!r} unknown"
                )
        elif edit.op == "drop_tuple":
            ok = ws.drop(step, edit.op, ref, aspect_too=False, reason=reason)
        else:  # confirm_tuple
            ok = ws.sentiment_index(ref) is not None
            ws.record(step, edit.op, ref, applied=ok, reason=reason or "confirmed")
        if ok:
            stats.patch_applied += 1
        else:
            stats.patch_skipped += 1
    return stats


def _context_view(context: ReviewContext | None) -> dict[str, Any]:
    # A compact view for the prompt: small models lose the thread in long contexts.
    # The hints come from the turns, so they are shown even when the judge failed.
    if context is None or (context.summary is None and not context.rebuttal_points):
        return {}
    return {
        "summary": context.summary,
        "aspect_hints": context.aspect_hints,
        "rebuttal_points": [
            p.model_dump(include={"speaker", "stance", "key_points", "aspect_refs", "polarity_hint"})
            for p in context.rebuttal_points
        ],
        "synonym_hints": context.synonym_hints,
        "review_guidance": context.review_guidance,
    }


async def run_stage2(
    sentence: str,
    stage1: Stage1Result,
    context: ReviewContext | None,
    final_patch: list[dict[str, Any]] | None,
    model: Model,
    config: AbsaConfig,
    rec: Recorder,
) -> Stage2Result:
    """Run Stage 2 on a copy of the Stage-1 result (see the module docstring for the order).

    Args:
        sentence: the sentence.
        stage1: the verified Stage-1 result.
        context: the debate review context (None when the debate did not run).
        final_patch: patch mode: the judge's final_patch (None otherwise).
        model: the model for the review calls.
        config: the pipeline config.
        rec: the run's recorder (trace, usage, errors).
    """
    ws = Workspace(
        sentence, [a.model_copy() for a in stage1.aspects], [s.model_copy() for s in stage1.sentiments]
    )
    result = Stage2Result()
    t0 = rec.now_ms()
    if stage1.validator is not None:
        apply_validator_proposals(ws, stage1.validator.correction_proposals)
    rec.step("validator_proposals", t0, detail=f"{len(ws.log)} log entries")
    ctx = _context_view(context)
    if config.run_stage2:
        current = {"aspects": [a.model_dump() for a in ws.aspects]}
        prompt = render_prompt("ate_review", AteReview, sentence=sentence, current=current, context=ctx)
        ate_review = await rec.call(model, "ate_review", prompt, _USER, AteReview, config, result.errors)
        if ate_review is not None:
            apply_ate_review(ws, ate_review)
            result.ate = StageSignal(label=ate_review.label, confidence=ate_review.confidence)
        current_sentiments = {
            "aspects": [a.term for a in ws.aspects],
            "aspect_sentiments": [s.prompt_view() for s in ws.sentiments],
        }
        prompt = render_prompt(
            "atsa_review", AtsaReview, sentence=sentence, current=current_sentiments, context=ctx
        )
        atsa_review = await rec.call(model, "atsa_review", prompt, _USER, AtsaReview, config, result.errors)
        if atsa_review is not None:
            apply_atsa_review(ws, atsa_review)
    else:
        rec.skip("ate_review", "run_stage2 is false")
        rec.skip("atsa_review", "run_stage2 is false")

    t0 = rec.now_ms()
    if not config.enable_debate_override:
        rec.skip("debate_override", "enable_debate_override is false")
    elif context is None:
        rec.skip("debate_override", "no debate result")
    elif config.mode == "patch":
        if final_patch is None:  # the judge failed: there is no patch to apply
            rec.skip("debate_patch", "no final_patch")
        else:
            result.override_stats = apply_final_patch(ws, final_patch)
            rec.step("debate_patch", t0, detail=result.override_stats.model_dump_json())
    else:
        ws.sentiments, log, result.override_stats = apply_debate_override(
            sentence, ws.aspects, ws.sentiments, context.aspect_hints, config.thresholds()
        )
        ws.log.extend(log)
        rec.step("debate_override", t0, detail=result.override_stats.model_dump_json())

    result.aspects, result.sentiments, result.correction_log = ws.aspects, ws.sentiments, ws.log
    result.atsa = atsa_signal(ws.sentiments) if ws.sentiments else None
    return result
