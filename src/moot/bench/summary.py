"""Aggregate per-item records into per-method, per-round and paired figures.

Definitions (the report repeats them):

* **accuracy**: items whose final answer equals the gold answer, over items
  finished; a parse failure is wrong.
* **round-0 vote**: the plurality of the first round's answers, scored like a
  final answer (for ``single`` it is the answer; for ``vote:K`` the vote).
* **flips**: per agent, between consecutive rounds that both ran: right->wrong
  ("bullied") and wrong->right ("relied"), where a parse failure counts as
  wrong. Agents are matched by name.
* **lenient accuracy**: accuracy had every reply been read by the lenient
  parser (see :mod:`moot.bench.parsers`), which reads an answer wherever the
  strict one does and more; the gap to accuracy is what answer format costs.
  Never used for scoring.
* **per-round accuracy** of an item that stopped early carries its last round
  forward (the answer it would have kept), so every round has all items.
* **calls saved**: nominal calls minus calls made, over all items.
* **fell back**: units whose debate fell back (a preset's deadline, budget or a failed
  turn). They are left out of every other figure: not scored, not parse failures, their
  calls not "saved"; the row counts them and says why (:attr:`MethodSummary.fallbacks`).
* **accuracy per 1k tokens**: accuracy in percent divided by the mean prompt +
  completion tokens per item, in thousands.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..judging import audit_summary
from .methods import MethodSpec
from .records import AgentAnswer, ItemRecord
from .stats import McNemar, majority, mcnemar, wilson_interval

__all__ = [
    "MethodSummary",
    "RoundSummary",
    "comparisons",
    "judge_audit",
    "round_summaries",
    "scored",
    "self_preference",
    "summarize",
]


@dataclass(frozen=True)
class MethodSummary:
    """Per-method figures over the items it finished."""

    method: str
    n: int
    correct: int
    ci_low: float
    ci_high: float
    round0_correct: int
    parse_failures: int
    lenient_parsed: int
    """Parse failures the lenient parser would have read an answer from."""
    lenient_correct: int
    replies: int
    replies_in_format: int
    replies_truncated: int
    calls: int
    nominal_calls: int
    prompt_tokens: int
    completion_tokens: int
    wall_s: float
    stopped_early: int
    notes: int
    cached: int = 0
    """Replies served from the response cache (no model call)."""
    saved_by_early_stop: int = 0
    """Nominal calls minus calls made and cached, over the items that stopped early only: a
    vote whose K samples came in one ``n=K`` request, or a reply from the cache, saved nothing."""
    fell_back: int = 0
    """Units whose debate fell back, left out of every other figure."""
    replies_blank: int = 0
    """Replies with no text (whitespace at most): scored as parse failures, counted here too."""
    sampled_items: int = 0
    """Items whose first round sampled two answers or more (``vote:K``, a society's round 0)."""
    same_samples: int = 0
    """Of :attr:`sampled_items`, those whose samples were all the same text: nothing independent
    to vote over (greedy decoding at temperature 0 or at a backend's deterministic default)."""
    cost_usd: float | None = 0.0
    """US dollars over the scored units; None when any unit's cost is unknown (an unpriced model)."""
    cost_ci: tuple[float, float] | None = None
    """95% interval of the mean cost per item (normal approximation over the units; None: unknown)."""
    fallbacks: tuple[tuple[str, int], ...] = ()
    """(reason, units) of the fallen-back units, most common first; the reason is the fallback's
    kind with its detail (``timeout: the debate exceeded 10 s``)."""
    history_shortened: int = 0
    """Calls whose prompt left out earlier history (``--history``, or to fit the model's window)."""
    history_left_out: int = 0
    """What they left out, added up: a society's exchanges, a preset's turns."""

    @property
    def accuracy(self) -> float:
        """Correct over finished items (0 when there are none)."""
        return self.per_item(self.correct)

    @property
    def round0_accuracy(self) -> float:
        """Accuracy of the first round's plurality vote."""
        return self.per_item(self.round0_correct)

    @property
    def parse_failure_rate(self) -> float:
        """Items whose final answer could not be parsed, over items."""
        return self.per_item(self.parse_failures)

    @property
    def lenient_accuracy(self) -> float:
        """Accuracy had every reply been read by the lenient parser (how much is answer format)."""
        return self.per_item(self.lenient_correct)

    def per_item(self, total: int | float) -> float:
        """``total`` divided by the number of items."""
        return total / self.n if self.n else 0.0

    @property
    def tokens_per_item(self) -> float:
        """Mean prompt + completion tokens per item."""
        return self.per_item(self.prompt_tokens + self.completion_tokens)

    @property
    def accuracy_per_1k_tokens(self) -> float | None:
        """Accuracy (percent) per 1,000 tokens per item; None when no tokens were reported."""
        tokens = self.tokens_per_item
        return 100 * self.accuracy / (tokens / 1000) if tokens else None

    @property
    def cost_per_item(self) -> float | None:
        """Mean US dollars per item (None when unknown)."""
        return None if self.cost_usd is None else self.per_item(self.cost_usd)

    @property
    def calls_saved(self) -> int:
        """Calls the items that stopped early did not make (see :attr:`saved_by_early_stop`)."""
        return self.saved_by_early_stop


@dataclass(frozen=True)
class RoundSummary:
    """One round of one method."""

    method: str
    round: int
    items: int
    items_ran: int
    vote_correct: int
    agent_answers: int
    agent_correct: int
    parse_failures: int
    right_to_wrong: int
    wrong_to_right: int

    @property
    def vote_accuracy(self) -> float:
        """Accuracy of this round's plurality vote (carried forward for stopped items)."""
        return self.vote_correct / self.items if self.items else 0.0

    @property
    def agent_accuracy(self) -> float:
        """Mean accuracy of the individual agents' answers in this round."""
        return self.agent_correct / self.agent_answers if self.agent_answers else 0.0


def _vote_correct(answers: Sequence[AgentAnswer], gold: str) -> bool:
    return majority([a.answer for a in answers]) == gold


def scored(records: Sequence[ItemRecord]) -> list[ItemRecord]:
    """The records that are a method's answers: every one but the fallen-back units."""
    return [r for r in records if r.fallback is None]


def all_blank(methods: Sequence[MethodSummary]) -> list[MethodSummary]:
    """The methods whose every reply was blank: nothing of the model was measured for them."""
    return [m for m in methods if m.replies and m.replies_blank == m.replies]


def blank_hint(methods: Sequence[MethodSummary]) -> str | None:
    """What to say when every reply of a method was blank (None: no such method)."""
    blank = all_blank(methods)
    if not blank:
        return None
    which = ", ".join(f"{m.method} ({m.replies} replies)" for m in blank)
    return (
        f"every reply of {which} was blank: nothing was measured. The model answered no text: "
        "a reply cut at max_tokens before any text, a reasoning model that puts its reply outside "
        "`content`, or a server that drops the reply (see its log)"
    )


def same_samples_hint(methods: Sequence[MethodSummary], temperature: float | None) -> str | None:
    """What to say when a method's samples were the same text on every item (None: no such method).

    ``vote:3`` at a backend's default temperature gave three identical samples on 20 of 20 items
    once, with nothing said: a vote of copies is one call's answer at three times the cost.
    """
    same = [m for m in methods if m.sampled_items and m.same_samples == m.sampled_items]
    if not same:
        return None
    which = ", ".join(f"{m.method} ({m.same_samples} of {m.sampled_items} items)" for m in same)
    at = "the backend's default temperature" if temperature is None else f"temperature {temperature:g}"
    return (
        f"the samples of each item were the same text for {which}: at {at} this backend decodes "
        "deterministically, so a vote counts one answer several times; pass --temperature 0.7 "
        "(or another value above 0) for independent samples"
    )


def summarize(method: str, records: Sequence[ItemRecord]) -> MethodSummary:
    """The figures of one method from its records (fallen-back units counted apart)."""
    reasons = Counter(r.fallback for r in records if r.fallback is not None)
    records = scored(records)
    low, high = wilson_interval(sum(r.correct for r in records), len(records))
    replies = [a for r in records for rnd in r.rounds for a in rnd]
    sampled = [r.rounds[0] for r in records if r.rounds and len(r.rounds[0]) > 1]
    return MethodSummary(
        method=method,
        n=len(records),
        correct=sum(r.correct for r in records),
        ci_low=low,
        ci_high=high,
        round0_correct=sum(1 for r in records if r.rounds and _vote_correct(r.rounds[0], r.gold)),
        parse_failures=sum(r.parse_failed for r in records),
        lenient_parsed=sum(r.parse_failed and r.lenient is not None for r in records),
        lenient_correct=sum(r.lenient == r.gold if r.lenient is not None else r.correct for r in records),
        replies=len(replies),
        replies_in_format=sum(a.in_format for a in replies),
        replies_truncated=sum(a.finish == "length" for a in replies),
        replies_blank=sum(not a.text.strip() for a in replies),
        sampled_items=len(sampled),
        same_samples=sum(len({a.text for a in first}) == 1 for first in sampled),
        calls=sum(r.calls for r in records),
        cached=sum(r.cached for r in records),
        saved_by_early_stop=sum(
            max(0, r.nominal_calls - r.calls - r.cached) for r in records if r.stopped_early
        ),
        nominal_calls=sum(r.nominal_calls for r in records),
        prompt_tokens=sum(r.prompt_tokens for r in records),
        completion_tokens=sum(r.completion_tokens for r in records),
        wall_s=sum(r.wall_s for r in records),
        stopped_early=sum(r.stopped_early for r in records),
        notes=sum(r.note is not None for r in records),
        fell_back=sum(reasons.values()),
        fallbacks=tuple(reasons.most_common()),
        history_shortened=sum(r.history_shortened for r in records),
        history_left_out=sum(r.history_left_out for r in records),
        **_costs(records),
    )


def _costs(records: Sequence[ItemRecord]) -> dict[str, Any]:
    """Total cost and the 95% interval of its mean per item (None when any unit's cost is unknown)."""
    costs = [r.cost_usd for r in records]
    known = [c for c in costs if c is not None]
    if len(known) < len(costs):
        return {"cost_usd": None, "cost_ci": None}
    total = sum(known)
    if len(known) < 2:
        return {"cost_usd": total, "cost_ci": (total, total) if known else None}
    mean = total / len(known)
    half = 1.96 * statistics.stdev(known) / math.sqrt(len(known))
    return {"cost_usd": total, "cost_ci": (max(0.0, mean - half), mean + half)}


def judge_audit(records: Sequence[ItemRecord]) -> dict[str, Any]:
    """The swap audit over a method's units (:func:`moot.judging.audit_summary`).

    Fallen-back units are included: a decision made and audited counts even when the run later
    fell back. A method without a deciding step (``single``, ``vote``, ``society``) has
    ``decisions`` 0.
    """
    return audit_summary(j for r in records for j in r.judging)


def self_preference(records: Sequence[ItemRecord]) -> dict[str, Any] | None:
    """How often the decision sided with a speaker sharing the judge's model, against the others.

    Over the deciding steps whose decision names one candidate (``sided_with``) in units
    where some but not all speakers share the deciding model: ``own`` / ``other`` win counts of
    the sides, with Wilson intervals of their rates per decision. None when nothing qualifies
    (every speaker on one model: there is no "other").
    """
    own = other = n = 0
    for record in records:
        shared = set(record.judge_shares_model_with)
        for j in record.judging:
            winner = j.sided_with
            if not shared or shared >= set(j.order) or winner is None:
                continue
            n += 1
            own += winner in shared
            other += winner not in shared
    if not n:
        return None
    low, high = wilson_interval(own, n)
    return {
        "n": n,
        "own_win_rate": own / n,
        "own_ci95": [round(low, 4), round(high, 4)],
        "other_win_rate": other / n,
    }


def round_summaries(method: str, records: Sequence[ItemRecord]) -> list[RoundSummary]:
    """Per-round vote and agent accuracy and flips of one method (see the module docstring)."""
    records = scored(records)
    depth = max((len(r.rounds) for r in records), default=0)
    out = []
    for k in range(depth):
        vote = agents = agent_ok = fails = rw = wr = ran = 0
        for rec in records:
            if not rec.rounds:
                continue
            rnd = rec.rounds[min(k, len(rec.rounds) - 1)]
            vote += _vote_correct(rnd, rec.gold)
            agents += len(rnd)
            agent_ok += sum(a.correct for a in rnd)
            fails += sum(a.answer is None for a in rnd)
            if k < len(rec.rounds):
                ran += 1
                if k > 0:
                    before = {a.agent: a.correct for a in rec.rounds[k - 1]}
                    for a in rnd:
                        if a.agent in before:
                            rw += before[a.agent] and not a.correct
                            wr += (not before[a.agent]) and a.correct
        out.append(
            RoundSummary(method, k, len(records), ran, vote, agents, agent_ok, fails, int(rw), int(wr))
        )
    return out


def comparisons(specs: Sequence[MethodSpec], records: Sequence[ItemRecord]) -> list[McNemar]:
    """McNemar tests of each method against ``single`` and each debate against its matched vote.

    Only items both methods finished are paired.
    """
    by_method: dict[str, dict[str, bool]] = defaultdict(dict)
    for rec in scored(records):
        by_method[rec.method][rec.item_id] = rec.correct
    names = {s.name for s in specs}
    pairs: list[tuple[str, str]] = []
    for spec in specs:
        if spec.name != "single" and "single" in names:
            pairs.append((spec.name, "single"))
        vote = next((s.name for s in specs if s.matches == spec.name), f"vote:{spec.nominal_calls}")
        if spec.is_debate and vote in names:
            pairs.append((spec.name, vote))
    out = []
    for a, b in pairs:
        shared = [i for i in by_method[a] if i in by_method[b]]
        out.append(mcnemar(a, b, [by_method[a][i] for i in shared], [by_method[b][i] for i in shared]))
    return out
