"""Re-running a stored debate (``moot run --from RUN_ID``): what the record says to run again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..runs import RunRecord, open_store

__all__ = ["recorded_debate", "recorded_endpoints", "stored_run"]


def stored_run(run_id: str, store: Path | None) -> RunRecord:
    """The stored run ``run_id`` (any unique prefix) of the store ``--store`` names, with its result.

    Raises:
        UsageError: no such run, or an ambiguous prefix.
    """
    opened = open_store(store)
    assert opened is not None
    with opened:
        return opened.get(opened.resolve_id(run_id))


def recorded_debate(run_id: str, store: Path | None) -> dict[str, Any]:
    """The configuration ``moot run --from RUN_ID`` re-runs: the stored debate's own config.

    Raises:
        UsageError: no such run, or it is not a ``moot run`` debate.
    """
    record = stored_run(run_id, store)
    if record.kind != "run" or "protocol" not in record.config:
        raise UsageError(
            f"run {record.id[:8]} is a {record.kind!r} run, not a debate: --from needs a `moot run` run"
        )
    return record.config


def recorded_endpoints(recorded: dict[str, Any]) -> dict[str, str]:
    """Each persona's recorded model with the endpoint it ran against, as a spec (never a key).

    A run against a server named by ``$OPENAI_BASE_URL`` records ``openai:M`` and the endpoint;
    ``--from`` then reaches the same server without that variable (instead of OpenAI's, asking
    for a key). Only ``openai:`` specs name an endpoint in the spec (``?base_url=``).
    """
    out: dict[str, str] = {}
    for key, info in (recorded.get("models") or {}).items():
        spec, endpoint = info.get("spec"), info.get("endpoint")
        if isinstance(spec, str) and spec.startswith("openai:") and "?" not in spec and endpoint:
            out[key] = f"{spec}?base_url={endpoint}"
    return out
