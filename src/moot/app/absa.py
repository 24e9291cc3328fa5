"""``moot absa --input``: an ABSA batch here or on Ray workers, recorded as one run either way."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..absa import FinalResult, load_config, run_absa_batch
from ..absa.pipeline import BatchOutcome, observed_batch
from ..models import Model

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
    run the same way (:func:`moot.absa.pipeline.observed_batch`): each sentence's result is a
    unit as it comes back.
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
    workers: list[dict[str, Any]] = []

    async def work(done: Callable[[int, FinalResult], Awaitable[None]]) -> BatchOutcome:
        batch = await run_absa_batch_ray(
            sentences, model=model, config=cfg, ray=ray, on_result=done, timeout_s=timeout_s
        )
        workers.extend(batch.workers)
        # How many sentences each worker did, and which died.
        return BatchOutcome(batch.results, {"workers": batch.workers} if batch.workers else {})

    results = await observed_batch(
        ids, work, model=model, config=cfg, concurrency=concurrency, on_result=on_result, store=store
    )
    return results, workers
