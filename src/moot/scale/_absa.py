"""``moot absa --input ... --ray``: the sentences of an ABSA batch on Ray workers.

Each worker runs the whole pipeline on a sentence with its own model; results come back
to this process as they finish, where ``on_result`` writes them (the output file and the
run store are written here alone), and are returned in input order, as
:func:`moot.absa.run_absa_batch` does.

A ``timeout_s`` is one deadline for the whole batch, as on one machine: each sentence goes to
its worker with the seconds left (no clocks compared across machines), the worker ends it
there as :func:`moot.absa.run_absa` does, and sentences still waiting for a worker at the
deadline are never sent: they end here as failed ``deadline`` results. With or without it each
sentence also ends at its own default deadline on its worker (:func:`moot.absa.run_absa`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..absa import FinalResult, run_absa
from ..absa.config import AbsaConfig, load_config
from ..absa.pipeline import ConfigLike, deadline_result
from ..deadline import Deadline
from ..models import default_model_spec
from ..models.base import Model
from ._bench import ModelLike, model_source
from ._cluster import RayOptions, connect
from ._pool import worker_pool
from ._worker import Job

__all__ = ["AbsaJob", "RayBatch", "run_absa_batch_ray"]


@dataclass(frozen=True)
class AbsaJob(Job):
    """Runs the ABSA pipeline on one sentence with the worker's model."""

    config: AbsaConfig

    async def run(self, model: Model, unit: Any) -> FinalResult:
        """Analyse ``unit``: a sentence, or ``(sentence, seconds left)`` under a deadline.

        The batch's seconds left are a caller's deadline, made here: the sentence ends at the
        earlier of it and its own default deadline, as in a batch on one machine.
        """
        if isinstance(unit, tuple):
            sentence, seconds = unit
            return await run_absa(sentence, model=model, config=self.config, deadline=Deadline.after(seconds))
        return await run_absa(str(unit), model=model, config=self.config)


@dataclass
class RayBatch:
    """An ABSA batch run on Ray.

    Attributes:
        results: the results in input order.
        workers: per-worker counts (:class:`moot.scale.WorkerStats` as dicts).
    """

    results: list[FinalResult]
    workers: list[dict[str, Any]] = field(default_factory=list)


async def run_absa_batch_ray(
    sentences: Sequence[str],
    *,
    model: ModelLike = None,
    config: ConfigLike = None,
    ray: RayOptions | None = None,
    on_result: Callable[[int, FinalResult], Awaitable[None] | None] | None = None,
    model_concurrency: int | None = None,
    timeout_s: float | None = None,
) -> RayBatch:
    """:func:`moot.absa.run_absa_batch` with the sentences on Ray workers.

    Args:
        sentences: the sentences.
        model: a spec or a picklable function building the model on each worker; None: the
            default spec of this process (``$MOOT_MODEL``, else ``local``).
        config: as for ``run_absa_batch`` (loaded here once, sent to every worker).
        ray: the cluster and its width; ``concurrency`` is sentences in flight per worker.
        on_result: ``on_result(index, result)``, sync or async, called here in completion order.
        model_concurrency: requests in flight per endpoint for all the workers together, each
            worker taking its share (None: the ``--model-concurrency`` cap of this context, else
            the backend's own).
        timeout_s: seconds for the whole batch, counted from when the workers are ready (see the
            module docstring); None: none for the batch (each sentence keeps its default).

    Raises:
        RunError: a sentence took :data:`moot.scale.MAX_DEATHS` workers down with it.
    """
    options = ray or RayOptions()
    source = model_source(model if model is not None else default_model_spec(), model_concurrency)
    results: list[FinalResult | None] = [None] * len(sentences)
    cfg = load_config(config)
    with connect(options) as ray_module:
        async with worker_pool(ray_module, source, AbsaJob(cfg), options) as pool:
            gate = asyncio.Semaphore(pool.slots)
            deadline = Deadline.within(timeout_s)

            async def one(i: int) -> None:
                async with gate:
                    res: FinalResult
                    if deadline is None:
                        res = await pool.run(sentences[i])
                    elif deadline.expired():  # never sent: no time left for it
                        res = deadline_result(sentences[i], cfg)
                    else:  # the seconds left: a deadline never crosses machines
                        res = await pool.run((sentences[i], deadline.remaining_s()))
                results[i] = res
                if on_result is not None:
                    out = on_result(i, res)
                    if asyncio.iscoroutine(out):
                        await out

            try:
                async with asyncio.TaskGroup() as group:
                    for i in range(len(sentences)):
                        group.create_task(one(i))
            except BaseExceptionGroup as failed:  # say what failed, not "a group failed"
                raise failed.exceptions[0] from None
            workers = pool.counts()
    return RayBatch([r for r in results if r is not None], workers)
