"""The run store's schema: its SQL migrations and the records it reads back.

:data:`MIGRATIONS` maps each schema version to the statements that bring the version
before it there; :class:`~moot.runs.store.RunStore` applies the missing ones in one
transaction when it opens an older file. A migration, once released, never changes:
a new need is a new version.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from ..models.base import Usage

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "Integrity", "RunRecord", "RunStatus", "StoredEvent", "StoredItem"]

RunStatus = Literal["running", "complete", "fell_back", "skipped", "failed", "interrupted"]

Integrity = Literal["intact", "edited", "unsealed"]
"""Whether a stored record is what was written: ``intact`` (its digests match), ``edited`` (some
part changed after it was written), ``unsealed`` (written before moot kept digests: cannot be told)."""

_TOKENIZER = "unicode61 remove_diacritics 2"
_INDEX_NEW = (
    "INSERT INTO search (run_id, body) SELECT new.run_id, group_concat(value, ' ') "
    "FROM json_tree(new.data) WHERE type = 'text' HAVING count(*) > 0"
)
# v4: every event and item adds one search row (an empty body when it holds no text), so the doc
# row after it always names the search row just inserted (last_insert_rowid() inside the trigger).
_INDEX_EVERY = (
    "INSERT INTO search (run_id, body) SELECT new.run_id, group_concat(value, ' ') "
    "FROM json_tree(new.data) WHERE type = 'text'"
)
_DOC = "INSERT OR REPLACE INTO search_docs (doc, run_id) VALUES (last_insert_rowid(), {run})"
_PROMPT_TEXT = (
    "SELECT group_concat(DISTINCT value) FROM json_tree({result}) "
    "WHERE type = 'text' AND key = 'content' AND path LIKE '%.sent[%'"
)
_PROMPTS = "INSERT INTO search (run_id, body) SELECT {run}, (" + _PROMPT_TEXT + ")"
# v7: each search row's run as a number (``runs.num``), set with the doc row, so a search
# intersects integers; the number is stored (a rowid could change on VACUUM).
_DOC_NUM = (
    "INSERT OR REPLACE INTO search_docs (doc, run_id, run) VALUES "
    "(last_insert_rowid(), {run}, (SELECT num FROM runs WHERE id = {run}))"
)
_INDEX_ALL = (
    "INSERT INTO search (run_id, body) SELECT run_id, body FROM "
    "(SELECT run_id, (SELECT group_concat(value, ' ') FROM json_tree(data) WHERE type = 'text') AS body "
    "FROM {table}) WHERE body IS NOT NULL"
)

MIGRATIONS: dict[int, list[str]] = {
    1: [
        """CREATE TABLE runs (
            id TEXT PRIMARY KEY,
            kind TEXT NOT NULL,
            status TEXT NOT NULL,
            title TEXT NOT NULL DEFAULT '',
            model TEXT NOT NULL DEFAULT '',
            started_at REAL NOT NULL,
            ended_at REAL,
            host TEXT NOT NULL DEFAULT '',
            pid INTEGER NOT NULL DEFAULT 0,
            argv TEXT NOT NULL DEFAULT '[]',
            config TEXT NOT NULL DEFAULT '{}',
            moot_version TEXT NOT NULL DEFAULT '',
            calls INTEGER NOT NULL DEFAULT 0,
            prompt_tokens INTEGER NOT NULL DEFAULT 0,
            completion_tokens INTEGER NOT NULL DEFAULT 0,
            score REAL,
            summary TEXT NOT NULL DEFAULT '{}',
            result TEXT,
            error TEXT
        )""",
        "CREATE INDEX runs_started ON runs (started_at DESC)",
        """CREATE TABLE events (
            run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            time REAL NOT NULL,
            kind TEXT NOT NULL,
            data TEXT NOT NULL,
            PRIMARY KEY (run_id, seq)
        ) WITHOUT ROWID""",
        """CREATE TABLE items (
            run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
            item TEXT NOT NULL,
            part TEXT NOT NULL DEFAULT '',
            seq INTEGER NOT NULL,
            time REAL NOT NULL,
            correct INTEGER,
            data TEXT NOT NULL,
            PRIMARY KEY (run_id, item, part)
        )""",
    ],
    # v2: events in an ordinary rowid table. WITHOUT ROWID stores whole rows in the primary-key
    # B-tree, which costs ~3x the CPU per insert for rows of this size (a turn is ~1 kB).
    2: [
        """CREATE TABLE events_v2 (
            run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            time REAL NOT NULL,
            kind TEXT NOT NULL,
            data TEXT NOT NULL,
            PRIMARY KEY (run_id, seq)
        )""",
        "INSERT INTO events_v2 (run_id, seq, time, kind, data) "
        "SELECT run_id, seq, time, kind, data FROM events",
        "DROP TABLE events",
        "ALTER TABLE events_v2 RENAME TO events",
    ],
    # v3: full-text search over what a run says. One FTS5 table holds, per run, its title and the
    # string values of each event and item (json_tree: unescaped text, no keys); triggers keep it up
    # to date whoever writes (an older moot too), and the last statements index what the file held.
    3: [
        f"CREATE VIRTUAL TABLE search USING fts5(run_id, body, tokenize = '{_TOKENIZER}')",
        "CREATE TRIGGER search_run AFTER INSERT ON runs BEGIN "
        "INSERT INTO search (run_id, body) VALUES (new.id, new.title); END",
        "CREATE TRIGGER search_title AFTER UPDATE OF title ON runs WHEN new.title <> old.title BEGIN "
        "INSERT INTO search (run_id, body) VALUES (new.id, new.title); END",
        f"CREATE TRIGGER search_event AFTER INSERT ON events BEGIN {_INDEX_NEW}; END",
        f"CREATE TRIGGER search_item AFTER INSERT ON items BEGIN {_INDEX_NEW}; END",
        "CREATE TRIGGER search_forget AFTER DELETE ON runs BEGIN "
        "DELETE FROM search WHERE search MATCH 'run_id : \"' || old.id || '\"'; END",
        "INSERT INTO search (run_id, body) SELECT id, title FROM runs",
        _INDEX_ALL.format(table="events"),
        _INDEX_ALL.format(table="items"),
    ],
    # v4: 10,000 runs answer fast. search_docs maps each search row to its run in a small table,
    # so a search reads no text (the FTS table's run_id column sits beside each row's body: 3.5x
    # slower); the triggers of v3 now fill both. Indexes for the list's filters and sort orders.
    4: [
        "CREATE TABLE search_docs (doc INTEGER PRIMARY KEY, run_id TEXT NOT NULL)",
        "CREATE INDEX search_docs_run ON search_docs (run_id)",
        "INSERT INTO search_docs (doc, run_id) SELECT rowid, run_id FROM search",
        *(f"DROP TRIGGER {name}" for name in ("search_run", "search_title", "search_event", "search_item")),
        "DROP TRIGGER search_forget",
        "CREATE TRIGGER search_run AFTER INSERT ON runs BEGIN "
        f"INSERT INTO search (run_id, body) VALUES (new.id, new.title); {_DOC.format(run='new.id')}; END",
        "CREATE TRIGGER search_title AFTER UPDATE OF title ON runs WHEN new.title <> old.title BEGIN "
        f"INSERT INTO search (run_id, body) VALUES (new.id, new.title); {_DOC.format(run='new.id')}; END",
        f"CREATE TRIGGER search_event AFTER INSERT ON events BEGIN {_INDEX_EVERY}; "
        f"{_DOC.format(run='new.run_id')}; END",
        f"CREATE TRIGGER search_item AFTER INSERT ON items BEGIN {_INDEX_EVERY}; "
        f"{_DOC.format(run='new.run_id')}; END",
        "CREATE TRIGGER search_forget AFTER DELETE ON runs BEGIN "
        "DELETE FROM search WHERE rowid IN (SELECT doc FROM search_docs WHERE run_id = old.id); "
        "DELETE FROM search_docs WHERE run_id = old.id; END",
        "CREATE INDEX runs_kind ON runs (kind, started_at DESC)",
        "CREATE INDEX runs_status ON runs (status, started_at DESC)",
        "CREATE INDEX runs_model ON runs (model, started_at DESC)",
        "CREATE INDEX runs_cost ON runs ((prompt_tokens + completion_tokens) DESC, started_at DESC)",
        "CREATE INDEX runs_score ON runs (score IS NULL, score DESC, started_at DESC)",
    ],
    # v5: the prompts too. A result keeps each turn's messages as sent (``sent``: system prompt,
    # history, task); when a run stores its result, each distinct message text becomes one search
    # row, so words that reached a model only in a prompt (a context document) find the run.
    5: [
        "CREATE TRIGGER search_prompts AFTER UPDATE OF result ON runs WHEN new.result IS NOT NULL BEGIN "
        f"{_PROMPTS.format(run='new.id', result='new.result')}; {_DOC.format(run='new.id')}; END",
        "INSERT INTO search (run_id, body) SELECT id, body FROM "
        f"(SELECT id, ({_PROMPT_TEXT.format(result='result')}) AS body FROM runs WHERE result IS NOT NULL) "
        "WHERE body IS NOT NULL",
        "INSERT OR REPLACE INTO search_docs (doc, run_id) SELECT rowid, run_id FROM search "
        "WHERE rowid NOT IN (SELECT doc FROM search_docs)",
    ],
    # v6: a run's usage keeps every count of its Usage (``runs list`` showed attempts 0 for a run
    # whose result said 5): requests sent (``attempts``) and replies from a response cache
    # (``cached``); older runs take them from their stored result where it has a usage.
    6: [
        "ALTER TABLE runs ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE runs ADD COLUMN cached INTEGER NOT NULL DEFAULT 0",
        "UPDATE runs SET attempts = COALESCE(json_extract(result, '$.usage.attempts'), 0), "
        "cached = COALESCE(json_extract(result, '$.usage.cached'), 0) "
        "WHERE result IS NOT NULL AND json_valid(result) AND json_type(result) = 'object'",
    ],
    # v7: a search costs a third less CPU (10,000 runs, a word in every run: 32 -> 20 ms for the
    # ids). Intersecting the runs of each word joined 50,000 doc rows to 32-character run ids; each
    # doc row now also names its run by a number (runs.num, unique, given by a trigger when a run
    # is inserted), and the words' runs are intersected as integers.
    7: [
        "ALTER TABLE runs ADD COLUMN num INTEGER",
        "UPDATE runs SET num = rowid",
        "CREATE UNIQUE INDEX runs_num ON runs (num)",
        "ALTER TABLE search_docs ADD COLUMN run INTEGER",
        "UPDATE search_docs SET run = (SELECT num FROM runs WHERE runs.id = search_docs.run_id)",
        *(
            f"DROP TRIGGER {name}"
            for name in ("search_run", "search_title", "search_event", "search_item", "search_prompts")
        ),
        # Whichever of these two fires first after a run's insert, its title row ends with its number.
        "CREATE TRIGGER runs_num AFTER INSERT ON runs BEGIN "
        "UPDATE runs SET num = (SELECT COALESCE(MAX(num), 0) + 1 FROM runs) WHERE rowid = new.rowid; "
        "UPDATE search_docs SET run = (SELECT num FROM runs WHERE id = new.id) "
        "WHERE run_id = new.id AND run IS NULL; END",
        "CREATE TRIGGER search_run AFTER INSERT ON runs BEGIN "
        f"INSERT INTO search (run_id, body) VALUES (new.id, new.title); {_DOC_NUM.format(run='new.id')}; END",
        "CREATE TRIGGER search_title AFTER UPDATE OF title ON runs WHEN new.title <> old.title BEGIN "
        f"INSERT INTO search (run_id, body) VALUES (new.id, new.title); {_DOC_NUM.format(run='new.id')}; END",
        f"CREATE TRIGGER search_event AFTER INSERT ON events BEGIN {_INDEX_EVERY}; "
        f"{_DOC_NUM.format(run='new.run_id')}; END",
        f"CREATE TRIGGER search_item AFTER INSERT ON items BEGIN {_INDEX_EVERY}; "
        f"{_DOC_NUM.format(run='new.run_id')}; END",
        "CREATE TRIGGER search_prompts AFTER UPDATE OF result ON runs WHEN new.result IS NOT NULL BEGIN "
        f"{_PROMPTS.format(run='new.id', result='new.result')}; {_DOC_NUM.format(run='new.id')}; END",
    ],
    # v8: an item's number is one more than the run's highest, found in an index: counting the run's
    # items for every insert grew with the run (55 us an insert at 1,000 items, ~2.7 s over a
    # 10,000-unit bench), and a replaced item could repeat a number.
    8: ["CREATE INDEX items_seq ON items (run_id, seq)"],
    # v9: a record says when it was edited after it was written. Each run's config and result, and
    # each item's data, keep the SHA-256 of their stored text; a replay (``--from``, ``--replay``)
    # checks them and refuses a record that changed. Rows written before have none (unchecked).
    9: [
        "ALTER TABLE runs ADD COLUMN config_sha256 TEXT",
        "ALTER TABLE runs ADD COLUMN result_sha256 TEXT",
        "ALTER TABLE items ADD COLUMN data_sha256 TEXT",
    ],
}
"""Schema version -> the statements that bring version ``n - 1`` to ``n``."""

SCHEMA_VERSION = max(MIGRATIONS)


class RunRecord(BaseModel):
    """One run as the store holds it."""

    id: str
    """Unique run id (32 hex digits; any unique prefix finds it)."""
    kind: str
    """``run``, ``absa``, ``absa-eval``, ``arbitrate`` or ``bench``."""
    status: RunStatus
    """Where the run is; ``interrupted`` also for a ``running`` run whose process is gone."""
    title: str = ""
    """The topic, sentence, task or input file."""
    model: str = ""
    """The main model spec."""
    started_at: float
    """Unix time."""
    ended_at: float | None = None
    """Unix time, once finished."""
    host: str = ""
    """The machine that ran it."""
    pid: int = 0
    """Its process id."""
    argv: list[str] = Field(default_factory=list)
    """The command line."""
    config: dict[str, Any] = Field(default_factory=dict)
    """The full resolved configuration (keys redacted)."""
    moot_version: str = ""
    """The moot version that ran it."""
    usage: Usage = Field(default_factory=Usage)
    """Calls and tokens."""
    score: float | None = None
    """A headline score for sorting (bench: best accuracy; absa-eval: best F1)."""
    summary: dict[str, Any] = Field(default_factory=dict)
    """Small figures for lists (per-method accuracy, counts...)."""
    result: Any = None
    """The result as JSON data (loaded only by :meth:`RunStore.get`)."""
    error: str | None = None
    """Why it failed or was interrupted."""
    damage: str | None = None
    """What of the stored row cannot be read (a field that is not JSON), or None: such a run is
    listed (its unreadable fields empty) but not shown, exported or replayed."""
    integrity: Integrity | None = Field(default=None, exclude=True)
    """Whether the config and result are what was recorded (read by :meth:`RunStore.get`; None in
    lists, which read no result). Not in the record's JSON, so that a list's rows and a shown run
    agree; ``moot runs show`` prints it, and a replay checks it."""
    edited: list[str] = Field(default_factory=list, exclude=True)
    """The parts that changed after they were recorded (``config``, ``result``), when ``edited``."""

    @property
    def wall_s(self) -> float | None:
        """Elapsed seconds, once finished."""
        return None if self.ended_at is None else self.ended_at - self.started_at


class StoredEvent(BaseModel):
    """One event of a run."""

    seq: int
    time: float
    kind: str
    data: dict[str, Any]


class StoredItem(BaseModel):
    """One item outcome of a run (a bench unit, an ABSA sentence)."""

    item: str
    part: str = ""
    seq: int
    time: float
    correct: bool | None = None
    data: dict[str, Any]
    integrity: Integrity = "unsealed"
    """Whether ``data`` is what was recorded (see :data:`Integrity`)."""
