"""What runs inside a Ray worker: its model, and the jobs it runs unit by unit.

A worker is one actor with its own event loop and its own model, built once when the
actor starts: the embedded model loaded once per actor, an HTTP backend with its own
connection pool. Everything here is pickled to the workers, so it holds data, never
driver state.
"""

from __future__ import annotations

import os
import pickle
import socket
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import MootError, RunError
from ..models import register_provider, resolve_model
from ..models.base import Model
from ..models.limits import set_rate_share
from ..models.local import default_threads

__all__ = ["Failed", "Job", "ModelSource", "Worker"]


@dataclass(frozen=True)
class ModelSource:
    """How a worker builds its model.

    Attributes:
        spec: a model spec (``local``, ``openai:MODEL``...), resolved on the worker.
        factory: instead of ``spec``, a picklable ``factory()`` returning the model.
        providers: providers registered on the driver by code (``register_provider``),
            registered on the worker too so their specs resolve there.
        max_concurrency: requests in flight at the worker's backend, per endpoint: its share of
            ``--model-concurrency`` (:func:`~moot.scale.worker_pool` divides it among the
            workers); a smaller cap of the model's own (``?max_concurrency=N``) still applies.
            None: the backend's own.
        rate_share: this worker's share of a rate limit the server announces (``1 / workers``:
            every worker reads the same headers, and together they must keep to them).
        cpus: the CPUs the worker was given; an in-process model sizes its threads by them as
            a plain process does by the machine's (decoding with half, reading prompts with
            all: ``MOOT_LLAMA_THREADS``/``MOOT_LLAMA_BATCH_THREADS``, unless set already or
            given in the spec), not by every CPU of the node it shares with other workers.
    """

    spec: str | None = None
    factory: Callable[[], Model] | None = None
    providers: dict[str, Callable[[str], Model]] = field(default_factory=dict)
    max_concurrency: int | None = None
    rate_share: float = 1.0
    cpus: int | None = None

    def build(self) -> Model:
        """The model, on the worker."""
        if self.cpus is not None:
            # llama.cpp reads prompts with every CPU of the machine by default; beside another
            # worker that extra thread takes CPU from the neighbour's decoding (2 workers on 2
            # cores: 0.94x one plain process; with one thread each: see bench/ray_scaling.py).
            decode, read = default_threads(self.cpus)
            os.environ.setdefault("MOOT_LLAMA_THREADS", str(decode))
            os.environ.setdefault("MOOT_LLAMA_BATCH_THREADS", str(read))
        set_rate_share(self.rate_share)
        for name, provider in self.providers.items():
            register_provider(name, provider)
        model = self.factory() if self.factory is not None else resolve_model(self.spec)
        if self.max_concurrency is not None:
            own = model.max_concurrency
            model.max_concurrency = self.max_concurrency if own is None else min(own, self.max_concurrency)
        return model


@dataclass(frozen=True)
class Failed:
    """A unit that failed on a worker with a moot error; the driver raises ``error`` again."""

    error: MootError

    @classmethod
    def of(cls, err: MootError) -> Failed:
        """Wrap ``err`` so it crosses processes.

        An error that cannot be rebuilt there as it is (a subclass with required arguments)
        becomes its nearest plain moot base class, with the same message.
        """
        try:
            pickle.loads(pickle.dumps(err))
        except Exception:
            base = next(c for c in type(err).__mro__ if c.__module__ == MootError.__module__ and _plain(c))
            return cls(base(str(err)))
        return cls(err)


def _plain(kind: type) -> bool:
    """Whether ``kind(message)`` rebuilds an error of that class."""
    try:
        pickle.loads(pickle.dumps(kind("x")))
    except Exception:
        return False
    return True


class Job(ABC):
    """Work a worker does unit by unit with its model (a bench unit, an ABSA sentence)."""

    @abstractmethod
    async def run(self, model: Model, unit: Any) -> Any:
        """Run one unit; a :class:`MootError` is sent back to the driver as a :class:`Failed`."""


class Worker:
    """The body of a Ray worker actor (made remote by the pool, so this module needs no Ray)."""

    def __init__(self, source: ModelSource, job: Job) -> None:
        self.source = source
        self.job = job
        self.model: Model | None = None

    async def ready(self) -> dict[str, Any]:
        """Build the model (once) and say where this worker runs and what model it has.

        An in-process model is loaded and measured here (``expected_speed``: a short
        generation, whose figure sizes default deadlines), so a missing file fails at start
        and the first unit does not pay for the load; a remote backend sends nothing.
        """
        if self.model is None:
            try:
                model = self.source.build()
                await model.expected_speed()
            except MootError as err:  # a bad spec, a missing file or extra: said once, on the driver
                return {"failed": Failed.of(err)}
            self.model = model
        return {"node": socket.gethostname(), "pid": os.getpid(), "model": self.model.name}

    async def run(self, unit: Any) -> Any:
        """Run one unit of the job."""
        if self.model is None:
            await self.ready()
        if self.model is None:
            raise RunError("this worker has no model (building it failed)")
        try:
            return await self.job.run(self.model, unit)
        except MootError as err:  # sent back as a value: Ray would wrap a raised one in its own error
            return Failed.of(err)

    async def close(self) -> None:
        """Release the model's loop-bound resources (HTTP pools) before the actor goes."""
        if self.model is not None:
            await self.model.aclose()
