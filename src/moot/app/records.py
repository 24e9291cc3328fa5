"""Read runs back as the objects the library returns, and as data frames.

The run store keeps a run's ``kind`` and JSON only; what a kind's records mean is read back
here, above the pipelines that own the types (a debate's ``DebateResult``, ABSA's
``FinalResult``, a bench's ``ItemRecord``...).

::

    from moot.runs import open_store
    from moot.app.records import load_result, runs_frame

    store = open_store()                       # ./.moot/runs.db or $MOOT_STORE
    run = store.list(kind="run", limit=1)[0]
    result = load_result(store, run.id)        # a DebateResult, as Debate.run returned it
    df = runs_frame(store)                     # needs the pandas extra
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import MissingDependencyError
from ..runs.readback import load_result as runs_load_result
from ..runs.readback import register_reader
from ..runs.store import RunRecord, RunStore, default_store_path
from ..transcript import DebateResult, Turn

if TYPE_CHECKING:  # pragma: no cover
    import pandas

__all__ = [
    "absa_events",
    "read_store",
    "bench_records",
    "bench_run",
    "list_row",
    "load_result",
    "protocol_of",
    "run_turns",
    "runs_frame",
    "runs_page",
    "turns_frame",
    "units_frame",
]


def protocol_of(record: RunRecord) -> str:
    """What ran, for the list's protocol column: a debate's protocol, a bench's methods, an ABSA mode."""
    cfg = record.config
    if record.kind == "run":
        protocol = cfg.get("protocol")
        return str(protocol.get("name", "")) if isinstance(protocol, dict) else ""
    if record.kind == "bench":
        methods = cfg.get("methods")
        return ", ".join(map(str, methods)) if isinstance(methods, list) else ""
    if record.kind == "absa":
        inner = cfg.get("config")
        return str(inner.get("mode", "")) if isinstance(inner, dict) else ""
    if record.kind == "absa-eval":
        configs = cfg.get("configs")
        return ", ".join(map(str, configs)) if isinstance(configs, dict) else ""
    return ""


def list_row(store: RunStore, record: RunRecord) -> dict[str, Any]:
    """A run as a list gives it (``moot runs list --json``, ``/api/runs``).

    The record without its result, with its wall time, protocol and, while it runs, the usage
    stored so far (its row has usage only at the end).
    """
    if record.status == "running":
        record.usage = store.live_usage(record.id)
    return record.model_dump(mode="json", exclude={"result"}) | {
        "wall_s": record.wall_s,
        "protocol": protocol_of(record),
    }


def runs_page(rows: list[dict[str, Any]], *, total: int, offset: int, limit: int) -> dict[str, Any]:
    """The one shape of a page of runs: ``{"total", "offset", "limit", "runs"}``.

    ``total`` counts every run that matches; the next page starts at ``offset + limit`` while
    that is below ``total``. ``moot runs list --json`` and ``/api/runs`` both answer it.
    """
    return {"total": total, "offset": offset, "limit": limit, "runs": rows}


def bench_records(store: RunStore, run_id: str) -> list[Any]:
    """A bench run's unit records (:class:`~moot.bench.records.ItemRecord`), in the order they finished."""
    from ..bench.records import ItemRecord

    full = store.resolve_id(run_id)
    return [ItemRecord.model_validate(i.data) for i in store.iter_items(full)]


def bench_run(store: RunStore, run_id: str) -> Any:
    """A bench run rebuilt from the store as a :class:`~moot.bench.runner.BenchRun` (for reports).

    Its items are those with at least one unit recorded, in the order of the first unit of each.
    """
    from ..bench.runner import BenchConfig, BenchRun, expand_methods
    from ..bench.tasks import Item

    record = store.get(run_id)
    config = BenchConfig.model_validate(
        {k: v for k, v in record.config.items() if k in BenchConfig.model_fields}
    )
    records = bench_records(store, record.id)
    items: dict[str, Item] = {}
    for r in records:
        items.setdefault(r.item_id, Item(id=r.item_id, prompt="", gold=r.gold))
    specs = expand_methods(config.methods, config.matched)
    order = {s.name: i for i, s in enumerate(specs)}
    position = {item_id: i for i, item_id in enumerate(items)}
    records.sort(key=lambda r: (position[r.item_id], order.get(r.method, len(order))))
    run = BenchRun(config=config, specs=specs, items=list(items.values()), records=records)
    run.model_name = str(record.summary.get("model_name", ""))
    return run


def read_store(path: str | Path | None = None) -> RunStore:
    """An existing store opened for reading (``moot runs``, ``moot view``).

    ``path``, else ``$MOOT_STORE`` or ``./.moot/runs.db``; an older schema is migrated when the
    file can be written, else read as it is.

    Raises:
        UsageError: no store there, or not a moot store.
    """
    return RunStore(default_store_path(path), must_exist=True)


def _read(store: RunStore, record: RunRecord) -> Any:
    """The reader of every kind moot records (see :func:`load_result`)."""
    if record.kind == "bench":
        return bench_records(store, record.id)
    if record.kind == "absa" and record.config.get("batch"):
        from ..absa import FinalResult

        return [FinalResult.model_validate(i.data["result"]) for i in store.iter_items(record.id)]
    data = record.result
    if data is None:
        return None
    if record.kind == "run":
        return DebateResult.model_validate(data)
    if record.kind == "absa":
        from ..absa import FinalResult

        return FinalResult.model_validate(data)
    if record.kind == "arbitrate":
        from ..arbitration import ArbitrationResult

        return ArbitrationResult.model_validate(data)
    if record.kind == "absa-eval":
        from ..absa import EvalScores

        return {name: EvalScores.model_validate(s) for name, s in data.items()}
    return data


for _kind in ("run", "absa", "arbitrate", "bench", "absa-eval"):
    register_reader(_kind, _read)


def load_result(store: RunStore, run_id: str) -> Any:
    """A run's result as the same pydantic objects the API returns.

    ``run``: a :class:`~moot.transcript.DebateResult`; ``absa``: a
    :class:`~moot.absa.FinalResult` (one sentence) or a list of them (a batch);
    ``arbitrate``: an :class:`~moot.arbitration.ArbitrationResult`; ``bench``: the
    list of :class:`~moot.bench.records.ItemRecord`; ``absa-eval``: a dict of
    :class:`~moot.absa.EvalScores` by config name. None when the run recorded
    no result (interrupted before the end: read its events and items instead).
    ``moot.runs.load_result`` is the same function's entry in the store package.
    """
    return runs_load_result(store, run_id)


def run_turns(store: RunStore, record: RunRecord) -> list[tuple[str, Turn]]:
    """``(debate_id, turn)`` for every completed turn of a run, from its events (works mid-run too)."""
    out: list[tuple[str, Turn]] = []
    for event in store.events(record.id):
        if event.kind in ("turn_completed", "judge_completed") and "turn" in event.data:
            out.append((str(event.data.get("debate_id", "")), Turn.model_validate(event.data["turn"])))
    return out


def absa_events(store: RunStore, run_id: str) -> list[Any]:
    """The pipeline events (:class:`~moot.absa.StageEvent`) a one-sentence ``absa`` run recorded, in order.

    Steps started and completed and each stage's output: what a run that was
    killed, or is still running, has done so far (its debate turns: :func:`run_turns`).
    """
    from ..absa import StageEvent

    kinds = ("step_started", "step_completed", "stage_output")
    return [
        StageEvent.model_validate(e.data) for e in store.events(store.resolve_id(run_id)) if e.kind in kinds
    ]


def _pandas() -> Any:
    try:
        import pandas
    except ModuleNotFoundError:
        raise MissingDependencyError("pandas", "pandas", "for data frames of runs") from None
    return pandas


def runs_frame(store: RunStore, **filters: Any) -> pandas.DataFrame:
    """One row per run (``filters`` as for :meth:`RunStore.list`). Needs the ``pandas`` extra."""
    pd = _pandas()
    rows = []
    for r in store.list(**filters):
        rows.append(
            {
                "id": r.id,
                "kind": r.kind,
                "status": r.status,
                "title": r.title,
                "model": r.model,
                "started_at": pd.to_datetime(r.started_at, unit="s"),
                "wall_s": r.wall_s,
                "calls": r.usage.calls,
                "prompt_tokens": r.usage.prompt_tokens,
                "completion_tokens": r.usage.completion_tokens,
                "score": r.score,
            }
        )
    return pd.DataFrame(rows)


def turns_frame(store: RunStore, run_id: str) -> pandas.DataFrame:
    """One row per completed turn of a run (any kind that ran debates). Needs the ``pandas`` extra."""
    pd = _pandas()
    record = store.get(run_id)
    rows = []
    for debate_id, t in run_turns(store, record):
        rows.append(
            {
                "debate_id": debate_id,
                "round": t.round,
                "phase": t.phase,
                "speaker": t.speaker,
                "stance": t.stance,
                "ok": t.ok,
                "text": t.text,
                "confidence": t.get("confidence"),
                "error": t.error,
                "repaired": t.repaired,
                "trimmed": t.trimmed,
                "model": t.model,
                "calls": t.usage.calls,
                "tokens": t.usage.total_tokens,
                "latency_ms": t.latency_ms,
            }
        )
    return pd.DataFrame(rows)


def units_frame(store: RunStore, run_id: str) -> pandas.DataFrame:
    """One row per bench unit (item x method) of a bench run. Needs the ``pandas`` extra."""
    pd = _pandas()
    rows = [
        r.model_dump(exclude={"rounds"}) | {"tokens": r.tokens, "rounds": len(r.rounds)}
        for r in bench_records(store, run_id)
    ]
    return pd.DataFrame(rows)
