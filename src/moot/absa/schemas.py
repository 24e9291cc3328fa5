"""Data shapes of the ABSA pipeline (seeds 001 and 003).

Three families live here:

* **LLM output schemas** (``AteOutput``, ``AtsaOutput``, ``ValidatorOutput``,
  ``AteReview``, ``AtsaReview``): what Stage-1 and Stage-2 calls must return.
  They ignore extra keys, like every moot output schema, so a model adding a
  harmless field does not fail the call.
* **Pipeline state** (``Aspect``, ``AspectSentiment``, ``Correction``,
  ``Stage1Result``, ``Stage2Result``, ``ReviewContext``, ``OverrideStats``):
  character spans here are always verified against the sentence.
* **Moderator and result** (``ModeratorInputs``, ``ModeratorOutput``,
  ``ArbiterFlags``, ``FinalResult``).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from ..models.base import Message, Usage
from ..schemas import Confidence
from ..transcript import DebateResult, RequestRecord

__all__ = [
    "Aspect",
    "AspectSentiment",
    "AteAspect",
    "AteOutput",
    "AteReview",
    "AteReviewAction",
    "ArbiterFlags",
    "AtsaOutput",
    "AtsaReview",
    "AtsaReviewAction",
    "AtsaSentiment",
    "Correction",
    "CorrectionProposal",
    "FinalResult",
    "FailReason",
    "HintPolarity",
    "IssueType",
    "ModeratorInputs",
    "ModeratorOutput",
    "OverrideStats",
    "Polarity",
    "RebuttalPoint",
    "ReviewContext",
    "Severity",
    "StageEvent",
    "StageRequest",
    "StageSignal",
    "Stage1Result",
    "Stage2Result",
    "TraceStep",
    "ValidatorIssue",
    "ValidatorOutput",
    "ValidatorSignal",
]

Polarity = Literal["positive", "negative", "neutral", "mixed"]
"""Sentence or aspect polarity."""
FailReason = Literal["no_aspects", "no_match", "neutral_stance", "fallback_used"]
"""Why a debate turn mapped to no aspect directly (seed 001's mapping fail reasons)."""
HintPolarity = Literal["positive", "negative", "neutral"]
"""The polarity a turn's stance hints at (pro -> positive, con -> negative, else neutral)."""
IssueType = Literal["negation", "irony", "sarcasm", "contrast", "hedge", "comparison", "implicit", "other"]
"""Kinds of validator issue; negation, irony and contrast are the critical ones for Rule C."""
Severity = Literal["low", "medium", "high"]
"""Validator issue severity; ``high`` is critical for Rule C."""

_POLARITIES = {"positive", "negative", "neutral", "mixed"}


def _norm_polarity(value: Any) -> Any:
    # Small models write "Positive", "POS" or "neg"; normalise before the Literal check.
    if isinstance(value, str):
        v = value.strip().lower()
        return {"pos": "positive", "neg": "negative", "neu": "neutral"}.get(v, v)
    return value


def _norm_lower(value: Any) -> Any:
    return value.strip().lower() if isinstance(value, str) else value


# Lenient input types: normalised before the Literal check.
_PolarityIn = Annotated[Polarity, BeforeValidator(_norm_polarity)]
_AspectPolarityIn = Annotated[Literal["positive", "negative", "neutral"], BeforeValidator(_norm_polarity)]


class _Out(BaseModel):
    # LLM outputs ignore extra keys (a harmless extra field is not a failed call).
    model_config = ConfigDict(extra="ignore")


# --------------------------------------------------------------------------- Stage 1 outputs


class AteAspect(_Out):
    """One extracted aspect term with its character span."""

    term: str = Field(description="the aspect term, copied exactly from the sentence")
    start: int = Field(description="character offset where the term starts (0-based)")
    end: int = Field(description="character offset just after the term")


class AteOutput(_Out):
    """Aspect term extraction: the aspects and a sentence-level label."""

    aspects: list[AteAspect] = Field(default_factory=list)
    label: _PolarityIn = Field(description="overall sentence polarity")
    confidence: Confidence = Field(description="0 to 1")


class AtsaSentiment(_Out):
    """The polarity of one aspect, with the opinion words and a confidence."""

    aspect: str = Field(description="the aspect term")
    polarity: _AspectPolarityIn
    opinion: str | None = Field(None, description="the opinion words, copied exactly from the sentence")
    opinion_start: int | None = Field(None, description="character offset of the opinion words")
    opinion_end: int | None = Field(None, description="character offset just after the opinion words")
    confidence: Confidence = Field(description="0 to 1")


class AtsaOutput(_Out):
    """Aspect term sentiment analysis: one sentiment per aspect."""

    aspect_sentiments: list[AtsaSentiment] = Field(default_factory=list)


class ValidatorIssue(_Out):
    """A risk the validator found (negation, irony, contrast...)."""

    type: IssueType
    severity: Annotated[Severity, BeforeValidator(_norm_lower)] = "medium"
    description: str = ""

    @field_validator("type", mode="before")
    @classmethod
    def _type(cls, value: Any) -> Any:
        v = _norm_lower(value)
        known = {"negation", "irony", "sarcasm", "contrast", "hedge", "comparison", "implicit"}
        return v if v in known else "other"


class CorrectionProposal(_Out):
    """A validator's proposed fix to Stage 1."""

    type: Literal["FLIP_POLARITY", "DROP_ASPECT", "REVISE_SPAN"]
    aspect: str = Field(description="the Stage-1 aspect term it applies to")
    new_polarity: _AspectPolarityIn | None = None
    new_term: str | None = Field(
        None, description="REVISE_SPAN: the corrected term, copied from the sentence"
    )
    new_start: int | None = None
    new_end: int | None = None
    reason: str = ""

    @field_validator("type", mode="before")
    @classmethod
    def _type(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value


class ValidatorOutput(_Out):
    """The validator's verdict on Stage 1."""

    issues: list[ValidatorIssue] = Field(default_factory=list)
    suggested_label: _PolarityIn | None = Field(
        None, description="the sentence label you would give, or null"
    )
    confidence: Confidence = Field(0.0, description="0 to 1")
    correction_proposals: list[CorrectionProposal] = Field(default_factory=list)


# --------------------------------------------------------------------------- Stage 2 outputs


class AteReviewAction(_Out):
    """One Stage-2 ATE review action."""

    action: Annotated[Literal["keep", "revise_span", "drop", "add"], BeforeValidator(_norm_lower)]
    term: str = Field(description="the aspect term (for add: the new term, copied from the sentence)")
    new_term: str | None = Field(None, description="revise_span: the corrected term")
    start: int | None = None
    end: int | None = None
    reason: str = ""


class AteReview(_Out):
    """Stage-2 ATE review: aspect edits plus a revised sentence label."""

    aspect_review: list[AteReviewAction] = Field(default_factory=list)
    label: _PolarityIn
    confidence: Confidence


class AtsaReviewAction(_Out):
    """One Stage-2 ATSA review action."""

    action: Annotated[Literal["maintain", "flip_polarity", "drop", "add"], BeforeValidator(_norm_lower)]
    aspect: str
    polarity: _AspectPolarityIn | None = Field(None, description="add/flip: new polarity")
    opinion: str | None = None
    confidence: Confidence | None = None
    reason: str = ""


class AtsaReview(_Out):
    """Stage-2 ATSA review."""

    sentiment_review: list[AtsaReviewAction] = Field(default_factory=list)


# --------------------------------------------------------------------------- pipeline state


class _State(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Aspect(_State):
    """A verified aspect: ``sentence[start:end] == term``."""

    term: str
    start: int
    end: int


class AspectSentiment(_State):
    """A verified aspect sentiment (spans, when present, match the sentence)."""

    aspect: str
    """The aspect term."""
    polarity: Literal["positive", "negative", "neutral"]
    confidence: float = 0.0
    start: int | None = None
    """Aspect span start, when the aspect is in the sentence."""
    end: int | None = None
    opinion: str | None = None
    opinion_start: int | None = None
    opinion_end: int | None = None
    source: str = "stage1"
    """Which step last set it: stage1, validator, ate_review, atsa_review, debate_override, debate_patch."""

    def prompt_view(self) -> dict[str, Any]:
        """What prompts and the debate context show of it (no offsets or provenance)."""
        return self.model_dump(include={"aspect", "polarity", "opinion", "confidence"})


class Correction(_State):
    """One entry of the correction log (applied or skipped)."""

    step: str
    """validator, ate_review, atsa_review, debate_override or debate_patch."""
    action: str
    """e.g. FLIP_POLARITY, revise_span, DEBATE_OVERRIDE, set_polarity."""
    aspect: str
    applied: bool
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    reason: str = ""


class StageSignal(BaseModel):
    """An aggregated stage output as the moderator sees it: ``{label, confidence, span}``."""

    model_config = ConfigDict(extra="allow")

    label: str | None = None
    confidence: float = 0.0
    span: tuple[int, int] | None = None
    """(start, end) of the opinion span Rule A compares; None when unknown."""


class ValidatorSignal(BaseModel):
    """The validator as the moderator sees it."""

    model_config = ConfigDict(extra="allow")

    issues: list[dict[str, Any]] = Field(default_factory=list)
    suggested_label: str | None = None
    confidence: float = 0.0


class Stage1Result(_State):
    """Stage 1 after span checks."""

    aspects: list[Aspect] = Field(default_factory=list)
    sentiments: list[AspectSentiment] = Field(default_factory=list)
    ate: StageSignal = Field(default_factory=StageSignal)
    atsa: StageSignal = Field(default_factory=StageSignal)
    validator: ValidatorOutput | None = None
    span_notes: list[str] = Field(default_factory=list)
    """What the span checks repaired or dropped."""
    errors: dict[str, str] = Field(default_factory=dict)
    """Failed calls by name (ate, atsa, validator)."""

    def context(self) -> dict[str, Any]:
        """The shared debate context: the Stage-1 result as plain JSON data."""
        return {
            "ate": {
                "aspects": [a.model_dump() for a in self.aspects],
                "label": self.ate.label,
                "confidence": self.ate.confidence,
            },
            "atsa": {"aspect_sentiments": [s.prompt_view() for s in self.sentiments]},
            "validator": self.validator.model_dump() if self.validator is not None else None,
        }


class OverrideStats(_State):
    """Debate override outcomes (seed 001 section 5.1) plus patch-mode counts."""

    applied: int = 0
    skipped_low_signal: int = 0
    skipped_conflict: int = 0
    skipped_already_confident: int = 0
    patch_applied: int = 0
    """Patch mode: final_patch operations that changed the sentiments."""
    patch_skipped: int = 0
    """Patch mode: operations whose target matched no aspect, or that changed nothing."""

    def __add__(self, other: OverrideStats) -> OverrideStats:
        return OverrideStats(**{k: getattr(self, k) + getattr(other, k) for k in type(self).model_fields})


class Stage2Result(_State):
    """Stage 2 after all edits."""

    aspects: list[Aspect] = Field(default_factory=list)
    sentiments: list[AspectSentiment] = Field(default_factory=list)
    ate: StageSignal | None = None
    """The ATE review's label and confidence; None when the review did not run or failed."""
    atsa: StageSignal | None = None
    correction_log: list[Correction] = Field(default_factory=list)
    override_stats: OverrideStats = Field(default_factory=OverrideStats)
    errors: dict[str, str] = Field(default_factory=dict)


class RebuttalPoint(_State):
    """One debate turn (or patch edit) as Stage 2 sees it."""

    speaker: str
    stance: str
    key_points: list[str] = Field(default_factory=list)
    message: str = ""
    aspect_refs: list[str] = Field(default_factory=list)
    weight: float = 0.8
    polarity_hint: HintPolarity = "neutral"
    provenance_hint: Literal["direct", "fallback", "none"] = "none"
    """How ``aspect_refs`` were found."""
    fail_reason: FailReason | None = None
    """no_aspects, no_match, neutral_stance, fallback_used or None (direct)."""


class ReviewContext(_State):
    """Seed 001 section 4: the debate review context handed to Stage 2."""

    summary: dict[str, Any] | None = None
    rebuttal_points: list[RebuttalPoint] = Field(default_factory=list)
    aspect_terms: list[str] = Field(default_factory=list)
    synonym_hints: dict[str, list[str]] = Field(default_factory=dict)
    aspect_hints: dict[str, list[dict[str, Any]]] = Field(default_factory=dict)
    mapping_stats: dict[str, int] = Field(default_factory=dict)
    mapping_fail_reasons: dict[str, int] = Field(default_factory=dict)
    review_guidance: str = ""
    fallback_mapping_policy: str = ""


# --------------------------------------------------------------------------- moderator


class ModeratorInputs(BaseModel):
    """Everything the moderator reads (seed 001 section 6.1)."""

    model_config = ConfigDict(extra="forbid")

    stage1_ate: StageSignal = Field(default_factory=StageSignal)
    stage1_atsa: StageSignal = Field(default_factory=StageSignal)
    stage2_ate: StageSignal | None = None
    stage2_atsa: StageSignal | None = None
    validator: ValidatorSignal | None = None
    final_aspect_sentiments: list[dict[str, Any]] = Field(default_factory=list)
    debate_summary: dict[str, Any] | None = None


class ArbiterFlags(BaseModel):
    """Which arbitration mechanisms fired."""

    stage2_rejected_due_to_confidence: bool = False
    """Rule B's drop guard kept Stage 1."""
    validator_override_applied: bool = False
    """Rule C replaced the label."""
    confidence_margin_used: bool = False
    """Rule D decided by the ATE/ATSA confidence margin."""


class ModeratorOutput(BaseModel):
    """The moderator's decision."""

    final_label: Polarity
    confidence: float
    rationale: str
    """The applied rules' rationale strings, joined by a space."""
    selected_stage: Literal["stage1", "stage2"]
    applied_rules: list[str] = Field(default_factory=list)
    arbiter_flags: ArbiterFlags = Field(default_factory=ArbiterFlags)
    final_aspects: list[dict[str, Any]] = Field(default_factory=list)


# --------------------------------------------------------------------------- result


class TraceStep(BaseModel):
    """One step of the process trace."""

    name: str
    ok: bool = True
    skipped: bool = False
    started_ms: float = 0.0
    """Offset from the pipeline's start."""
    duration_ms: float = 0.0
    detail: str = ""

    def line(self) -> str:
        """One line for a terminal: ``name: ok · 1.2s · detail`` (the detail within 100 characters).

        A detail that is a JSON object is shown as ``key=value`` pairs, whole pairs only (the
        rest counted as ``+N more``); other text is cut at a word, never inside one.
        """
        outcome = "skipped" if self.skipped else ("ok" if self.ok else "failed")
        detail = f" · {_short(self.detail, 100)}" if self.detail else ""
        return f"{self.name}: {outcome} · {self.duration_ms / 1000:.1f}s{detail}"


def _short(text: str, width: int) -> str:
    """``text`` within ``width`` characters, cut only between whole pairs or words."""
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        pairs = [f"{k}={json.dumps(v, ensure_ascii=False, separators=(',', ':'))}" for k, v in data.items()]
        shown: list[str] = []
        for i, pair in enumerate(pairs):
            rest = len(pairs) - i - 1
            tail = f" +{rest} more" if rest else ""  # room kept for the count of what follows
            if len(" ".join([*shown, pair])) + len(tail) > width:
                return " ".join([*shown, f"+{len(pairs) - i} more"])
            shown.append(pair)
        return " ".join(shown)
    if len(text) <= width:
        return text
    cut = text[: width - 1].rsplit(" ", 1)[0] if " " in text[: width - 1] else text[: width - 1]
    return cut.rstrip() + "…"


class StageEvent(BaseModel):
    """A pipeline step starting or ending, or a stage's output, as it happens.

    ``run_absa(on_event=...)`` receives these (and the debate's own events), so a
    run killed mid-way has recorded every step it completed.
    """

    kind: Literal["step_started", "step_completed", "stage_output"]
    name: str
    """The step (``ate``, ``debate``...) or the stage (``stage1``, ``review_context``, ``stage2``)."""
    step: TraceStep | None = None
    """The finished step (``step_completed``)."""
    stage1: Stage1Result | None = None
    """Stage 1's result (``stage_output`` named ``stage1``)."""
    review_context: ReviewContext | None = None
    """What the debate told Stage 2 (``stage_output`` named ``review_context``)."""
    stage2: Stage2Result | None = None
    """Stage 2's result (``stage_output`` named ``stage2``)."""


class StageRequest(RequestRecord):
    """One model request of an ABSA stage call, with its text: what the run record keeps.

    A stage call (``ate``, ``atsa``, ``validator``, ``ate_review``, ``atsa_review``) sends one
    request, or two when its first answer did not match the schema (the repair, ``attempt`` 1).
    Unlike a debate's :class:`~moot.transcript.RequestRecord` (whose text stays in memory), the
    messages sent and the reply received are serialised here, so a stored ABSA run shows each
    stage's transcript and can be replayed (:meth:`moot.models.testing.ReplayModel.from_absa`).
    """

    stage: str
    """The stage call that sent it (the request's ``speaker``)."""
    latency_ms: float = 0.0
    """Wall time of this request, its retries included."""
    messages: list[Message] = Field(default_factory=list)
    """The messages sent, exactly as sent (a repair: the first messages, the invalid answer, the error)."""
    reply: str | None = None
    """The text received; None when the request failed without an answer."""
    parsed: dict[str, Any] | None = None
    """The validated output of this reply (before the spans are checked against the sentence);
    None unless this reply validated."""

    @classmethod
    def of(cls, stage: str, record: RequestRecord, parsed: BaseModel | None = None) -> StageRequest:
        """``record`` (an ended request of ``stage``) with its text, and ``parsed`` when it validated."""
        data = {k: getattr(record, k) for k in RequestRecord.model_fields}
        return cls(
            **data,
            stage=stage,
            latency_ms=round(max(0.0, record.ended - record.started) * 1000, 3),
            parsed=parsed.model_dump(mode="json") if parsed is not None else None,
        )


class FinalResult(BaseModel):
    """Everything one ABSA run produced."""

    sentence: str
    label: Polarity
    confidence: float
    aspects: list[dict[str, Any]] = Field(default_factory=list)
    """Final (aspect, polarity, confidence, span) entries."""
    mode: Literal["persona", "patch"] = "persona"
    debate_enabled: bool = True
    override_enabled: bool = True
    stage1: Stage1Result = Field(default_factory=Stage1Result)
    stage2: Stage2Result = Field(default_factory=Stage2Result)
    debate: DebateResult | None = None
    review_context: ReviewContext | None = None
    override_stats: OverrideStats = Field(default_factory=OverrideStats)
    moderator: ModeratorOutput | None = None
    trace: list[TraceStep] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    errors: dict[str, str] = Field(default_factory=dict)
    """Failed calls by name; any entry means evaluation scores this sentence wrong."""
    stage_requests: list[StageRequest] | None = Field(default=None, exclude=True)
    """Every request the stage calls sent, in the order they ended, with their text (see
    :class:`StageRequest`); the debate's requests are its turns. Left out of the default JSON
    (``--json`` and the batch output stay as they were), as a debate turn's ``sent`` is:
    :meth:`record_data` includes it, and the run store keeps it. None in records written before
    moot kept them."""

    def __eq__(self, other: object) -> bool:
        """Equal outcomes, whether or not the request records were kept (``--json`` has none)."""
        if not isinstance(other, FinalResult):
            return NotImplemented
        mine = {k: v for k, v in self.__dict__.items() if k != "stage_requests"}
        return mine == {k: v for k, v in other.__dict__.items() if k != "stage_requests"}

    __hash__ = None  # type: ignore[assignment]

    def record_data(self) -> dict[str, Any]:
        """This result as JSON data with its ``stage_requests`` (what the run store keeps).

        The debate's turns are kept as in :meth:`model_dump` (their content, not the messages
        they were sent: those would put every debate prompt template's words in the store's
        full-text search of each ABSA run and unit).
        """
        data = self.model_dump(mode="json")
        if self.stage_requests is not None:
            data["stage_requests"] = [r.model_dump(mode="json") for r in self.stage_requests]
        return data

    def record_json(self) -> str:
        """:meth:`record_data` as JSON text (what a run store keeps as the run's result)."""
        return json.dumps(self.record_data(), ensure_ascii=False)

    @property
    def failed(self) -> bool:
        """True when any pipeline call failed (evaluation then scores the item wrong)."""
        return bool(self.errors)
