"""The application layer: where a run's outside concerns are attached, once.

Every public door (``Debate``, ``debate_node``, ``build_debate_graph``, ``arbitrate``,
``run_absa``, ``run_bench``) and every CLI command reaches the run store through here: importing
:mod:`moot` registers the run store's recorder as an observer factory (:mod:`moot.observe`), so a
door given ``store=`` (a path, an open :class:`~moot.runs.RunStore`, True for ``$MOOT_STORE`` or
``./.moot/runs.db``, None for nothing) records its run without the engine or the pipelines
importing the store. It also registers how each kind of stored run reads back (:mod:`moot.app.records`).

Tracing is the second subscriber: :mod:`moot.app.tracing` attaches OpenTelemetry spans to every
run while a tracer provider is set (the CLI sets one from ``OTEL_EXPORTER_OTLP_ENDPOINT``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import moot.app.records as records  # noqa: F401  (each kind's reader for moot.runs.load_result)
import moot.observe as observe

from .tracing import trace_observer

__all__ = ["store_observer", "store_spec", "trace_observer"]


def store_spec(path: str | Path | None, *, enabled: bool = True) -> str | Path | bool | None:
    """The ``store=`` for a command's ``--store PATH`` / ``--no-store``.

    A path, True for the default store (``$MOOT_STORE`` or ``./.moot/runs.db``), or None.
    """
    if not enabled:
        return None
    return path if path is not None else True


def store_observer(start: observe.RunStart, options: Mapping[str, Any]) -> observe.Observer | None:
    """The observer factory for ``store=``: a recorder into that store, or None without one."""
    spec = options.get("store")
    if spec is None or spec is False:
        return None
    from .recorder import recorder_for

    return recorder_for(spec, start)


observe.register("store", store_observer)
# Tracing: an observer only while an OpenTelemetry tracer provider is set (see moot.app.tracing).
observe.register("trace", trace_observer)
