"""Evaluation: aspect-tuple P/R/F1 and sentence-label accuracy, with ablations side by side.

Scoring rules:

* An aspect tuple is ``(normalised term, polarity)``; normalisation is the
  review context's (case-folded, whitespace and punctuation removed), so
  ``"battery life"`` and ``"Battery-life"`` match. Spans are not compared:
  the pipeline already verifies every span against the sentence.
* Tuples are matched as multisets (a term twice in gold needs two predictions).
* Implicit gold aspects (SemEval-2015/16 ``NULL`` targets, no term in the
  sentence) are not aspect tuples: term extraction cannot find them, and
  SemEval's own target evaluation leaves them out too.
* Label accuracy counts only sentences with a gold label; the majority-class
  rate on the same sentences is reported beside it as the baseline.
* **A sentence with any failed call is scored wrong**: its label counts as
  incorrect and its predicted tuples as empty, so gold tuples become false
  negatives. A parse failure is never scored right.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel

from ..deadline import Deadline
from ..jsontext import check_unique_ids
from ..models import default_model_spec, resolve_model
from ..models.base import Model, Usage
from ..observe import PipelineEvent, RunStart, degraded_status, observed
from .config import AbsaConfig
from .dataset import GoldAspect, GoldItem, load_dataset
from .metrics import BatchMetrics, compute_metrics
from .pipeline import run_absa_batch
from .review_context import normalize
from .schemas import FinalResult

__all__ = [
    "EvalScores",
    "GoldAspect",
    "GoldItem",
    "evaluate",
    "format_table",
    "load_dataset",
    "prediction",
    "score",
]
# GoldAspect, GoldItem and load_dataset live in .dataset; they stay importable from here.


class EvalScores(BaseModel):
    """Scores of one configuration."""

    name: str
    n: int = 0
    failed: int = 0
    labelled: int = 0
    """Sentences with a gold label (label accuracy is over these)."""
    label_correct: int = 0
    majority_correct: int = 0
    """Labelled sentences whose gold label is the most common one: the majority-class baseline."""
    tp: int = 0
    fp: int = 0
    fn: int = 0
    calls: int = 0
    tokens: int = 0
    metrics: BatchMetrics | None = None

    @property
    def accuracy(self) -> float | None:
        """Label accuracy over labelled sentences (a failed one counts as wrong); None without labels."""
        return self.label_correct / self.labelled if self.labelled else None

    @property
    def majority_accuracy(self) -> float | None:
        """The rate of always answering the most common gold label, on the same sentences."""
        return self.majority_correct / self.labelled if self.labelled else None

    @property
    def precision(self) -> float:
        """Aspect-tuple precision."""
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 0.0

    @property
    def recall(self) -> float:
        """Aspect-tuple recall."""
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0

    @property
    def f1(self) -> float:
        """Aspect-tuple F1."""
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


def _tuples(aspects: Sequence[dict[str, Any] | GoldAspect]) -> Counter[tuple[str, str]]:
    out: Counter[tuple[str, str]] = Counter()
    for a in aspects:
        if isinstance(a, GoldAspect):
            if not a.implicit:
                out[(normalize(a.term), a.polarity)] += 1
        else:
            out[(normalize(str(a.get("aspect") or a.get("term") or "")), str(a.get("polarity")))] += 1
    return out


def score(name: str, items: Sequence[GoldItem], results: Sequence[FinalResult]) -> EvalScores:
    """Score ``results`` against ``items`` (same order)."""
    s = EvalScores(name=name, n=len(items))
    labels = Counter(it.label for it in items if it.label is not None)
    s.labelled = sum(labels.values())
    s.majority_correct = max(labels.values(), default=0)
    for gold, res in zip(items, results, strict=True):
        s.calls += res.usage.calls
        s.tokens += res.usage.total_tokens
        gold_t = _tuples(gold.aspects)
        if res.failed:
            s.failed += 1
            s.fn += sum(gold_t.values())
            continue
        pred_t = _tuples(res.aspects)
        hit = sum((gold_t & pred_t).values())
        s.tp += hit
        s.fp += sum(pred_t.values()) - hit
        s.fn += sum(gold_t.values()) - hit
        s.label_correct += gold.label is not None and res.label == gold.label
    s.metrics = compute_metrics(results)
    return s


async def evaluate(
    items: Sequence[GoldItem],
    configs: dict[str, AbsaConfig],
    *,
    model: str | Model | None = None,
    concurrency: int = 1,
    on_result: Callable[[str, int, FinalResult], None] | None = None,
    timeout_s: float | None = None,
    store: Any = None,
) -> dict[str, EvalScores]:
    """Run every config over ``items`` and score each.

    The evaluation is one run (kind ``absa-eval``) for its observers (:mod:`moot.observe`): each
    prediction is a ``unit_completed`` event (``unit`` = gold id, ``part`` = config name, ``data``
    = gold and result, the result with its ``stage_requests`` as :meth:`FinalResult.record_data`
    keeps them); the result is the scores by config, the score the best F1.

    Args:
        items: the labelled sentences.
        configs: configs by name (see :func:`moot.absa.config.ablations`).
        model: the model spec or instance (resolved once).
        concurrency: sentences in flight at once.
        on_result: progress callback ``(config name, index, result)``.
        timeout_s: seconds for the whole evaluation. At the deadline every sentence not yet
            finished (in this and later configs) gets a failed result with a ``deadline``
            error, is scored wrong and is passed to ``on_result`` like any other.
        store: record the evaluation in a run store: a store file, an open
            :class:`~moot.runs.RunStore`, True for ``$MOOT_STORE`` / ``./.moot/runs.db``, or None
            (the default) for nothing.

    Returns:
        Scores by config name, in ``configs`` order.

    Raises:
        UsageError: two items with one id (each is one stored unit per config), named with their
            positions from 1, as :func:`~moot.absa.dataset.read_dataset` refuses a file's.
    """
    check_unique_ids((it.id for it in items), "items", places=range(1, len(items) + 1), unit="item")
    mdl = resolve_model(model)
    spec = model if model is None or isinstance(model, str) else model.name
    recorded = {
        "model": spec,
        "concurrency": concurrency,
        "configs": {name: c.model_dump(mode="json") for name, c in configs.items()},
    }
    start = RunStart(
        kind="absa-eval", title=f"{len(items)} sentences", model=spec or default_model_spec(), config=recorded
    )
    with observed(start, store=store) as run:

        def unit(name: str, i: int, res: FinalResult) -> None:
            gold = items[i]
            # record_data: the stage requests too, as a batch's units keep them (the viewer shows them).
            data = {"gold": gold.model_dump(mode="json"), "result": res.record_data()}
            unscored = res.failed or gold.label is None  # no gold label: nothing to be right about
            correct = None if unscored else res.label == gold.label
            run.emit(
                PipelineEvent(kind="unit_completed", unit=gold.id, part=name, correct=correct, data=data)
            )
            if on_result is not None:
                on_result(name, i, res)

        scores = await _evaluate(items, configs, mdl, concurrency, unit, timeout_s)
        run.end(  # every sentence run failed: failed; some: fell_back (the CLI exits 1 for both)
            degraded_status(sum(s.failed for s in scores.values()), sum(s.n for s in scores.values())),
            {name: s.model_dump(mode="json") for name, s in scores.items()},
            usage=Usage(calls=sum(s.calls for s in scores.values())),
            summary={name: s.f1 for name, s in scores.items()},
            score=max((s.f1 for s in scores.values()), default=None),
        )
    return scores


async def _evaluate(
    items: Sequence[GoldItem],
    configs: dict[str, AbsaConfig],
    mdl: Model,
    concurrency: int,
    on_result: Callable[[str, int, FinalResult], None],
    timeout_s: float | None,
) -> dict[str, EvalScores]:
    """:func:`evaluate` inside its observed run."""
    out: dict[str, EvalScores] = {}
    sentences = [it.sentence for it in items]
    deadline = Deadline.within(timeout_s)  # one deadline for every config
    for name, cfg in configs.items():
        done: dict[int, FinalResult] = {}

        def cb(i: int, res: FinalResult, _name: str = name, _done: dict[int, FinalResult] = done) -> None:
            _done[i] = res
            on_result(_name, i, res)

        await run_absa_batch(
            sentences, model=mdl, config=cfg, concurrency=concurrency, on_result=cb, deadline=deadline
        )
        out[name] = score(name, items, [done[i] for i in range(len(items))])
    return out


def prediction(config: str, gold: GoldItem, result: FinalResult) -> dict[str, Any]:
    """One line of ``predictions.jsonl``: the gold sentence beside what one config predicted."""
    return {
        "config": config,
        "id": gold.id,
        "sentence": gold.sentence,
        "gold_label": gold.label,
        "label": None if result.failed else result.label,
        "label_correct": None if gold.label is None else (not result.failed and result.label == gold.label),
        "gold_aspects": [{"term": a.name, "polarity": a.polarity} for a in gold.aspects],
        "aspects": []
        if result.failed
        else [{"term": a.get("aspect"), "polarity": a.get("polarity")} for a in result.aspects],
        "failed": result.failed,
        "errors": result.errors,
        "calls": result.usage.calls,
    }


def format_table(scores: dict[str, EvalScores], *, title: str = "ABSA evaluation") -> Any:
    """A rich Table with one column per config (ablations side by side)."""
    from rich.table import Table

    table = Table(title=title)
    table.add_column("metric")
    for name in scores:
        table.add_column(name, justify="right")
    rows: list[tuple[str, Callable[[EvalScores], str]]] = [
        ("sentences", lambda s: str(s.n)),
        ("failed (scored wrong)", lambda s: str(s.failed)),
        ("label accuracy", lambda s: _rate(s.accuracy, s.labelled)),
        ("  majority-class baseline", lambda s: _rate(s.majority_accuracy, s.labelled)),
        ("aspect precision", lambda s: f"{s.precision:.3f}"),
        ("aspect recall", lambda s: f"{s.recall:.3f}"),
        ("aspect F1", lambda s: f"{s.f1:.3f}"),
        ("tp / fp / fn", lambda s: f"{s.tp} / {s.fp} / {s.fn}"),
        ("model calls", lambda s: str(s.calls)),
        ("tokens", lambda s: str(s.tokens)),
        ("mapping coverage", lambda s: _pct(s.metrics.debate_mapping_coverage if s.metrics else None)),
        ("override applied", lambda s: str(s.metrics.debate_override_applied if s.metrics else 0)),
    ]
    for label, fn in rows:
        table.add_row(label, *(fn(s) for s in scores.values()))
    return table


def _rate(value: float | None, n: int) -> str:
    return "n/a (no gold labels)" if value is None else f"{value:.3f} (n={n})"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"
