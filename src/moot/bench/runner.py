"""Run a benchmark: bounded concurrency, results appended as JSON lines, resumable.

Layout of ``--out DIR``:

* ``run.json``: the configuration (task, model, seed, temperature, max_tokens,
  methods). A resume must use the same task, model, seed, temperature and
  max_tokens; ``n`` may grow (the item order is a prefix-stable seeded
  sample) and methods may be added.
* ``results.jsonl``: one :class:`~moot.bench.records.ItemRecord` per line,
  appended and flushed as each (item, method) unit finishes. A unit that is
  still running when the run is interrupted is not written, so ``--resume``
  reruns exactly the units without a line: nothing repeated, nothing lost. A
  last line cut short by a crash mid-write is dropped (and truncated away)
  on resume; a damaged line elsewhere is an error, never silently skipped.

A preset runs under its production deadline unless ``deadlines`` sets another (see
:mod:`moot.bench.methods`). A unit whose debate fell back is written with its ``fallback``
reason, kept out of the scores, and run again by ``--resume`` (its new line replaces it),
so a resume with a lifted deadline (``--deadline answer=60``) finishes the run.

A unit whose model call fails after its retries (:class:`~moot.errors.RunError`),
or a preset whose backend failed on any turn, is not recorded either: an outage
is never scored as a wrong answer. Failed units are retried within the same
invocation, after the other units, up to ``unit_retries`` more passes with a
growing pause, so one ``--resume`` after transient faults finishes the run;
what still fails is listed in :attr:`BenchRun.failures` for the next
``--resume``. After ``max_errors`` failures in a row the run stops taking new
units and does not retry (a dead endpoint should not burn through the list); a
unit failed by :class:`~moot.errors.EndpointDown` (the endpoint answered nothing for a
while, :mod:`moot.models.limits`) stops the run at once, its units left for ``--resume``.

Only one process may write to an output directory: :func:`run_bench` holds an
exclusive lock on ``DIR/.lock`` (``fcntl.flock``, released by the OS if the
process dies) and a second one fails at once with a :class:`UsageError`. On
systems without ``fcntl`` there is no lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, TextIO

import orjson

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no lock
    fcntl = None  # type: ignore[assignment]

from pydantic import BaseModel, Field, ValidationError, field_validator

import moot.redact as redact

from ..deadline import Deadline, timeout_scope
from ..errors import EndpointDown, ResourceError, RunError, UsageError, error_text
from ..models.base import Model, Usage, effective_cap, model_info
from ..models.cache import open_cache, with_cache
from ..models.pricing import spec_pricing
from ..models.retry import RetryPolicy
from ..observe import PipelineEvent, RunHandle, RunStart, observed
from ..protocol import MAX_TOKENS_PER_CALL, HistorySpec
from .methods import MethodContext, MethodSpec, matched_vote, parse_method, run_method
from .records import ItemRecord
from .tasks import Item, Task, make_task

_log = logging.getLogger("moot")

__all__ = [
    "MAX_ITEMS",
    "RESULTS_FILE",
    "RUN_FILE",
    "read_run_file",
    "BenchConfig",
    "BenchRun",
    "RunObserver",
    "UnitRunner",
    "bench_title",
    "check_deadlines",
    "check_history",
    "expand_methods",
    "load_records",
    "parse_history",
    "run_bench",
    "run_outcome",
]

MAX_ITEMS = 100_000
"""Upper bound of ``n``: generated tasks build every item up front, so a huge ``n`` would hang."""
RESULTS_FILE = "results.jsonl"
RUN_FILE = "run.json"
LOCK_FILE = ".lock"
_FINGERPRINT = (
    "task",
    "model",
    "seed",
    "temperature",
    "max_tokens",
    "exclude_conflict",
    "judging",
    "history",
)
# Fields older run.json files do not have. A resume may not change the judging options (the
# audit's figures would mix audited and unaudited units) nor the history (units with and
# without the budget would be one method's figures).
_FINGERPRINT_DEFAULTS: dict[str, Any] = {"exclude_conflict": False, "judging": {}, "history": None}


class BenchConfig(BaseModel):
    """Everything that defines a benchmark run."""

    task: str
    """The task spec, e.g. ``arithmetic`` or ``gsm8k:data/test.jsonl``."""
    methods: list[str]
    """Method specs as given (``--matched`` votes are added by :func:`expand_methods`)."""
    model: str = "local"
    """The model spec."""
    n: int | None = Field(100, ge=1, le=MAX_ITEMS)
    """Items; None takes every item of a data file."""
    seed: int = Field(0, ge=0)
    """Item sample and call seeds."""
    concurrency: int = Field(4, ge=1)
    """Units (item x method) in flight at once."""
    temperature: float | None = None
    """Sampling temperature for every call; None keeps the backend's default."""
    max_tokens: int | None = Field(256, ge=1, le=MAX_TOKENS_PER_CALL)
    """Cap on generated tokens per plain call; None keeps the backend's."""
    matched: bool = False
    """Add a ``vote:K`` matched to each debate method: as many calls (``matched_by: calls``) or as
    much money (``matched_by: cost``)."""
    matched_by: Literal["calls", "cost"] = "calls"
    """What a matched vote matches: the debate's calls, or its cost (``--matched-by cost``: K is
    the debate's estimated cost per item over one call's, :mod:`moot.bench.costs`; it differs from
    the calls when prompts grow with the history or the personas' models are priced differently)."""
    matched_votes: dict[str, int] = Field(default_factory=dict)
    """For ``matched_by: cost``, each debate method's K, set once when the run starts (so a resume
    and a report rebuild the same methods)."""
    exclude_conflict: bool = False
    """ABSA: leave out aspects labelled ``conflict`` (counted in the report) instead of scoring the class."""
    max_errors: int = Field(10, ge=1)
    """Stop taking new units after this many failed ones in a row (a dead endpoint)."""
    budget_usd: float | None = Field(None, gt=0)
    """US dollars this invocation may spend (``--budget-usd``): no unit starts that could pass
    it (:class:`_Budget`); the units left are left for ``--resume``, which may give a new budget.
    Not part of a resume's fingerprint."""
    deadlines: dict[str, float] = Field(default_factory=dict)
    """Seconds each unit of a preset may take, by preset (``"*"``: every preset); a preset
    not named keeps its production deadline. Not part of a resume's fingerprint: a resume
    may lift it."""
    judging: dict[str, bool] = Field(default_factory=dict)
    """The deciding steps' options for every preset method (``blind``, ``shuffle``, ``audit``,
    ``swap_robust``: docs/judging.md); unset keeps each preset's."""
    history: HistorySpec | None = None
    """How much history each prompt carries (``--history window:N|summarize:N``): a society's
    agents keep the latest exchanges that fit ``max_tokens`` (``window`` only), a preset gets it
    as its protocol's ``history`` (:mod:`moot.bench.methods`). None: only the model's known
    window bounds a prompt. Part of a resume's fingerprint."""

    @field_validator("judging")
    @classmethod
    def _judging_keys(cls, value: dict[str, bool]) -> dict[str, bool]:
        known = ("blind", "shuffle", "audit", "swap_robust")
        for key in value:
            if key not in known:
                raise ValueError(f"unknown judging option {key!r}; known: {', '.join(known)}")
        return value

    @field_validator("deadlines")
    @classmethod
    def _positive_deadlines(cls, value: dict[str, float]) -> dict[str, float]:
        for name, seconds in value.items():
            if not seconds > 0:
                raise ValueError(f"the deadline of {name} must be positive seconds, got {seconds!r}")
        return value


def _field_errors(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:4]:
        field = ".".join(str(p) for p in err["loc"]) or "(the object)"
        if err["type"] == "missing":
            parts.append(f"field {field!r} is missing")
        else:
            parts.append(f"field {field!r}: {err['msg']} (found {err.get('input')!r})")
    return "; ".join(parts)


def read_run_file(path: Path) -> dict[str, Any]:
    """A bench folder's ``run.json``, checked: a JSON object whose settings make a :class:`BenchConfig`.

    Raises:
        UsageError: unreadable, not JSON, not an object, or a setting missing or of the wrong
            type (the file and the field named).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else "not UTF-8 text"
        raise UsageError(f"cannot read {path}: {reason}") from None
    if not text.strip():
        raise UsageError(f"{path} is empty (a bench run.json holds the run's settings)")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path} is not valid JSON ({exc.msg}, line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path} must hold a JSON object (the run's settings), not a {type(data).__name__}")
    try:
        BenchConfig.model_validate({k: v for k, v in data.items() if k in BenchConfig.model_fields})
    except ValidationError as exc:
        raise UsageError(f"{path}: {_field_errors(exc)} (not a run.json as moot bench writes it)") from None
    return data


def expand_methods(
    methods: Iterable[str], matched: bool = False, votes: Mapping[str, int] | None = None
) -> list[MethodSpec]:
    """Parse method specs, drop duplicates, and add matched votes after each debate if asked.

    ``votes``: each debate's matched K when it is not its call count (``matched_by: cost``).

    Raises:
        UsageError: a malformed or unknown method, or none at all.
    """
    out: dict[str, MethodSpec] = {}
    for text in methods:
        if not text.strip():
            continue
        spec = parse_method(text)
        out.setdefault(spec.name, spec)
        vote = matched_vote(spec, (votes or {}).get(spec.name)) if matched else None
        if vote is not None:
            out.setdefault(vote.name, vote)
    if not out:
        raise UsageError("no methods given; e.g. --methods single,vote:3,society:3:2")
    return list(out.values())


def match_by_cost(config: BenchConfig, task: Task) -> BenchConfig:
    """``config`` with each debate's cost-matched K set (``matched_by: cost``), if not set yet.

    Raises:
        UsageError: the model has no price (or a zero one): nothing to match.
    """
    if not config.matched or config.matched_by != "cost" or config.matched_votes:
        return config
    from .costs import estimate_methods

    items = task.items(config.n, config.seed)
    specs = expand_methods(config.methods)
    single = parse_method("single")
    costs = estimate_methods([single, *specs], task, items, config.model, config.max_tokens, config.history)
    one = costs[0].cost_usd
    if not one:
        raise UsageError(f"--matched-by cost needs a priced model; {config.model} costs {one}")
    votes = {
        spec.name: max(1, round((cost.cost_usd or 0.0) / one))
        for spec, cost in zip(specs, costs[1:], strict=True)
        if spec.is_debate
    }
    return config.model_copy(update={"matched_votes": votes})


_HISTORY = re.compile(r"(window|summarize):([1-9][0-9]{0,8})")


def parse_history(text: str) -> HistorySpec:
    """``--history window:N`` or ``summarize:N`` (N: tokens of history each prompt may carry).

    Raises:
        UsageError: anything else (another strategy, N missing, 0, negative or not an integer).
    """
    found = _HISTORY.fullmatch(text)
    if found is None:
        raise UsageError(
            f"--history {text!r}: use window:N or summarize:N, N the tokens of history each prompt "
            "may carry (a positive integer); summarize is for presets only"
        )
    return HistorySpec(strategy="window" if found[1] == "window" else "summarize", max_tokens=int(found[2]))


def check_history(history: HistorySpec | None, specs: Iterable[MethodSpec]) -> None:
    """A ``summarize`` history is for presets only: a society's agents each hold their own chat.

    Raises:
        UsageError: ``summarize`` with a ``society:N:T`` method (the first one named).
    """
    if history is None or history.strategy != "summarize":
        return
    for spec in specs:
        if spec.kind == "society":
            raise UsageError(
                f"--history summarize:{history.max_tokens}: method {spec.name} cannot summarize (each "
                "society agent holds its own chat): summarize needs a preset; use window:N for societies"
            )


def check_deadlines(deadlines: dict[str, float], specs: Iterable[MethodSpec]) -> None:
    """Every method a deadline names is a preset of this run.

    Raises:
        UsageError: a deadline for a method that is not run, or that is not a preset (plain
            methods have no fallback: the invocation's ``--timeout`` bounds them).
    """
    kinds = {s.name: s.kind for s in specs}
    for name in deadlines:
        if name == "*":
            continue
        if name not in kinds:
            raise UsageError(f"--deadline {name}=...: {name} is not one of the methods ({', '.join(kinds)})")
        if kinds[name] != "preset":
            raise UsageError(
                f"--deadline {name}=...: only presets have a deadline (a debate that falls back); "
                "bound the whole invocation with --timeout"
            )


def load_records(path: Path, *, repair: bool = False, trust_edited: bool = False) -> list[ItemRecord]:
    """Read ``results.jsonl``; of an (item, method)'s lines, the first that is not a fallback.

    A resume's rerun of a fallen-back unit replaces it; a unit that only fell back keeps its last.

    Args:
        path: the file.
        repair: truncate an incomplete last line (a write cut short by a crash).
        trust_edited: use lines edited after they were recorded (their ``sha256`` does not
            match) instead of refusing them.

    Raises:
        UsageError: a complete line that is not a valid record, or edited lines (unless trusted).
    """
    if not path.is_file():
        return []
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end < len(data) and repair:
        with path.open("r+b") as fh:
            fh.truncate(end)
    records: dict[tuple[str, str], ItemRecord] = {}
    edited: list[int] = []
    for number, line in enumerate(data[:end].splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = ItemRecord.model_validate_json(line)
        except ValueError as err:
            raise UsageError(
                f"{path}:{number}: not a valid result line ({str(err).splitlines()[0]})"
            ) from None
        if record.edited:
            edited.append(number)
        key = (record.item_id, record.method)
        if key not in records or records[key].fallback is not None:
            records[key] = record
    if edited and not trust_edited:
        shown = ", ".join(map(str, edited[:5])) + (", ..." if len(edited) > 5 else "")
        raise UsageError(
            f"{path}: {len(edited)} result line(s) were edited after they were recorded (line {shown}: "
            "the sha256 each line carries does not match it); --trust-edited uses them anyway"
        )
    if edited:
        _log.warning(
            "%s: %d result line(s) edited after they were recorded, used (--trust-edited)", path, len(edited)
        )
    return list(records.values())


class RunObserver:
    """Hooks for progress display; the default does nothing."""

    def started(self, total: int, done: int) -> None:
        """The run starts: ``total`` units, ``done`` of them already in the results file."""

    def finished_unit(self, record: ItemRecord) -> None:
        """A unit finished and was written."""

    def failed_unit(self, item_id: str, method: str, error: str) -> None:
        """A unit failed (not written; a resume retries it)."""


class UnitRunner(Protocol):
    """Runs units somewhere else (:mod:`moot.scale`: on Ray workers); the runner keeps the rest."""

    @property
    def slots(self) -> int:
        """Units to keep in flight."""

    @property
    def model_name(self) -> str:
        """The name the backend reports."""

    async def run_unit(self, spec: MethodSpec, item: Item) -> ItemRecord:
        """Run one unit, as :func:`~moot.bench.methods.run_method` (raising ``RunError`` the same)."""

    def counts(self) -> list[dict[str, Any]]:
        """Per-worker counts so far (kept in the run's summary)."""


@dataclass
class BenchRun:
    """The outcome of :func:`run_bench`.

    Attributes:
        config: the configuration.
        specs: the methods, matched votes included.
        items: the items, in run order.
        records: every record for these items and methods (resumed ones included), in item order.
        resumed: records read back from an earlier run.
        failures: ``(item_id, method, error)`` of units that failed.
        stopped: True when the run stopped early after ``max_errors`` failures in a row.
        retried: unit attempts repeated by the retry passes of this invocation.
        timed_out: True when ``timeout_s`` ended this invocation.
        wall_s: elapsed seconds of this invocation.
        model_name: the name the backend reports (``config.model`` is the spec asked for).
        data_notes: what reading the data left out, and why (the task's notes).
        workers: per-worker counts when the units ran on Ray workers (:mod:`moot.scale`).
        endpoints: per model endpoint, its concurrency limit (now, lowest, highest), requests sent,
            429/503 answers and time-outs (:meth:`moot.models.Model.endpoint_stats`).
    """

    config: BenchConfig
    specs: list[MethodSpec]
    items: list[Item]
    records: list[ItemRecord] = field(default_factory=list)
    resumed: int = 0
    failures: list[tuple[str, str, str]] = field(default_factory=list)
    stopped: bool = False
    budget_left: int = 0
    """Units not started because they could pass ``--budget-usd`` (left for ``--resume``)."""
    retried: int = 0
    timed_out: bool = False
    wall_s: float = 0.0
    model_name: str = ""
    data_notes: tuple[str, ...] = ()
    workers: list[dict[str, Any]] = field(default_factory=list)
    endpoints: list[dict[str, object]] = field(default_factory=list)

    @property
    def halted(self) -> bool:
        """True once no new unit may start: failures in a row, or the budget."""
        return self.stopped or self.budget_left > 0

    @property
    def complete(self) -> bool:
        """True when every item has a record for every method (fallen-back units included)."""
        return len(self.records) == len(self.items) * len(self.specs)

    @property
    def fell_back(self) -> list[ItemRecord]:
        """The units whose debate fell back: recorded, never scored (see :mod:`moot.bench.summary`)."""
        return [r for r in self.records if r.fallback is not None]


class _Budget:
    """``--budget-usd`` for a bench: a unit starts only if its cost fits what is left.

    A unit reserves 1.25x the costliest finished unit of its method (its prompts vary by item);
    the first unit of a method, whose cost nothing tells yet, runs alone and may take what is
    left. When a unit does not fit, no more units start: they are left for ``--resume``.
    """

    MARGIN = 1.25

    @classmethod
    def of(cls, config: BenchConfig) -> _Budget | None:
        """The budget of ``config`` (None without ``--budget-usd``)."""
        return cls(config.budget_usd) if config.budget_usd is not None else None

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self.spent = 0.0
        self.held = 0.0
        self.in_flight = 0
        self.worst: dict[str, float] = {}
        self._changed = asyncio.Condition()

    async def reserve(self, method: str) -> float | None:
        """The US dollars held for one unit of ``method``, or None when it could pass the budget."""
        async with self._changed:
            while True:
                free = self.limit - self.spent - self.held
                worst = self.worst.get(method)
                if worst is None and self.in_flight:
                    await self._changed.wait()  # the first of its method runs alone
                    continue
                need = free if worst is None else worst * self.MARGIN
                if free <= 0 or need > free:
                    if self.in_flight:  # their unused reservations come back when they end
                        await self._changed.wait()
                        continue
                    return None
                self.held += need
                self.in_flight += 1
                return need

    async def settle(self, method: str, held: float, cost: float | None, *, measured: bool) -> None:
        """A unit ended (or never started): its reservation goes back and its cost is counted."""
        async with self._changed:
            self.held -= held
            self.in_flight -= 1
            self.spent += cost or 0.0
            if measured and cost is not None:
                self.worst[method] = max(self.worst.get(method, 0.0), cost)
            self._changed.notify_all()


async def _next_unit(
    queue: deque[tuple[Item, MethodSpec]], budget: _Budget | None, run: BenchRun
) -> tuple[Item, MethodSpec, float] | None:
    """The next unit to start and the US dollars held for it; None when nothing more starts."""
    while queue:
        item, spec = queue[0]
        if budget is None:
            queue.popleft()
            return item, spec, 0.0
        held = await budget.reserve(spec.name)
        if held is None:  # it could pass the budget: nothing more starts (left for --resume)
            run.budget_left = max(run.budget_left, len(queue))
            return None
        if queue and queue[0] == (item, spec):
            queue.popleft()
            return item, spec, held
        await budget.settle(spec.name, held, 0.0, measured=False)  # another worker took it meanwhile
    return None


async def _settle(budget: _Budget | None, spec: MethodSpec, held: float, record: ItemRecord | None) -> None:
    if budget is not None:
        cost = record.cost_usd if record is not None else 0.0
        await budget.settle(spec.name, held, cost, measured=record is not None)


def _check_resume(out: Path, config: BenchConfig, resume: bool) -> None:
    results, meta = out / RESULTS_FILE, out / RUN_FILE
    has_results = results.is_file() and results.stat().st_size > 0
    if has_results and not resume:
        raise UsageError(f"{out} already holds results; pass --resume to continue that run, or another --out")
    if resume and meta.is_file():
        old = read_run_file(meta)
        for key in _FINGERPRINT:
            mine = getattr(config, key)
            if isinstance(mine, BaseModel):  # as run.json holds it
                mine = mine.model_dump(mode="json")
            # run.json holds the model spec with its URL credentials masked: compare masked forms.
            if redact.data(old.get(key, _FINGERPRINT_DEFAULTS.get(key))) != redact.data(mine):
                raise UsageError(
                    f"--resume with a different {key}: the run in {out} used {old.get(key)!r}, "
                    f"this one {redact.data(mine)!r}"
                )


@contextlib.contextmanager
def _out_lock(out: Path) -> Iterator[None]:
    """Hold ``out/.lock`` exclusively while a run writes there; refuse if another process does."""
    if fcntl is None:  # pragma: no cover
        yield
        return
    path = out / LOCK_FILE
    with path.open("a+", encoding="utf-8") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "unknown"
            raise UsageError(
                f"another moot bench (pid {holder}) is writing to {out}; wait for it to finish, "
                "or choose another --out"
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        try:
            yield
        finally:
            path.unlink(missing_ok=True)  # while still locked: a waiting process finds no stale file
            fcntl.flock(fh, fcntl.LOCK_UN)


def bench_title(config: BenchConfig, n_items: int) -> str:
    """A bench run's title in lists: task, methods and sample size (``arithmetic · single, vote:3 · n=6``).

    ``n_items`` is the number of items the run has, not the ``--n`` asked for: ``--n 100`` on a
    file of 20 items is a run of 20.
    """
    return f"{config.task} · {', '.join(config.methods)} · n={n_items}"


def run_outcome(run: BenchRun) -> dict[str, Any]:
    """How a bench run ends for its observers: ``status``, ``usage``, ``summary``, ``score``, ``error``.

    ``complete`` when every unit has a record, ``fell_back`` when some of them fell back (not
    scored), else ``failed`` (resume to finish it); ``failed`` too when every reply of a method
    was blank (nothing was measured).
    """
    from .summary import blank_hint, judge_audit, same_samples_hint, summarize

    by_method: dict[str, list[ItemRecord]] = {s.name: [] for s in run.specs}
    for r in run.records:
        by_method.setdefault(r.method, []).append(r)
    summaries = [summarize(name, recs) for name, recs in by_method.items()]
    accuracy = {m.method: m.accuracy for m in summaries if m.n}  # fallen-back units are not scored
    usage = Usage.sum_of(
        Usage(
            calls=r.calls,
            prompt_tokens=r.prompt_tokens,
            completion_tokens=r.completion_tokens,
            cost_usd=r.cost_usd,
            cost_source=r.cost_source,
            cost_note=None if r.cost_usd is not None else f"no price for some calls of {r.method}",
        )
        for r in run.records
    )
    expected = len(run.items) * len(run.specs)
    summary: dict[str, Any] = {
        "accuracy": accuracy,
        "items": len(run.items),
        "methods": [s.name for s in run.specs],
        "units": len(run.records),
        "expected_units": expected,
        "failures": len(run.failures),
        "model_name": run.model_name,
    }
    if run.workers:  # units run on Ray workers: how many each did, and which died
        summary["workers"] = run.workers
    if run.endpoints:  # each model endpoint's concurrency limit range, 429s and time-outs
        summary["endpoints"] = run.endpoints
    if run.config.judging.get("audit") or run.config.judging.get("swap_robust"):
        summary["judge_audit"] = {name: judge_audit(recs) for name, recs in by_method.items()}
    missing = expected - len(run.records)
    fell_back = len(run.fell_back)
    if fell_back:
        summary["fell_back"] = fell_back
    blank = {m.method: m.replies_blank for m in summaries if m.replies_blank}
    if blank:
        summary["blank_replies"] = blank
    shortened = {m.method: m.history_shortened for m in summaries if m.history_shortened}
    if shortened:  # calls whose prompt left out earlier history (--history, or the model's window)
        summary["history_shortened"] = shortened
    same = same_samples_hint(summaries, run.config.temperature)
    if same is not None:  # run_bench says it once on the moot logger
        summary["same_samples"] = same
    status = ("fell_back" if fell_back else "complete") if run.complete else "failed"
    error = None if run.complete else f"{missing} item/method units missing; resume to finish them"
    if run.budget_left:
        summary["budget_left"] = run.budget_left
        error = f"--budget-usd reached: {run.budget_left} units not started; {error}"
    nothing = blank_hint(summaries)
    if nothing is not None:
        status, error = "failed", nothing if error is None else f"{error}; {nothing}"
    return {
        "status": status,
        "usage": usage,
        "summary": summary,
        "score": max((a for a in accuracy.values() if a is not None), default=None),
        "error": error,
    }


def _append(fh: TextIO, line: str, results: Path, *, written: int) -> None:
    """Write one unit's line (its record's JSON) to ``results``.

    Raises:
        ResourceError: disk full, quota or permission: the units before it are kept, and the
            message names the file and says how to go on.
    """
    try:
        fh.write(line + "\n")
        fh.flush()
    except OSError as err:
        with contextlib.suppress(OSError):  # the buffer that failed would fail again at close
            fh.close()
        raise ResourceError(
            f"cannot write {results}: {err.strerror or err}; {written} units are written to "
            f"{results.parent}: free space and continue with --resume {results.parent}",
            path=str(results),
        ) from None


def _unit_event(record: ItemRecord, line: str | None = None) -> PipelineEvent:
    """The ``unit_completed`` event of ``record`` (``line``: its JSON, read back for the data)."""
    # The JSON line read back is the record's JSON-mode dump, the same keys and values in the
    # same order, at half the cost of serialising the record a second time.
    data = orjson.loads(line) if line is not None else record.model_dump(mode="json")
    return PipelineEvent(
        kind="unit_completed",
        unit=record.item_id,
        part=record.method,
        correct=record.correct,
        data=data,
    )


def _select(records: list[ItemRecord], items: list[Item], specs: list[MethodSpec]) -> list[ItemRecord]:
    by_key = {(r.item_id, r.method): r for r in records}
    return [by_key[(i.id, s.name)] for i in items for s in specs if (i.id, s.name) in by_key]


async def run_bench(
    config: BenchConfig,
    *,
    model: Model | None = None,
    out: str | Path,
    resume: bool = False,
    task: Task | None = None,
    observer: RunObserver | None = None,
    policy: RetryPolicy | None = None,
    timeout_s: float | None = None,
    unit_retries: int = 2,
    retry_pause: float = 2.0,
    units: UnitRunner | None = None,
    store: Any = None,
    continues: str | None = None,
    cache: Any = None,
    trust_edited: bool = False,
) -> BenchRun:
    """Run (or continue) a benchmark and return every record of its items and methods.

    The benchmark is one run (kind ``bench``) for its observers (:mod:`moot.observe`), started
    once ``out`` is checked and locked (a refused run is no run): ``bench_started``, each unit's
    record as ``unit_completed`` (resumed ones too) and each failure as ``unit_failed``; it ends
    ``complete``, or ``failed`` with the units missing (see :func:`run_outcome`).

    Args:
        config: what to run.
        model: the backend (resolved by the caller, so tests can pass a test double).
        out: the output directory.
        resume: continue the run in ``out`` (see the module docstring).
        task: the task; default ``make_task(config.task)``.
        observer: progress hooks.
        policy: retry policy for plain calls.
        timeout_s: seconds this invocation may take; at the deadline the units in flight are
            dropped (not written) and the run returns incomplete (``timed_out``). A unit's own
            deadline (a preset's, ``config.deadlines``) is separate: it ends the debate, which
            is written as fallen back.
        unit_retries: passes over the failed units after the first one (see the module docstring).
        retry_pause: seconds before the first retry pass (doubled, tripled... for later ones).
        units: run the units there instead of with ``model`` here (then ``model`` is not used
            and ``units.slots`` units are in flight).
        store: record the benchmark in a run store: a store file, an open
            :class:`~moot.runs.RunStore`, True for ``$MOOT_STORE`` / ``./.moot/runs.db``, or None
            (the default) for nothing.
        continues: the id of the stored run this one continues (``moot bench --resume``).
        cache: answer ``model``'s requests from a response cache (:mod:`moot.models.cache`): a
            cache file, a ``ResponseCache``, or True for ``$MOOT_CACHE`` / ``./.moot/cache.db``;
            None (the default) leaves ``model`` as it is.
        trust_edited: with ``resume``, use result lines edited after they were recorded (their
            ``sha256`` does not match) instead of refusing them (:func:`load_records`).

    Raises:
        UsageError: bad task or methods, results in ``out`` without ``resume``, a resume with a
            different configuration, a damaged or edited results file, or another process writing to
            ``out``.
    """
    started = time.perf_counter()
    deadline = Deadline.within(timeout_s)  # converted once, before anything runs
    if model is None and units is None:
        raise TypeError("run_bench needs a model, or units to run them elsewhere")
    if model is not None and cache is not None:
        model = with_cache(model, open_cache(cache))
    out = Path(out)
    observer = observer or RunObserver()
    task = task or make_task(config.task, exclude_conflict=config.exclude_conflict)
    config = match_by_cost(config, task)
    specs = expand_methods(config.methods, config.matched, config.matched_votes)
    if config.budget_usd is not None and spec_pricing(config.model)[0].price is None:
        raise UsageError(f"--budget-usd needs the model's price: {spec_pricing(config.model)[0].note}")
    check_deadlines(config.deadlines, specs)
    check_history(config.history, specs)
    items = task.items(config.n, config.seed)
    _check_resume(out, config, resume)
    if resume:  # an edited line is refused before any work (and read again, trusted, below)
        load_records(out / RESULTS_FILE, trust_edited=trust_edited)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:  # a file where the directory should be, no permission...
        raise UsageError(f"cannot use --out {out}: {err.strerror or err}") from None
    with _out_lock(out):  # held until the last line is written
        recorded = config.model_dump(mode="json") | {"out": str(out.resolve()), "timeout_s": timeout_s}
        if model is not None:  # what compare shows when two runs differ only there
            recorded |= {
                "endpoint": model_info(model).get("endpoint"),
                # What limits it: --model-concurrency / ?max_concurrency=N, or the adaptive limit.
                "model_concurrency": effective_cap(model) or "adaptive",
            }
        title = bench_title(config, len(items))
        start = RunStart(kind="bench", title=title, model=config.model, config=recorded, continues=continues)
        with observed(start, store=store) as handle:
            run = await _run(
                config, model, out, resume, task, observer, policy, deadline,
                unit_retries, retry_pause, units, specs, items, handle,
            )  # fmt: skip
            if units is not None and not run.workers:
                run.workers = units.counts()
            if model is not None and units is None:
                run.endpoints = model.endpoint_stats()
            outcome = run_outcome(run)
            handle.end(result=None, **outcome)
    if "same_samples" in outcome["summary"]:
        _log.warning("%s", outcome["summary"]["same_samples"])
    run.wall_s = time.perf_counter() - started
    return run


async def _run(
    config: BenchConfig,
    model: Model | None,
    out: Path,
    resume: bool,
    task: Task,
    observer: RunObserver,
    policy: RetryPolicy | None,
    deadline: Deadline | None,
    unit_retries: int,
    retry_pause: float,
    units: UnitRunner | None,
    specs: list[MethodSpec],
    items: list[Item],
    handle: RunHandle,
) -> BenchRun:
    """:func:`run_bench` inside its observed run, ``out`` locked."""
    model_name = units.model_name if units is not None else model.name if model is not None else ""
    meta = config.model_dump(mode="json") | {
        "expanded_methods": [s.name for s in specs],
        "model_name": model_name,
    }
    # No credential in the file: a key in the model's URL is masked (a resume asks for --model again).
    (out / RUN_FILE).write_text(redact.text(json.dumps(meta, indent=2)) + "\n", encoding="utf-8")

    results = out / RESULTS_FILE
    previous = load_records(results, repair=True, trust_edited=True) if resume else []  # checked above
    done = {(r.item_id, r.method) for r in previous if r.fallback is None}  # fallen back: run again
    wanted = {(i.id, s.name) for i in items for s in specs}
    run = BenchRun(
        config=config,
        specs=specs,
        items=items,
        resumed=len(done & wanted),
        model_name=model_name,
        data_notes=task.data_notes,
    )
    pending = [(i, s) for i in items for s in specs if (i.id, s.name) not in done]
    handle.emit(PipelineEvent(kind="bench_started", data={"total": len(wanted), "done": run.resumed}))
    for record in previous:  # the resumed units are this run's too
        if (record.item_id, record.method) in done & wanted:
            handle.emit(_unit_event(record))
    observer.started(len(wanted), run.resumed)
    if units is not None:
        execute, width = units.run_unit, units.slots
    else:
        assert model is not None
        ctx = MethodContext(
            model=model,
            task=task,
            seed=config.seed,
            temperature=config.temperature,
            max_tokens=config.max_tokens,
            policy=policy or RetryPolicy(),
            deadlines=dict(config.deadlines),
            judging=dict(config.judging),
            history=config.history,
        )
        ctx.share_first_round(pending)

        async def execute(spec: MethodSpec, item: Item) -> ItemRecord:
            return await run_method(spec, item, ctx)

        width = config.concurrency
    fresh: list[ItemRecord] = []
    streak = 0  # failures in a row: a dead endpoint fails every unit, transient faults do not
    budget = _Budget.of(config)

    async def one_pass(
        queue: deque[tuple[Item, MethodSpec]], fh: TextIO
    ) -> list[tuple[Item, MethodSpec, str]]:
        failed: list[tuple[Item, MethodSpec, str]] = []

        async def worker() -> None:
            nonlocal streak
            while not run.halted and (unit := await _next_unit(queue, budget, run)) is not None:
                item, spec, held = unit
                try:
                    record = await execute(spec, item)
                except RunError as err:
                    await _settle(budget, spec, held, None)  # its spend is not known: counted as nothing
                    message = error_text(err)
                    failed.append((item, spec, message))
                    event = {"item_id": item.id, "method": spec.name, "error": message}
                    handle.emit(PipelineEvent(kind="unit_failed", data=event))
                    observer.failed_unit(item.id, spec.name, message)
                    streak += 1
                    # An endpoint that answers nothing fails every unit alike: stop at once.
                    if streak >= config.max_errors or isinstance(err, EndpointDown):
                        run.stopped = True
                    continue
                streak = 0
                await _settle(budget, spec, held, record)
                record = record.sealed()  # an edit of its line is seen by --resume, --replay, reports
                line = record.model_dump_json()
                _append(fh, line, results, written=len(previous) + len(fresh))
                fresh.append(record)
                handle.emit(_unit_event(record, line))
                observer.finished_unit(record)

        try:
            async with asyncio.TaskGroup() as group:
                for _ in range(min(width, max(1, len(queue)))):
                    group.create_task(worker())
        except BaseExceptionGroup as group_error:  # a usage error or a bug: stop, and say which
            raise group_error.exceptions[0] from None
        return failed

    with results.open("a", encoding="utf-8") as fh:
        try:
            async with timeout_scope(deadline):
                for attempt in range(1 + unit_retries):
                    failed = await one_pass(deque(pending), fh)
                    run.failures = [(i.id, s.name, message) for i, s, message in failed]
                    if not failed or run.halted or attempt == unit_retries:
                        break
                    # Transient faults (a restart, a rate limit) often clear within seconds.
                    await asyncio.sleep(retry_pause * (attempt + 1))
                    run.retried += len(failed)
                    pending = [(i, s) for i, s, _ in failed]
        except TimeoutError:
            run.timed_out = True

    run.records = _select(previous + fresh, items, specs)
    return run
