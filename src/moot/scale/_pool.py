"""A pool of Ray worker actors: units go to the least busy worker, results come back as they finish.

A worker that dies (its process killed, its node lost) loses only the units it was
running: each is sent again to another worker, and a replacement worker is started
(at most as many replacements as workers in all, so a job that kills every worker
stops). A unit that has killed :data:`MAX_DEATHS` workers is not sent again: it fails
with a :class:`RunError`, and a bench leaves it for ``--resume``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from typing import Any

from ..errors import RunError, UsageError
from ._cluster import RayOptions
from ._worker import Failed, Job, ModelSource, Worker

__all__ = ["MAX_DEATHS", "WorkerPool", "WorkerStats", "worker_pool"]

MAX_DEATHS = 2
"""Workers a single unit may take down with it before it is given up."""


@dataclass
class WorkerStats:
    """One worker, as the run record keeps it.

    Attributes:
        worker: its name in this run (``w0``, ``w1``...; replacements continue the count).
        node: the host it ran on.
        pid: its process id there.
        units: units it finished (results sent back, failed units included).
        died: True if it died during the run.
    """

    worker: str
    node: str = ""
    pid: int = 0
    units: int = 0
    died: bool = False


@dataclass
class _Slot:
    stats: WorkerStats
    actor: Any
    busy: int = 0


class WorkerPool:
    """Ray actors running one :class:`Job`, ``concurrency`` units each (see the module docstring)."""

    def __init__(
        self, ray: Any, source: ModelSource, job: Job, workers: int, options: RayOptions, cpus: int = 1
    ) -> None:
        self._ray = ray
        self._actor_class = ray.remote(num_cpus=cpus, max_concurrency=options.concurrency)(Worker)
        self._job = ray.put(job)  # shipped once, not with every actor start
        self._source = dataclasses.replace(source, cpus=cpus)
        self.cpus = cpus
        self.workers = workers
        self.concurrency = options.concurrency
        self.start_timeout = options.start_timeout
        self.stats: list[WorkerStats] = []
        self.model_name = ""
        self._live: list[_Slot] = []
        self._changed = asyncio.Condition()
        self._replacements = workers
        self._starting = 0
        self._replacing: set[asyncio.Task[None]] = set()

    @property
    def slots(self) -> int:
        """Units the pool runs at once."""
        return self.workers * self.concurrency

    async def _start_one(self) -> None:
        stats = WorkerStats(worker=f"w{len(self.stats)}")
        self.stats.append(stats)
        actor = self._actor_class.remote(self._source, self._job)
        self._starting += 1
        try:
            info = await asyncio.wait_for(actor.ready.remote(), self.start_timeout)
        except asyncio.CancelledError:  # the run ended while this one was starting
            self._ray.kill(actor)
            raise
        except TimeoutError:
            self._ray.kill(actor)
            stats.died = True
            raise UsageError(
                f"a Ray worker did not start within {self.start_timeout:g} s; the cluster has "
                f"{self._ray.cluster_resources().get('CPU', 0):g} CPUs for {self.workers} workers "
                "(one CPU each)"
            ) from None
        except self._ray.exceptions.RayActorError as err:
            stats.died = True
            raise RunError(f"a Ray worker died while starting: {err}") from None
        except self._ray.exceptions.RayTaskError as err:  # building the model failed there
            stats.died = True
            raise err.cause if isinstance(err.cause, Exception) else RunError(str(err)) from None
        finally:
            self._starting -= 1
        if "failed" in info:
            self._ray.kill(actor)
            stats.died = True
            raise info["failed"].error
        stats.node, stats.pid = info["node"], info["pid"]
        self.model_name = self.model_name or info["model"]
        async with self._changed:
            self._live.append(_Slot(stats, actor))
            self._changed.notify_all()

    async def start(self) -> None:
        """Start every worker and wait until each has its model."""
        try:
            async with asyncio.TaskGroup() as group:
                for _ in range(self.workers):
                    group.create_task(self._start_one())
        except BaseExceptionGroup as failed:  # say why the first one failed, not "a group failed"
            raise failed.exceptions[0] from None

    async def _acquire(self) -> _Slot:
        async with self._changed:
            while True:
                free = [s for s in self._live if s.busy < self.concurrency]
                if free:
                    slot = min(free, key=lambda s: s.busy)
                    slot.busy += 1
                    return slot
                if not self._live and not self._starting and not self._replacing:
                    raise RunError("every Ray worker died; nothing left to run on")
                await self._changed.wait()

    async def _release(self, slot: _Slot) -> None:
        async with self._changed:
            slot.busy -= 1
            self._changed.notify_all()

    async def _lost(self, slot: _Slot) -> None:
        """``slot``'s worker died: drop it and start a replacement while the budget lasts."""
        async with self._changed:
            if slot not in self._live:
                return  # another of its units reported the death first
            self._live.remove(slot)
            slot.stats.died = True
            with contextlib.suppress(Exception):  # unreachable rather than dead: make sure it is gone
                self._ray.kill(slot.actor)
            self._changed.notify_all()
            if self._replacements <= 0:
                return
            self._replacements -= 1

        async def replace() -> None:
            with contextlib.suppress(RunError, UsageError):  # the remaining workers carry on
                await self._start_one()
            async with self._changed:
                self._changed.notify_all()

        task = asyncio.create_task(replace())
        self._replacing.add(task)
        task.add_done_callback(self._replacing.discard)

    async def run(self, unit: Any) -> Any:
        """Run ``unit`` on a worker and return its result.

        Raises:
            MootError: the error the job raised on the worker.
            RunError: the unit took :data:`MAX_DEATHS` workers down, or every worker died.
        """
        errors = self._ray.exceptions
        # ActorUnavailableError (Ray >= 2.30): the actor is unreachable; treated as dead, and ended below.
        lost = (errors.RayActorError, getattr(errors, "ActorUnavailableError", errors.RayActorError))
        for _ in range(MAX_DEATHS):
            slot = await self._acquire()
            try:
                out = await slot.actor.run.remote(unit)
            except lost:
                await self._lost(slot)
                continue
            except errors.RayTaskError as err:  # a bug on the worker: stop, with its cause
                raise err.cause if isinstance(err.cause, Exception) else RunError(str(err)) from None
            finally:
                await self._release(slot)
            slot.stats.units += 1
            if isinstance(out, Failed):
                raise out.error
            return out
        raise RunError(f"the Ray workers running this unit died {MAX_DEATHS} times; it is left out")

    def counts(self) -> list[dict[str, Any]]:
        """Per-worker counts for the run record."""
        return [asdict(s) for s in self.stats]

    async def close(self) -> None:
        """Close the workers' models and end the actors."""
        for task in list(self._replacing):
            task.cancel()
        slots = list(self._live)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.gather(*(s.actor.close.remote() for s in slots)), 30)
        for slot in slots:
            self._ray.kill(slot.actor)


def cpus_per_worker(ray: Any, workers: int, options: RayOptions) -> int:
    """The CPUs each of ``workers`` workers asks for.

    On a cluster started for this run (``local``) its CPUs are all the run's, so they are shared
    out equally (at least one each, at most the smallest node's). On a cluster joined
    (``auto``, an address), other jobs may hold some at any moment: one each.
    """
    if options.address.strip() != "local":
        return 1
    per_node = [int(n.get("Resources", {}).get("CPU", 0)) for n in ray.nodes() if n.get("Alive")]
    per_node = [c for c in per_node if c > 0]
    if not per_node:
        return 1
    return max(1, min(sum(per_node) // workers, min(per_node)))


@contextlib.asynccontextmanager
async def worker_pool(
    ray: Any, source: ModelSource, job: Job, options: RayOptions
) -> AsyncIterator[WorkerPool]:
    """A started :class:`WorkerPool` (``options.workers``, else one per CPU of the cluster), closed after.

    A cap of requests in flight (``source.max_concurrency``) is per endpoint: each worker gets
    its share, ``ceil(cap / workers)``, and of an announced rate limit ``1 / workers``. Each worker
    asks for :func:`cpus_per_worker` CPUs, so on
    a cluster started for the run fewer workers than CPUs still use them all (an in-process
    model sizes its threads by its share, see :class:`ModelSource`).
    """
    workers = options.workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
    if source.max_concurrency is not None:
        # A cap is per endpoint, and every worker sends to it: each takes its share (rounded up).
        source = dataclasses.replace(source, max_concurrency=-(-source.max_concurrency // workers))
    # So is a rate limit the server announces: each worker paces at its share of it.
    source = dataclasses.replace(source, rate_share=1.0 / workers)
    pool = WorkerPool(ray, source, job, workers, options, cpus=cpus_per_worker(ray, workers, options))
    try:
        await pool.start()
        yield pool
    finally:
        await pool.close()
