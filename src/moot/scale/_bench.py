"""``moot bench --ray``: the benchmark's (item, method) units on Ray workers.

The driver keeps everything a single-machine run does (:func:`moot.bench.runner.run_bench`):
the item sample, the output lock, ``results.jsonl`` and the run store, resume, retry passes
and the report. Only running a unit moves to a worker, which builds the same
:class:`~moot.bench.methods.MethodContext` with its own model, so with the same seed and
a deterministic model the records are the same as without Ray.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..bench.methods import MethodContext, MethodSpec, run_method
from ..bench.records import ItemRecord
from ..bench.runner import BenchConfig, BenchRun, RunObserver, run_bench
from ..bench.tasks import Item, Task, make_task
from ..errors import UsageError
from ..models.base import Model, concurrency_cap
from ..models.retry import RetryPolicy
from ..protocol import HistorySpec
from ._cluster import RayOptions, connect
from ._pool import WorkerPool, worker_pool
from ._worker import Job, ModelSource

__all__ = ["BenchJob", "ModelLike", "model_source", "run_bench_ray"]


@dataclass
class BenchJob(Job):
    """Runs one (method, item) unit with the worker's model, as the single-machine runner does."""

    task: Task
    seed: int
    temperature: float | None
    max_tokens: int | None
    policy: RetryPolicy
    deadlines: dict[str, float] = field(default_factory=dict)
    """Seconds per unit of a preset, as ``BenchConfig.deadlines``: a worker starts each unit's
    debate with its own deadline from them (no clock crosses machines)."""
    history: HistorySpec | None = None
    """The run's ``--history`` (``BenchConfig.history``)."""
    judging: dict[str, bool] = field(default_factory=dict)
    """The presets' deciding-step options (``BenchConfig.judging``: blind, shuffle, audit...)."""
    _ctx: MethodContext | None = field(default=None, repr=False)

    async def run(self, model: Model, unit: Any) -> ItemRecord:
        """Run ``unit``, a ``(MethodSpec, Item)`` pair."""
        spec, item = unit
        if self._ctx is None:  # one context per worker: presets' debates are built once
            self._ctx = MethodContext(
                model=model,
                task=self.task,
                seed=self.seed,
                temperature=self.temperature,
                max_tokens=self.max_tokens,
                policy=self.policy,
                deadlines=self.deadlines,
                judging=self.judging,
                history=self.history,
            )
        return await run_method(spec, item, self._ctx)


@dataclass
class _PoolUnits:
    """The runner's view of the pool (:class:`moot.bench.runner.UnitRunner`)."""

    pool: WorkerPool

    @property
    def slots(self) -> int:
        return self.pool.slots

    @property
    def model_name(self) -> str:
        return self.pool.model_name

    async def run_unit(self, spec: MethodSpec, item: Item) -> ItemRecord:
        record: ItemRecord = await self.pool.run((spec, item))
        return record

    def counts(self) -> list[dict[str, Any]]:
        return self.pool.counts()


ModelLike = str | Callable[[], Model] | None
"""A model spec, or a picklable function that builds the model on each worker."""


def model_source(model: ModelLike, max_concurrency: int | None = None) -> ModelSource:
    """What a worker needs to build ``model``: its spec or its factory.

    ``max_concurrency`` (None: the ``--model-concurrency`` cap of the current context, if any)
    is requests in flight per endpoint for all the workers together.
    A Model instance holds loop-bound resources and cannot cross processes, so it is refused.
    Providers registered by code on the driver go along, so their specs resolve on workers.

    Raises:
        UsageError: ``model`` is a Model instance.
    """
    import moot.models as models

    if isinstance(model, Model):
        raise UsageError(
            f"{model!r}: a Model instance cannot be sent to Ray workers; pass its spec, "
            "or a function that builds it"
        )
    providers = {name: f for name, f in models._PROVIDERS.items() if callable(f)}
    if max_concurrency is None:
        max_concurrency = concurrency_cap()  # the driver's --model-concurrency reaches the workers
    if callable(model):
        return ModelSource(factory=model, providers=providers, max_concurrency=max_concurrency)
    return ModelSource(spec=model, providers=providers, max_concurrency=max_concurrency)


async def run_bench_ray(
    config: BenchConfig,
    *,
    model: ModelLike = None,
    out: str | Path,
    ray: RayOptions | None = None,
    resume: bool = False,
    task: Task | None = None,
    observer: RunObserver | None = None,
    policy: RetryPolicy | None = None,
    timeout_s: float | None = None,
    unit_retries: int = 2,
    retry_pause: float = 2.0,
    model_concurrency: int | None = None,
    store: Any = None,
    continues: str | None = None,
    trust_edited: bool = False,
) -> BenchRun:
    """:func:`moot.bench.runner.run_bench` with the units on Ray workers (same arguments, plus these).

    Args:
        config: what to run; ``config.model`` is the spec when ``model`` is None.
        model: a spec, or a picklable function building the model on each worker; None:
            ``config.model``.
        out: the output directory, written by this process alone.
        ray: the cluster and its width; ``concurrency`` is units in flight per worker.
        model_concurrency: requests in flight per endpoint for all the workers together, each
            worker taking its share (None: the ``--model-concurrency`` cap of this context, else
            the backend's own).
        resume: continue the run in ``out``, as ``run_bench`` does.
        task: the task (default ``make_task(config.task)``); sent to every worker once.
        observer: progress hooks, called on this process as units come back.
        policy: retry policy for plain calls (applied on the workers).
        timeout_s: seconds this invocation may take, as for ``run_bench`` (kept here, on the
            driver: units in flight at its end are dropped).
        unit_retries: passes over failed units, as for ``run_bench``.
        retry_pause: seconds before the first retry pass, as for ``run_bench``.
        store: record the benchmark, as ``run_bench`` does (this process records every unit).
        continues: the stored run this one continues, as for ``run_bench``.
        trust_edited: with ``resume``, use result lines edited after they were recorded, as for
            ``run_bench``.

    Returns:
        The run; ``workers`` holds the per-worker counts.
    """
    options = ray or RayOptions()
    task = task or make_task(config.task, exclude_conflict=config.exclude_conflict)
    job = BenchJob(
        task,
        config.seed,
        config.temperature,
        config.max_tokens,
        policy or RetryPolicy(),
        deadlines=dict(config.deadlines),
        history=config.history,
        judging=dict(config.judging),
    )
    source = model_source(model if model is not None else config.model, model_concurrency)
    with connect(options) as ray_module:
        async with worker_pool(ray_module, source, job, options) as pool:
            run = await run_bench(
                config,
                units=_PoolUnits(pool),
                out=out,
                resume=resume,
                task=task,
                observer=observer,
                policy=policy,
                timeout_s=timeout_s,
                unit_retries=unit_retries,
                retry_pause=retry_pause,
                store=store,
                continues=continues,
                trust_edited=trust_edited,
            )
            run.workers = pool.counts()
    return run
