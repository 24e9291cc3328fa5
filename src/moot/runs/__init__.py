"""Every run kept: a SQLite run store, recording, queries and comparisons.

::

    from moot.runs import open_store, load_result

    store = open_store()                        # ./.moot/runs.db, or $MOOT_STORE
    for run in store.list(kind="bench", limit=5):
        print(run.id[:8], run.status, run.title, run.score)
    result = load_result(store, "3f2a")         # any unique id prefix

The CLI records every ``moot run``, ``absa``, ``absa-eval``, ``arbitrate`` and
``bench`` here; ``moot runs`` lists, shows, exports and compares them and
``moot view`` opens them in the browser.
"""

from __future__ import annotations

from .readback import load_result, register_reader
from .recording import Recording, model_info, open_store, prompts_hash, recording, redact
from .store import (
    DEFAULT_STORE,
    SCHEMA_VERSION,
    DamagedRecord,
    RunRecord,
    RunStatus,
    RunStore,
    StoredEvent,
    StoredItem,
    default_store_path,
)

__all__ = [
    "DEFAULT_STORE",
    "DamagedRecord",
    "SCHEMA_VERSION",
    "Recording",
    "RunRecord",
    "RunStatus",
    "RunStore",
    "StoredEvent",
    "StoredItem",
    "default_store_path",
    "load_result",
    "model_info",
    "open_store",
    "prompts_hash",
    "recording",
    "redact",
    "register_reader",
]
