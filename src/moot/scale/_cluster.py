"""Reaching Ray: the lazy import, the address forms, and a quiet, offline start."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError

__all__ = ["RAY_EXTRA", "RayOptions", "connect", "import_ray"]

RAY_EXTRA = "pip install 'moot[ray]'"
"""How to install what ``--ray`` needs."""


@dataclass(frozen=True)
class RayOptions:
    """Where and how wide to run on Ray.

    Attributes:
        address: ``local`` starts a cluster on this machine for this run; ``auto`` joins the
            cluster already running here (``ray start --head``) or starts one; anything else
            is the address of a running cluster (``HOST:6379`` or ``ray://HOST:10001``).
        workers: Ray workers (one actor each, one CPU each); None: one per CPU of the cluster.
        concurrency: units in flight on each worker.
        start_timeout: seconds the workers may take to start (and load their model).
    """

    address: str = "local"
    workers: int | None = None
    concurrency: int = 1
    start_timeout: float = 300.0

    def __post_init__(self) -> None:
        if not self.address.strip():
            raise UsageError("--ray: empty address; use local, auto or HOST:PORT")
        if self.workers is not None and self.workers < 1:
            raise UsageError(f"--ray-workers must be at least 1, not {self.workers}")
        if self.concurrency < 1:
            raise UsageError(f"per-worker concurrency must be at least 1, not {self.concurrency}")


def import_ray() -> Any:
    """Import Ray, or fail with a :class:`UsageError` that names the extra to install."""
    try:
        import ray
    except ImportError as err:
        raise UsageError(f"--ray needs Ray, which is not installed ({err}): {RAY_EXTRA}") from None
    return ray


def _start_options(workers: int | None) -> dict[str, Any]:
    # One CPU per worker actor: ask for as many as the run wants even on a smaller machine.
    return {
        "num_cpus": max(os.cpu_count() or 1, workers or 0),
        "include_dashboard": False,  # no web server, no port, nothing fetched
    }


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """Fail fast on a cluster address nothing answers at (Ray itself retries for minutes).

    Raises:
        UsageError: the address has no port, or no TCP connection to it opens within ``timeout``.
    """
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"--ray {address}: expected local, auto, HOST:PORT or ray://HOST:PORT")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as err:
        raise UsageError(
            f"--ray {address}: no Ray cluster answers there ({err.strerror or err}); "
            "start one with `ray start --head`, or use --ray local"
        ) from None


@contextlib.contextmanager
def connect(options: RayOptions) -> Iterator[Any]:
    """Yield the ``ray`` module connected as ``options`` say; disconnect after if this call connected.

    A Ray session the caller already opened (``ray.init`` in a script or a test) is used as is.

    Raises:
        UsageError: Ray is missing, or the cluster cannot be reached or started.
    """
    ray = import_ray()
    if ray.is_initialized():
        yield ray
        return
    # Ray reports usage to its authors unless told not to; a run must work offline and say nothing.
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # Ray starts its workers at nice 15, for side tasks beside a busy driver. Here the workers do the
    # run's work (each holds a model), so on a busy machine that would starve them: measured, 1 worker
    # ran at 0.81x of the same model in one plain process. A cluster started here runs them at nice 0.
    os.environ.setdefault("RAY_worker_niceness", "0")
    quiet: dict[str, Any] = {"logging_level": logging.ERROR, "log_to_driver": False}
    address = options.address.strip()
    # ray.init replaces the SIGTERM handler with one that exits at once; keep the caller's (the CLI
    # turns SIGTERM into an interrupt that saves the finished units and prints the resume hint).
    main_thread = threading.current_thread() is threading.main_thread()
    sigterm = signal.getsignal(signal.SIGTERM) if main_thread else None
    try:
        if address == "local":
            ray.init(address="local", **_start_options(options.workers), **quiet)
        elif address == "auto":
            try:
                ray.init(address="auto", **quiet)
            except ConnectionError:  # no cluster running here: start one
                ray.init(address="local", **_start_options(options.workers), **quiet)
        else:
            _check_reachable(address)
            ray.init(address=address, **quiet)
    except (ConnectionError, ValueError, RuntimeError) as err:
        raise UsageError(f"--ray {address}: cannot reach or start the Ray cluster: {err}") from None
    finally:
        if sigterm is not None:
            signal.signal(signal.SIGTERM, sigterm)
    try:
        yield ray
    finally:
        ray.shutdown()
