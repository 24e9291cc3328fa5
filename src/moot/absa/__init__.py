"""Aspect-based sentiment analysis with a debate layer (seeds 001 and 003).

Stage 1 (ATE, ATSA, validator) -> debate (``persona``: the ``panel`` preset, or
``patch``: EPM/TAN/CJ) -> debate review context -> Stage 2 reviews and the
debate override (or the judge's final_patch) -> a rule-based moderator::

    from moot.absa import moderate, run_absa_sync

    result = run_absa_sync("배터리는 오래가지만 화면이 너무 어둡다.", model="local")
    print(result.label, result.aspects, result.moderator.applied_rules)

    moderate({"stage1_ate": {"label": "positive", "confidence": 0.9}})
"""

from __future__ import annotations

from .config import (
    SHIPPED_CONFIGS,
    AbsaConfig,
    ModeratorThresholds,
    OverrideThresholds,
    ablations,
    load_config,
    load_override_thresholds,
)
from .evaluate import EvalScores, GoldAspect, GoldItem, evaluate, format_table, load_dataset, score
from .metrics import BatchMetrics, MetricWarning, compute_metrics, format_report
from .moderator import build_final_aspects, infer_label_from_debate, moderate, span_iou
from .override import apply_debate_override, decide_override
from .pipeline import run_absa, run_absa_batch, run_absa_sync
from .review_context import build_review_context, expand_synonyms, match_aspects, normalize
from .schemas import (
    ArbiterFlags,
    Aspect,
    AspectSentiment,
    Correction,
    FinalResult,
    ModeratorInputs,
    ModeratorOutput,
    OverrideStats,
    ReviewContext,
    Stage1Result,
    Stage2Result,
    StageEvent,
    StageSignal,
    TraceStep,
    ValidatorSignal,
)

__all__ = [
    "SHIPPED_CONFIGS",
    "AbsaConfig",
    "ArbiterFlags",
    "Aspect",
    "AspectSentiment",
    "BatchMetrics",
    "Correction",
    "EvalScores",
    "FinalResult",
    "GoldAspect",
    "GoldItem",
    "MetricWarning",
    "ModeratorInputs",
    "ModeratorOutput",
    "ModeratorThresholds",
    "OverrideStats",
    "OverrideThresholds",
    "ReviewContext",
    "Stage1Result",
    "Stage2Result",
    "StageEvent",
    "StageSignal",
    "TraceStep",
    "ValidatorSignal",
    "ablations",
    "apply_debate_override",
    "build_final_aspects",
    "build_review_context",
    "compute_metrics",
    "decide_override",
    "evaluate",
    "expand_synonyms",
    "format_report",
    "format_table",
    "infer_label_from_debate",
    "load_config",
    "load_dataset",
    "load_override_thresholds",
    "match_aspects",
    "moderate",
    "normalize",
    "run_absa",
    "run_absa_batch",
    "run_absa_sync",
    "score",
    "span_iou",
]
