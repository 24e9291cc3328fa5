"""Two runs side by side: ``moot runs compare A B`` and the viewer's compare page.

* Two **bench** runs on the same task: the runs' settings and usage side by
  side, per-method accuracy of each run and the difference, and for every
  method both ran a paired McNemar test on the items both finished (the
  statistics of :mod:`moot.bench.stats`), with the difference on those shared
  items and the items only one run got right.
* Two **debates** (``moot run``): topic, protocol, final answer, decision,
  fallback, rounds and usage, row by row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..bench.records import ItemRecord
from ..bench.stats import McNemar, mcnemar
from ..bench.summary import scored
from ..errors import UsageError
from ..runs.store import RunRecord, RunStore
from ..transcript import DebateResult
from .records import bench_records, load_result, run_turns

__all__ = ["BenchComparison", "DebateComparison", "MethodComparison", "compare_runs", "settings_diff"]

_NOT_SETTINGS = ("out", "argv")
"""Recorded values that differ between any two runs without saying how they were run."""


def _flat(data: Any, prefix: str = "") -> dict[str, str]:
    """``{"protocol.rounds": "2", ...}``: every leaf of nested JSON data under a dotted name."""
    if isinstance(data, dict) and data:
        out: dict[str, str] = {}
        for key, value in data.items():
            out |= _flat(value, f"{prefix}.{key}" if prefix else str(key))
        return out
    if isinstance(data, list) and data and not all(isinstance(v, str | int | float) for v in data):
        return {k: v for i, item in enumerate(data) for k, v in _flat(item, f"{prefix}[{i}]").items()}
    if isinstance(data, list):
        text = ", ".join(map(str, data))
    else:
        text = "-" if data is None else str(data)
    return {prefix: text}


def settings_diff(a: RunRecord, b: RunRecord) -> tuple[list[tuple[str, str, str]], int]:
    """``((setting, A's value, B's value) for every setting that differs, how many are the same)``.

    Settings: the model spec, the moot version and every leaf of the recorded configuration
    (endpoint, protocol, rounds, concurrency, timeout, seed, methods, prompts hash...), by
    dotted name; a setting one run lacks shows as ``-``. The output folder is left out.
    """
    left = {"model": a.model, "moot version": a.moot_version} | _flat(a.config)
    right = {"model": b.model, "moot version": b.moot_version} | _flat(b.config)
    names = list(left) + [k for k in right if k not in left]
    names = [n for n in names if n.split(".")[0] not in _NOT_SETTINGS]
    differ = [
        (n, left.get(n, "-"), right.get(n, "-")) for n in names if left.get(n, "-") != right.get(n, "-")
    ]
    return differ, len(names) - len(differ)


@dataclass(frozen=True)
class MethodComparison:
    """One method in two bench runs.

    Attributes:
        method: the method name.
        a_n: items run A finished with it (0 if A did not run it).
        a_correct: of those, correct.
        b_n: the same for run B.
        b_correct: of those, correct.
        test: McNemar on the items both finished (None when the method is in one run only).
        only_a_items: the shared items A got right and B wrong.
        only_b_items: the shared items B got right and A wrong.
    """

    method: str
    a_n: int
    a_correct: int
    b_n: int
    b_correct: int
    test: McNemar | None
    only_a_items: tuple[str, ...] = ()
    only_b_items: tuple[str, ...] = ()

    @property
    def a_accuracy(self) -> float | None:
        """Accuracy in run A, or None."""
        return self.a_correct / self.a_n if self.a_n else None

    @property
    def b_accuracy(self) -> float | None:
        """Accuracy in run B, or None."""
        return self.b_correct / self.b_n if self.b_n else None

    @property
    def diff(self) -> float | None:
        """B's accuracy minus A's, when both ran the method."""
        if self.a_accuracy is None or self.b_accuracy is None:
            return None
        return self.b_accuracy - self.a_accuracy

    @property
    def shared_diff(self) -> float | None:
        """B's accuracy minus A's on the items both finished: the paired difference McNemar tests."""
        if self.test is None or self.test.n == 0:
            return None
        return (self.test.only_b - self.test.only_a) / self.test.n


@dataclass
class BenchComparison:
    """Two bench runs, method by method."""

    a: RunRecord
    b: RunRecord
    methods: list[MethodComparison] = field(default_factory=list)
    settings: list[tuple[str, str, str]] = field(default_factory=list)
    """``(field, A's value, B's value)``: model, n, seed, status, items, usage, wall time."""
    kind: str = "bench"
    differ: list[tuple[str, str, str]] = field(default_factory=list)
    """Every setting that differs (:func:`settings_diff`)."""
    same: int = 0
    """How many settings are the same."""
    items: list[tuple[str, dict[str, tuple[bool | None, bool | None]]]] = field(default_factory=list)
    """Item by item: ``(item, {method: (A right?, B right?)})`` (None: not run there)."""


@dataclass
class DebateComparison:
    """Two debates, field by field: ``rows`` are ``(field, A's value, B's value)``."""

    a: RunRecord
    b: RunRecord
    rows: list[tuple[str, str, str]] = field(default_factory=list)
    kind: str = "run"
    differ: list[tuple[str, str, str]] = field(default_factory=list)
    """Every setting that differs (:func:`settings_diff`)."""
    same: int = 0
    """How many settings are the same."""
    turns: list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]] = field(default_factory=list)
    """Turn by turn: ``(slot, A's turn, B's turn)``, a slot being ``round N · speaker`` (or the
    judge); a turn is its speaker, text, ok, error and usage (None: no such turn in that run)."""


def _by_method(records: list[ItemRecord]) -> dict[str, dict[str, bool]]:
    out: dict[str, dict[str, bool]] = {}
    for r in scored(records):  # a unit that fell back is not the method's answer: not paired
        out.setdefault(r.method, {})[r.item_id] = r.correct
    return out


def _bench(store: RunStore, a: RunRecord, b: RunRecord) -> BenchComparison:
    if a.config.get("task") != b.config.get("task"):
        raise UsageError(
            f"runs {a.id[:8]} and {b.id[:8]} are on different tasks "
            f"({a.config.get('task')!r} vs {b.config.get('task')!r}): nothing to pair"
        )
    ra, rb = _by_method(bench_records(store, a.id)), _by_method(bench_records(store, b.id))
    left, right = _bench_settings(a, ra), _bench_settings(b, rb)
    out = BenchComparison(a, b, settings=[(k, left[k], right[k]) for k in left])
    out.differ, out.same = settings_diff(a, b)
    item_ids = list(dict.fromkeys([i for m in ra.values() for i in m] + [i for m in rb.values() for i in m]))
    methods = list(ra) + [m for m in rb if m not in ra]
    out.items = [(i, {m: (ra.get(m, {}).get(i), rb.get(m, {}).get(i)) for m in methods}) for i in item_ids]
    for method in list(ra) + [m for m in rb if m not in ra]:
        xa, xb = ra.get(method, {}), rb.get(method, {})
        shared = [i for i in xa if i in xb]
        test = None
        if method in ra and method in rb:
            test = mcnemar(f"A:{method}", f"B:{method}", [xa[i] for i in shared], [xb[i] for i in shared])
        out.methods.append(
            MethodComparison(
                method,
                len(xa),
                sum(xa.values()),
                len(xb),
                sum(xb.values()),
                test,
                only_a_items=tuple(i for i in shared if xa[i] and not xb[i]),
                only_b_items=tuple(i for i in shared if xb[i] and not xa[i]),
            )
        )
    return out


def _usage(record: RunRecord) -> str:
    u = record.usage
    return f"{u.calls} calls · {u.prompt_tokens} prompt + {u.completion_tokens} completion tokens"


def _wall(record: RunRecord) -> str:
    return "-" if record.wall_s is None else f"{record.wall_s:.1f}s"


def _bench_settings(record: RunRecord, units: dict[str, dict[str, bool]]) -> dict[str, str]:
    cfg = record.config
    items = {i for by_item in units.values() for i in by_item}
    return {
        "status": record.status,
        "model": record.model,
        "n": str(cfg.get("n")),
        "seed": str(cfg.get("seed")),
        "items run": str(len(items)),
        "units run": str(sum(len(by_item) for by_item in units.values())),
        "usage": _usage(record),
        "wall": _wall(record),
    }


def _debate_rows(result: DebateResult | None, record: RunRecord) -> dict[str, str]:
    rows = {
        "status": record.status,
        "topic": record.title,
        "model": record.model,
        "usage": _usage(record),
        "wall": _wall(record),
    }
    if result is None:
        return rows | {"final answer": "(no result recorded)"}
    d = result.decision
    return rows | {
        "protocol": result.protocol,
        "final answer": result.final_answer or "(none)",
        "decision": "-" if d is None else f"{d.label} ({d.strategy}, confidence {d.confidence})",
        "fallback": result.fallback or "-",
        "rounds": str(len(result.rounds)) + (" (stopped early)" if result.stopped_early else ""),
        "failed turns": str(result.failed_turns),
    }


def _turn_slots(store: RunStore, record: RunRecord) -> dict[str, dict[str, Any]]:
    """A debate's turns by slot (``round 1 · affirmative``, ``judge``), from its stored events."""
    out: dict[str, dict[str, Any]] = {}
    turns = run_turns(store, record)
    several = len({d for d, _ in turns}) > 1  # an ABSA or arbitration run holds several debates
    for debate_id, turn in turns:
        if turn.phase == "judge":
            slot = "verdict · " + turn.speaker
        elif turn.phase == "moderator":
            slot = f"round {turn.round} · moderator"
        else:
            slot = f"round {turn.round} · {turn.speaker}"
        if several:
            slot = f"{debate_id[:8]} · {slot}"
        out[slot] = {
            "speaker": turn.speaker,
            "text": turn.text if turn.ok else (turn.raw or ""),
            "ok": turn.ok,
            "error": turn.error,
            "calls": turn.usage.calls,
            "tokens": turn.usage.total_tokens,
        }
    return out


def _debates(store: RunStore, a: RunRecord, b: RunRecord) -> DebateComparison:
    left = _debate_rows(load_result(store, a.id), a)
    right = _debate_rows(load_result(store, b.id), b)
    keys = list(left) + [k for k in right if k not in left]
    out = DebateComparison(a, b, [(k, left.get(k, "-"), right.get(k, "-")) for k in keys])
    out.differ, out.same = settings_diff(a, b)
    ta, tb = _turn_slots(store, a), _turn_slots(store, b)
    out.turns = [(slot, ta.get(slot), tb.get(slot)) for slot in list(ta) + [k for k in tb if k not in ta]]
    return out


def compare_runs(store: RunStore, a_id: str, b_id: str) -> BenchComparison | DebateComparison:
    """Compare two runs of the same kind (bench or debate).

    Raises:
        UsageError: unknown ids, different kinds, a kind that cannot be compared, or bench runs
            on different tasks.
    """
    a, b = store.get(a_id), store.get(b_id)
    if a.kind != b.kind:
        raise UsageError(f"cannot compare a {a.kind!r} run with a {b.kind!r} run")
    if a.kind == "bench":
        return _bench(store, a, b)
    if a.kind == "run":
        return _debates(store, a, b)
    raise UsageError(f"compare takes two bench runs or two debates (`moot run`), not {a.kind!r} runs")


def as_json(cmp: BenchComparison | DebateComparison) -> dict[str, Any]:
    """The comparison as JSON data."""
    head: dict[str, Any] = {"kind": cmp.kind, "a": cmp.a.id, "b": cmp.b.id}
    head["differ"] = [{"setting": k, "a": x, "b": y} for k, x, y in cmp.differ]
    head["same_settings"] = cmp.same
    if isinstance(cmp, DebateComparison):
        turns = [{"slot": slot, "a": x, "b": y} for slot, x, y in cmp.turns]
        return head | {"rows": [{"field": k, "a": x, "b": y} for k, x, y in cmp.rows], "turns": turns}
    methods = []
    for m in cmp.methods:
        test = m.test
        methods.append(
            {
                "method": m.method,
                "a": {"n": m.a_n, "correct": m.a_correct, "accuracy": m.a_accuracy},
                "b": {"n": m.b_n, "correct": m.b_correct, "accuracy": m.b_accuracy},
                "diff": m.diff,
                "shared_diff": m.shared_diff,
                "mcnemar": None
                if test is None
                else {
                    "shared": test.n,
                    "only_a": test.only_a,
                    "only_b": test.only_b,
                    "p_value": test.p_value,
                    "test": test.test,
                    "only_a_items": list(m.only_a_items),
                    "only_b_items": list(m.only_b_items),
                },
            }
        )
    settings = [{"field": k, "a": x, "b": y} for k, x, y in cmp.settings]
    items = [{"item": i, "methods": {m: {"a": x, "b": y} for m, (x, y) in by.items()}} for i, by in cmp.items]
    return head | {"task": cmp.a.config.get("task"), "settings": settings, "methods": methods, "items": items}
