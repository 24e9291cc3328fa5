"""Re-running a stored run: what the record says to run again.

``moot run --from RUN_ID`` re-runs a debate, ``moot absa --from RUN_ID`` an ABSA run.

A record is checked before it is used (:func:`moot.runs.integrity.check_record`): one that
cannot be read, or that was edited after it was written, is refused naming what changed, unless
the caller trusts edited records (``--trust-edited``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..errors import UsageError
from ..runs import RunRecord, open_store
from ..runs.integrity import check_record, trusted_edit

__all__ = [
    "RecordedAbsa",
    "check_record",
    "recorded_absa",
    "recorded_debate",
    "recorded_endpoints",
    "stored_run",
    "trusted_edit",
]


def stored_run(run_id: str, store: Path | None, *, trust_edited: bool = False) -> RunRecord:
    """The stored run ``run_id`` (any unique prefix) of the store ``--store`` names, with its result.

    The record is checked first (:meth:`~moot.runs.RunStore.replayable`).

    Raises:
        UsageError: no such run, an ambiguous prefix, a damaged record, or an edited one not trusted.
    """
    opened = open_store(store)
    assert opened is not None
    with opened:
        return opened.replayable(run_id, trust_edited=trust_edited)


def recorded_debate(run_id: str, store: Path | None, *, trust_edited: bool = False) -> dict[str, Any]:
    """The configuration ``moot run --from RUN_ID`` re-runs: the stored debate's own config.

    Raises:
        UsageError: no such run, it is not a ``moot run`` debate, or its record is damaged or
            edited (and not trusted).
    """
    record = stored_run(run_id, store, trust_edited=trust_edited)
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
            # Percent-encoded: an endpoint's own query ("?a=1&b=2") must not read as spec options.
            out[key] = f"{spec}?base_url={quote(endpoint, safe=':/')}"
    return out


@dataclass(frozen=True)
class RecordedAbsa:
    """A stored ABSA run, as ``moot absa --from RUN_ID`` runs it again.

    Attributes:
        id: the stored run's full id.
        batch: True for a batch (``moot absa --input``), False for one sentence.
        sentences: ``(id, sentence)`` in input order: the one sentence (id ``""``), or the
            batch's recorded sentences (an interrupted batch: those it finished).
        config: the pipeline config it ran with (``AbsaConfig`` as JSON data).
        model: the model spec it ran with (None: the default).
        concurrency: a batch's sentences in flight.
        results: what it recorded, for a replay (:meth:`moot.models.testing.ReplayModel.from_absa`):
            the one result's data, or ``{sentence id: result data}``; None when a one-sentence
            run stored no result.
    """

    id: str
    batch: bool
    sentences: list[tuple[str, str]]
    config: dict[str, Any]
    model: str | None = None
    concurrency: int = 1
    results: Any = field(default=None, repr=False)


def recorded_absa(run_id: str, store: Path | None, *, trust_edited: bool = False) -> RecordedAbsa:
    """The stored ABSA run ``run_id`` (any unique prefix) of the store ``--store`` names.

    Raises:
        UsageError: no such run, an ambiguous prefix, not an ABSA run, a batch with no sentence
            recorded, or a damaged or edited (and not trusted) record.
    """
    opened = open_store(store)
    assert opened is not None
    with opened:
        record = opened.replayable(run_id, trust_edited=trust_edited)
        if record.kind != "absa":
            raise UsageError(
                f"run {record.id[:8]} is a {record.kind!r} run, not an ABSA run: "
                "moot absa --from needs a `moot absa` run"
            )
        config, model = dict(record.config.get("config") or {}), record.config.get("model")
        if not record.config.get("batch"):
            sentence = str(record.config.get("sentence") or record.title)
            return RecordedAbsa(record.id, False, [("", sentence)], config, model, results=record.result)
        units = sorted(opened.iter_items(record.id), key=lambda u: int(u.data.get("index", 0)))
    if not units:
        raise UsageError(
            f"run {record.id[:8]} recorded no sentence (status {record.status}): nothing to re-run"
        )
    results = {u.item: u.data["result"] for u in units}
    return RecordedAbsa(
        record.id,
        True,
        [(u.item, str(u.data["result"]["sentence"])) for u in units],
        config,
        model,
        int(record.config.get("concurrency") or 1),
        results,
    )
