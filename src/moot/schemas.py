"""Output schemas that turns, moderators and judges are validated against.

Each is registered under a short name that protocol configs refer to
(``turn_output: prt``, ``judge: {output: summary}``). Register your own with
:func:`register_output`.

Confidences are validated leniently and then clamped: small models (and some
big ones) answer ``85`` or ``100`` for "a confidence in [0, 1]", and
llama.cpp's grammar does not enforce numeric bounds. Only a value that is plainly a
percentage is read as one: one written with ``%``, or a number from 2 to 100 (``85``,
``100``, ``2.5``). A value just above 1 (``1.2``, ``1.9``) is an overshoot of the 0-1 scale,
not 1.2 per cent (reading it so would invert what the model meant): it is clamped to 1, as
is anything above 100; anything below 0 is clamped to 0.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
)

from .errors import ConfigError

__all__ = [
    "AnswerTurn",
    "Argument",
    "Arbitration",
    "Confidence",
    "Content",
    "DebateSummary",
    "MessageTurn",
    "Moderation",
    "AspectEvidence",
    "PatchJudgement",
    "PatchTurn",
    "PrtTurn",
    "Refinement",
    "ProposedEdit",
    "Synthesis",
    "get_output",
    "output_names",
    "register_output",
]


PERCENT_FLOOR = 2.0
"""The smallest confidence above 1 read as a percentage (module docstring): below it, an overshoot."""


def _clamp_confidence(value: Any) -> Any:
    percent = False
    if isinstance(value, str):
        text = value.strip()
        percent = text.endswith("%")
        try:
            value = float(text.rstrip("%"))
        except ValueError:
            return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        v = float(value)
        if percent or PERCENT_FLOOR <= v <= 100.0:
            v /= 100.0
        return min(max(v, 0.0), 1.0)
    return value


Confidence = Annotated[float, BeforeValidator(_clamp_confidence)]
"""A float in [0, 1]; percentages and out-of-range values are normalised."""


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be blank: write the content itself")
    return value


Content = Annotated[str, Field(min_length=1), AfterValidator(_not_blank)]
"""The text a turn exists to give (an answer, a synthesis, a verdict): blank is invalid, so a
blank reply gets the one repair and then is a failed turn with its raw text, never a result.
The schema says ``minLength: 1``, so constrained decoders (llama.cpp's grammars) cannot emit "" at all."""


class _Out(BaseModel):
    # Outputs ignore extra keys: a model adding a harmless field is not a failed turn.
    model_config = ConfigDict(extra="ignore")


class MessageTurn(_Out):
    """A plain debate turn."""

    message: Content = Field(description="your argument, in a few sentences")
    key_points: list[str] = Field(default_factory=list, description="short bullet points")
    confidence: Confidence | None = Field(None, description="0 to 1")


class AnswerTurn(_Out):
    """An answer to a question (seed 000's agents)."""

    answer: Content = Field(description="your full answer")
    citations: list[str] = Field(default_factory=list, description="sources from the context you relied on")
    confidence: Confidence = Field(0.5, description="0 to 1")


class PrtTurn(_Out):
    """Planning -> Reflection -> Action (seed 001's DebateTurn)."""

    speaker: str = Field(description="your persona name")
    stance: Annotated[StanceOut, BeforeValidator(_lower)] = Field(description="pro, con or neutral")
    planning: str = Field(description="what you will argue and why")
    reflection: str = Field(description="weak points of your plan and of earlier turns")
    message: Content = Field(description="what you say to the panel")
    key_points: list[str] = Field(default_factory=list, description="short bullet points")


class Argument(_Out):
    """A seed-002 argument with confidence and evidence."""

    content: Content = Field(description="your argument")
    confidence: Confidence = Field(description="0 to 1")
    supporting_evidence: list[str] = Field(default_factory=list, description="facts supporting the argument")


class Moderation(_Out):
    """A moderator's evaluation of a round (seed 002)."""

    evaluation: Content = Field(description="strengths and weaknesses of each position")
    leaning: Literal["support", "oppose", "uncertain"] = Field(description="which side is stronger so far")
    consensus_reached: bool = Field(description="true if further debate is unlikely to change the outcome")
    open_questions: list[str] = Field(default_factory=list, description="points needing more debate")
    confidence: Confidence = Field(description="confidence in the current understanding, 0 to 1")
    pro_logic: Confidence | None = Field(
        None, description="how logically sound the FOR side's arguments of this round are, 0 to 1"
    )
    con_logic: Confidence | None = Field(
        None, description="how logically sound the AGAINST side's arguments of this round are, 0 to 1"
    )


class Refinement(_Out):
    """The refiner's synthesis of a round (seed 002, extended mode): it takes no side."""

    synthesis: Content = Field(
        description="a refined synthesis integrating the valid points of all perspectives"
    )
    agreements: list[str] = Field(default_factory=list, description="points the sides agree on")
    disagreements: list[str] = Field(default_factory=list, description="points still in dispute")
    resolutions: list[str] = Field(default_factory=list, description="resolution paths or compromises")
    open_questions: list[str] = Field(default_factory=list, description="key remaining questions")


class DebateSummary(_Out):
    """A judge's summary (seed 001's DebateSummary)."""

    winner: str | None = Field(None, description="the most convincing speaker, or null")
    consensus: Content = Field(description="what the panel converged on")
    key_agreements: list[str] = Field(default_factory=list)
    key_disagreements: list[str] = Field(default_factory=list)
    rationale: str = Field(description="why")


class Synthesis(_Out):
    """A synthesizer's merged answer (seed 000)."""

    final_answer: Content = Field(description="the merged, balanced final answer")
    citations: list[str] = Field(default_factory=list, description="sources from both agents")
    confidence: Confidence = Field(0.5, description="0 to 1")


PatchOp = Literal["set_polarity", "set_aspect_ref", "merge_tuples", "drop_tuple", "confirm_tuple"]
Polarity = Literal["positive", "negative", "neutral", "mixed"]
StanceOut = Literal["pro", "con", "neutral"]


def _lower(value: Any) -> Any:
    # Small models write "Positive" or " CON "; normalise before the enum check.
    return value.strip().lower() if isinstance(value, str) else value


PolarityIn = Annotated[Polarity, BeforeValidator(_lower)]
"""A polarity enum (the grammar and validation enforce it), case-insensitive on input."""


class EditTarget(_Out):
    """What an edit applies to: always a Stage-1 aspect_ref."""

    aspect_ref: str = Field(description="the Stage-1 aspect term this edit targets")
    aspect_term: str | None = None
    polarity: PolarityIn | None = None


class ProposedEdit(_Out):
    """One validated patch operation (seed 003)."""

    op: PatchOp
    target: EditTarget
    value: str | None = Field(None, description="new polarity / aspect ref / merged ref, depending on op")
    evidence: str | None = Field(None, description="exact words of the sentence supporting the edit")
    confidence: Confidence | None = None


class PatchTurn(_Out):
    """An EPM/TAN/CJ turn: only proposed edits."""

    agent: str = Field(description="your persona name")
    proposed_edits: list[ProposedEdit] = Field(default_factory=list)


class AspectTuple(_Out):
    """A final (aspect, polarity) tuple."""

    aspect_ref: str
    aspect_term: str | None = None
    polarity: PolarityIn


class AspectEvidence(_Out):
    """The judge's evidence for one aspect (seed 003's ``aspect_evidence``)."""

    aspect_ref: str = Field(description="the Stage-1 aspect term")
    spans: list[str] = Field(default_factory=list, description="exact substrings of the sentence")


class PatchJudgement(_Out):
    """The consistency judge's final patch (seed 003)."""

    final_patch: list[ProposedEdit] = Field(default_factory=list)
    final_tuples: list[AspectTuple] = Field(default_factory=list)
    unresolved_conflicts: list[str] = Field(default_factory=list)
    sentence_polarity: PolarityIn
    sentence_evidence_spans: list[str] = Field(
        description="at least one exact substring of the sentence supporting the decision"
    )
    aspect_evidence: list[AspectEvidence] = Field(default_factory=list)
    rationale: str | None = None

    @field_validator("sentence_evidence_spans")
    @classmethod
    def _one_exact_span(cls, spans: list[str], info: ValidationInfo) -> list[str]:
        # Seed 003: at least one span, required, copied exactly. Checked when the caller gives
        # the sentence (the engine passes the topic), so a violation gets the one repair.
        topic = (info.context or {}).get("topic")
        if not isinstance(topic, str):
            return spans
        if not any(s.strip() for s in spans):
            raise ValueError("at least one evidence span is required: copy it word for word from [TOPIC]")
        if not any(s and s in topic for s in spans):
            raise ValueError(
                "no evidence span is an exact substring of the sentence in [TOPIC]: copy at least one "
                "span character for character"
            )
        return spans


class Arbitration(_Out):
    """An arbitrator's ruling on one contradiction (seed 004)."""

    resolution: Literal["agent1_correct", "agent2_correct", "both_valid", "neither_valid"]
    explanation: Content
    recommended_value: float | None = None
    recommended_citation: str | None = None
    confidence: Confidence
    action: Literal["use_agent1", "use_agent2", "use_both", "flag_for_review"]


_OUTPUTS: dict[str, type[BaseModel]] = {
    "message": MessageTurn,
    "answer": AnswerTurn,
    "prt": PrtTurn,
    "argument": Argument,
    "moderation": Moderation,
    "refinement": Refinement,
    "summary": DebateSummary,
    "synthesis": Synthesis,
    "patch": PatchTurn,
    "patch_judgement": PatchJudgement,
    "arbitration": Arbitration,
}


def register_output(name: str, model: type[BaseModel]) -> None:
    """Make ``model`` available to protocol configs as ``name``."""
    _OUTPUTS[name] = model


def get_output(name: str) -> type[BaseModel]:
    """The schema registered as ``name``.

    Raises:
        ConfigError: no such schema.
    """
    try:
        return _OUTPUTS[name]
    except KeyError:
        raise ConfigError(f"unknown output schema {name!r}; known: {', '.join(sorted(_OUTPUTS))}") from None


def output_names() -> list[str]:
    """Names of all registered schemas."""
    return sorted(_OUTPUTS)
