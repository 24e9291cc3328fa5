"""Scale-out: ``moot bench`` units and ABSA batches on a Ray cluster.

Importing this package does not import Ray; Ray is imported when a run asks for it
(``--ray``), and a missing install fails with one line naming the ``moot[ray]`` extra.
"""

from __future__ import annotations

from ._absa import AbsaJob, RayBatch, run_absa_batch_ray
from ._bench import BenchJob, ModelLike, run_bench_ray
from ._cluster import RAY_EXTRA, RayOptions, connect, import_ray
from ._pool import MAX_DEATHS, WorkerPool, WorkerStats, worker_pool
from ._worker import Job, ModelSource

__all__ = [
    "MAX_DEATHS",
    "RAY_EXTRA",
    "AbsaJob",
    "BenchJob",
    "Job",
    "ModelLike",
    "ModelSource",
    "RayBatch",
    "RayOptions",
    "WorkerPool",
    "WorkerStats",
    "connect",
    "import_ray",
    "run_absa_batch_ray",
    "run_bench_ray",
    "worker_pool",
]
