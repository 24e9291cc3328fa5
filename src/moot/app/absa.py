"""``moot absa --input``: an ABSA batch here or on Ray workers, recorded as one run either way."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..absa import FinalResult, load_config, run_absa_batch
from ..models import Model, Usage, default_model_spec
from ..observe import PipelineEvent, RunStart, degraded_status, observed

if TYPE_CHECKING:  # pragma: no cover
    from ..scale import RayOptions

__all__ = ["absa_batch"]


async def absa_batch(
    sentences: Sequence[str],
    ids: Sequence[str],
    *,
    model: str | Model | None,
    config: Any,
    concurrency: int,
    on_result: Callable[[int, FinalResult], Awaitable[None] | None],
    timeout_s: float | None = None,
    ray: RayOptions | None = None,
    store: Any = None,
) -> tuple[list[FinalResult], list[dict[str, Any]]]:
    """The results in input order and the per-worker counts (Ray only).

    Here: :func:`moot.absa.run_absa_batch` (which records itself). On Ray the driver records the
    run the same way: each sentence's result is a unit as it comes back.
    """
    if ray is None:
        results = await run_absa_batch(
            sentences,
            model=model,
            config=config,
            concurrency=concurrency,
            on_result=on_result,
            timeout_s=timeout_s,
            store=store,
            ids=ids,
        )
        return results, []
    from ..scale import run_absa_batch_ray

    assert not isinstance(model, Model)  # built on each worker, never loaded here
    cfg = load_config(config)
    recorded = {
        "config": cfg.model_dump(mode="json"),
        "model": model,
        "batch": True,
        "concurrency": concurrency,
    }
    start = RunStart(
        kind="absa", title=f"{len(sentences)} sentences", model=model or default_model_spec(), config=recorded
    )
    with observed(start, store=store) as run:

        async def done(i: int, res: FinalResult) -> None:
            data = {"index": i, "result": res.model_dump(mode="json")}
            run.emit(PipelineEvent(kind="unit_completed", unit=ids[i], data=data))
            out = on_result(i, res)
            if asyncio.iscoroutine(out):
                await out

        batch = await run_absa_batch_ray(
            sentences, model=model, config=cfg, ray=ray, on_result=done, timeout_s=timeout_s
        )
        failed = sum(r.failed for r in batch.results)
        summary: dict[str, Any] = {"sentences": len(batch.results), "failed": failed}
        if batch.workers:  # how many sentences each worker did, and which died
            summary["workers"] = batch.workers
        usage = sum((r.usage for r in batch.results), Usage())
        run.end(degraded_status(failed, len(batch.results)), usage=usage, summary=summary)
    return batch.results, batch.workers
