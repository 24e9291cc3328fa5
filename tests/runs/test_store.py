from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from moot import Debate
from moot.errors import UsageError
from moot.models import ModelRequest
from moot.models.testing import FunctionModel
from moot.runs import SCHEMA_VERSION, RunStore, load_result, recording, redact
from moot.runs.recording import redact_argv
from moot.transcript import DebateResult

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _answer_model(delay: float = 0.0) -> FunctionModel:
    def reply(req: ModelRequest) -> dict[str, object]:
        meta = req.metadata
        if meta["phase"] == "judge":
            return {"final_answer": "merged", "citations": []}
        return {"answer": f"{meta['speaker']} says r{meta['round']}", "confidence": 0.7}

    return FunctionModel(reply, delay=delay, name="test:answers")


def test_new_store_is_wal_with_current_schema(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "runs.db"
    with RunStore(path) as store:
        assert store.schema_version == SCHEMA_VERSION
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()


def test_migration_from_an_empty_file_and_refusal_of_a_newer_schema(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    sqlite3.connect(path).close()  # a version-0 file: no tables at all
    with RunStore(path) as store:
        rid = store.create_run("run", title="t")
        assert store.get(rid).title == "t"
    db = sqlite3.connect(path)
    db.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION + 1,))
    db.commit()
    db.close()
    with pytest.raises(UsageError, match="upgrade moot"):
        RunStore(path)


def test_not_a_store_is_a_usage_error(tmp_path: Path) -> None:
    bad = tmp_path / "runs.db"
    bad.write_text("this is not sqlite " * 100)
    with pytest.raises(UsageError, match="not a moot run store"):
        RunStore(bad)
    with pytest.raises(UsageError, match="no run store"):
        RunStore(tmp_path / "missing.db", must_exist=True)


def test_recorded_debate_loads_back_as_the_same_result(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.db")
    debate = Debate("answer", model=_answer_model())
    with recording("run", title="Why?", model="test:answers", store=store, argv=["moot", "run"]) as rec:
        result = debate.run_sync("Why?", on_event=rec.on_event)
        rec.finish(result)
    run = store.get(rec.run_id or "")
    assert run.status == "complete" and run.ended_at is not None and run.usage.calls == result.usage.calls
    assert run.config["prompts_sha256"] and run.moot_version
    assert load_result(store, run.id[:6]) == result
    kinds = [e.kind for e in store.events(run.id)]
    assert kinds[0] == "debate_started" and kinds[-1] == "debate_completed"
    assert kinds.count("turn_completed") == 4 and kinds.count("judge_completed") == 1
    last = store.events(run.id)[-1].data
    assert last["outcome"] == {"final_answer": "merged", "fallback": None} and "result" not in last


def test_exceptions_set_failed_or_interrupted(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.db")
    with pytest.raises(ValueError), recording("run", store=store) as failed:
        raise ValueError("boom")
    with pytest.raises(KeyboardInterrupt), recording("run", store=store) as stopped:
        raise KeyboardInterrupt
    with pytest.raises(SystemExit), recording("bench", store=store) as partial:
        partial.finish(status="fell_back")
        raise SystemExit(1)  # an exit code after finish() keeps finish()'s status
    assert store.get(failed.run_id or "").status == "failed"
    assert "ValueError: boom" in (store.get(failed.run_id or "").error or "")
    assert store.get(stopped.run_id or "").status == "interrupted"
    assert store.get(partial.run_id or "").status == "fell_back"


def test_disabled_store_records_nothing(tmp_path: Path) -> None:
    with recording("run", store=tmp_path / "runs.db", enabled=False) as rec:
        rec.event("x", {"a": 1})
        rec.finish({"a": 1})
    assert rec.run_id is None and not (tmp_path / "runs.db").exists()


def test_keys_are_never_stored(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.db")
    cfg = {"model": {"spec": "openai:x", "api_key": "sk-secret"}, "headers": [{"Authorization": "Bearer s"}]}
    argv = ["moot", "view", "--token", "hunter2", "--api-key=sk-2"]
    with recording("run", config=cfg, argv=argv, store=store) as rec:
        pass
    run = store.get(rec.run_id or "")
    text = json.dumps(run.model_dump(mode="json"))
    assert "sk-secret" not in text and "hunter2" not in text and "sk-2" not in text and "Bearer s" not in text
    assert run.config["model"] == {"spec": "openai:x", "api_key": "***"}
    assert redact_argv(argv) == ["moot", "view", "--token", "***", "--api-key=***"]
    assert redact({"token": None, "max_tokens": 5, "key": "judge"}) == {
        "token": None,
        "max_tokens": 5,
        "key": "judge",
    }


def test_the_cheap_secret_check_agrees_with_the_regex() -> None:
    from moot.runs.recording import _SECRET_IN_JSON, _may_hold_secret

    secret = ["api_key", "API-KEY", "apikey", "openai_api_key", "token", "access_token", "Auth-Token"]
    secret += ["client_secret", "Password", "passwd", "authorization", "bearer", "credential", "credentials"]
    plain = ["key", "max_tokens", "tokens", "keys", "mytoken", "secrets", "author", "model"]
    for name in secret + plain:
        text = json.dumps({"outer": {name: "v"}, "persona": {"key": "judge"}})
        assert _may_hold_secret(text) == bool(_SECRET_IN_JSON.search(text)) == (name in secret), name


def test_list_filters_sorts_and_prefixes(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.db")
    a = store.create_run("run", title="Is tea good?", model="openai:a")
    b = store.create_run("bench", title="arithmetic", model="local")
    store.update(b, score=0.5, status="complete")
    store.update(a, score=0.9)
    assert [r.id for r in store.list()] == [b, a]
    assert [r.id for r in store.list(kind="run")] == [a]
    assert [r.id for r in store.list(model="OPENAI")] == [a]
    assert [r.id for r in store.list(search="tea")] == [a]
    assert [r.id for r in store.list(status="complete")] == [b]
    assert [r.id for r in store.list(sort="score")] == [a, b]
    assert store.resolve_id(a[:8]) == a
    with pytest.raises(UsageError, match="no run"):
        store.get("ffff0000")
    assert store.delete(a[:6]) == a and [r.id for r in store.list()] == [b]


_WRITER = textwrap.dedent(
    """
    import sys
    from moot import Debate
    from moot.models.testing import FunctionModel
    from moot.runs import RunStore, recording

    def reply(req):
        return {"message": f"{req.metadata['speaker']} r{req.metadata['round']}", "key_points": []}

    store = RunStore(sys.argv[1], background=True)  # as the CLI opens it
    model = FunctionModel(reply, delay=0.05, name="test:slow")
    debate = Debate("panel", model=model, overrides={"rounds": 50})

    def on_event(event):
        rec.on_event(event)
        if event.kind == "turn_completed":
            rec.flush()
            print("turn", flush=True)  # printed only after the event is committed

    with recording("run", title="killed", store=store) as rec:
        print(rec.run_id, flush=True)
        debate.run_sync("Will it survive?", on_event=on_event)
    """
)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}


def test_sigkilled_writer_leaves_an_interrupted_run_with_every_committed_turn(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(path)], stdout=subprocess.PIPE, text=True, env=_env()
    )
    assert proc.stdout is not None
    run_id = proc.stdout.readline().strip()
    seen = 0
    while seen < 5:
        line = proc.stdout.readline()
        assert line, "the writer ended early"
        seen += line.startswith("turn")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    proc.stdout.close()
    with RunStore(path) as store:
        run = store.get(run_id)
        assert run.status == "interrupted" and run.ended_at is None
        turns = [e for e in store.events(run_id) if e.kind == "turn_completed"]
        assert len(turns) >= seen
        seqs = [e.seq for e in store.events(run_id)]
        assert seqs == list(range(1, len(seqs) + 1))
        assert [r.id for r in store.list(status="interrupted")] == [run_id]
        store.create_run("run")  # and the file takes new runs


_CONCURRENT = textwrap.dedent(
    """
    import sys
    from moot.runs import RunStore
    store = RunStore(sys.argv[1])
    rid = store.create_run("bench", title=sys.argv[2])
    for i in range(300):
        store.append_event(rid, i + 1, "tick", '{"i": %d}' % i)
        store.put_item(rid, str(i), "m", '{"i": %d}' % i, correct=i % 2 == 0)
    store.update(rid, status="complete", ended=True)
    """
)


def test_concurrent_writer_processes_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    RunStore(path).close()
    procs = [
        subprocess.Popen([sys.executable, "-c", _CONCURRENT, str(path), f"w{i}"], env=_env())
        for i in range(4)
    ]
    deadline = time.time() + 120
    for p in procs:
        assert p.wait(timeout=max(1, deadline - time.time())) == 0
    with RunStore(path) as store:
        runs = store.list()
        assert sorted(r.title for r in runs) == ["w0", "w1", "w2", "w3"]
        for r in runs:
            assert r.status == "complete"
            assert store.counts(r.id) == (300, 300)
            assert sum(1 for i in store.iter_items(r.id) if i.correct) == 150


def test_debate_result_from_events_matches_when_result_is_missing(tmp_path: Path) -> None:
    # A run interrupted before its end has no result, but its turns are readable from the events.
    from moot.app.records import run_turns

    store = RunStore(tmp_path / "runs.db")
    with recording("run", store=store) as rec:
        result = Debate("answer", model=_answer_model()).run_sync("Q?", on_event=rec.on_event)
    record = store.get(rec.run_id or "")
    assert record.result is None and load_result(store, record.id) is None
    turns = [t for _, t in run_turns(store, record)]
    assert turns == result.turns(include_judge=True)
    assert isinstance(result, DebateResult)


def test_data_frames_of_runs_turns_and_units(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas", reason="data frames need the pandas extra")
    from moot.app.records import runs_frame, turns_frame

    store = RunStore(tmp_path / "runs.db")
    with recording("run", title="Why?", store=store) as rec:
        result = Debate("answer", model=_answer_model()).run_sync("Why?", on_event=rec.on_event)
        rec.finish(result)
    runs = runs_frame(store)
    assert isinstance(runs, pd.DataFrame) and list(runs["title"]) == ["Why?"] and runs["calls"][0] == 5
    turns = turns_frame(store, rec.run_id or "")
    assert len(turns) == 5 and set(turns["phase"]) == {"turn", "judge"} and turns["ok"].all()


def test_background_writer_batches_and_reads_see_every_write(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.db", background=True)
    with recording("run", store=store, title="bg") as rec:
        for i in range(500):
            rec.event("tick", {"i": i})
        assert store.counts(rec.run_id or "") == (500, 0)  # a read waits for the queue
    other = RunStore(tmp_path / "runs.db")  # another connection sees it all committed
    run = other.get(rec.run_id or "")
    assert run.status == "complete" and run.ended_at is not None and len(other.events(run.id)) == 500
    store.close()
    other.close()


def test_a_failing_background_write_is_reported_not_lost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = RunStore(tmp_path / "runs.db", background=True)
    with recording("run", store=store) as rec:
        rec.event("tick", {"i": 1})
        assert rec.store is not None and rec.run_id is not None
        rec.store.append_event(rec.run_id, 1, "tick", "{}")  # a duplicate seq: the batch fails
        rec.event("tick", {"i": 2})
        rec.flush()
    assert rec.store is None  # recording stopped, and said so once
    assert capsys.readouterr().err.count("no longer recorded") == 1


def test_a_version_1_store_is_migrated_in_place_with_its_runs(tmp_path: Path) -> None:
    from moot.runs.store import MIGRATIONS

    path = tmp_path / "runs.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    for statement in MIGRATIONS[1]:
        db.execute(statement)
    db.execute("INSERT INTO schema_version VALUES (1)")
    db.execute("INSERT INTO runs (id, kind, status, started_at) VALUES ('ab12cd34', 'run', 'complete', 1.0)")
    db.execute("INSERT INTO events VALUES ('ab12cd34', 1, 1.0, 'debate_started', '{\"message\": \"old\"}')")
    db.commit()
    db.close()
    with RunStore(path) as store:
        assert store.schema_version == SCHEMA_VERSION
        assert [e.data for e in store.events("ab12cd34")] == [{"message": "old"}]
        store.append_event("ab12cd34", 2, "debate_completed", "{}")
        assert store.counts("ab12cd34") == (2, 0)
    with RunStore(path, must_exist=True) as again:  # reopening changes nothing
        assert again.schema_version == SCHEMA_VERSION


def _version_2_store(path: Path) -> None:
    from moot.runs.store import MIGRATIONS

    db = sqlite3.connect(path)
    db.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    for number in (1, 2):
        for statement in MIGRATIONS[number]:
            db.execute(statement)
        db.execute("INSERT INTO schema_version VALUES (?)", (number,))
    db.execute(
        "INSERT INTO runs (id, kind, status, title, started_at) "
        "VALUES ('ab12cd34', 'run', 'complete', 'Tea?', 1)"
    )
    turn = {"turn": {"content": {"message": "Oolong\nsteeps longer than sencha"}}}
    db.execute("INSERT INTO events VALUES ('ab12cd34', 1, 1.0, 'turn_completed', ?)", (json.dumps(turn),))
    sent = {"rounds": [{"turns": [{"sent": [{"role": "user", "content": "Darjeeling first flush"}]}]}]}
    db.execute("UPDATE runs SET result = ? WHERE id = 'ab12cd34'", (json.dumps(sent),))
    db.commit()
    db.close()


def test_search_finds_words_inside_turns_items_and_titles_and_forgets_deleted_runs(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.db")
    a = store.create_run("run", title="Is tea good?")
    store.append_event(
        a, 1, "turn_completed", json.dumps({"turn": {"content": {"message": "Café\nculture"}}})
    )
    b = store.create_run("bench", title="arithmetic")
    store.put_item(b, "arithmetic-1", "vote:3", json.dumps({"rounds": [[{"text": "carry the seven"}]]}))
    assert [r.id for r in store.list(search="culture")] == [a]  # after a newline in the JSON text
    assert [r.id for r in store.list(search="cafe tea")] == [
        a
    ]  # words of the title and a turn, accents folded
    assert [r.id for r in store.list(search="seven arith")] == [b]  # an item's text; word prefixes
    assert store.list(search="tea seven") == [] and store.count(search="tea seven") == 0
    assert store.list(search="speaker") == []  # JSON keys are not text
    store.update(b, title="arithmetic · single, vote:3 · n=6")
    assert [r.id for r in store.list(search="vote")] == [b]
    store.append_event(b, 1, "bench_started", json.dumps({"total": 6}))  # no text: an empty row
    # Every search row has its run: 2 titles, 1 new title, 2 events, 1 item.
    joined = (
        "SELECT COUNT(*) FROM search JOIN search_docs d ON d.doc = search.rowid AND d.run_id = search.run_id"
    )
    assert store._execute(joined).fetchone()[0] == 6
    assert store._execute("SELECT COUNT(*) FROM search").fetchone()[0] == 6
    store.delete(a)
    assert store._execute("SELECT COUNT(*) FROM search WHERE run_id = ?", (a,)).fetchone()[0] == 0
    assert store._execute("SELECT COUNT(*) FROM search_docs WHERE run_id = ?", (a,)).fetchone()[0] == 0


def test_paging_with_a_total(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.db")
    ids = [store.create_run("run", title=f"topic {i}", model="m") for i in range(7)]
    newest_first = [r.id for r in store.list()]
    assert sorted(newest_first) == sorted(ids)
    assert [r.id for r in store.list(limit=3, offset=3)] == newest_first[3:6]
    assert [r.id for r in store.list(offset=5)] == newest_first[5:]
    assert store.count() == 7 and store.count(kind="bench") == 0
    store.update(ids[0], status="complete")
    assert store.count(status="running") == 6 and len(store.list(status="running", limit=2, offset=5)) == 1
    assert store.models() == ["m"]


def test_an_older_store_is_indexed_on_first_open_even_by_a_reader(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    _version_2_store(path)
    with RunStore(path, must_exist=True) as store:
        assert store.schema_version == SCHEMA_VERSION
        assert [r.id for r in store.list(search="sencha")] == ["ab12cd34"]
        assert [r.id for r in store.list(search="darjeeling")] == ["ab12cd34"]  # in a prompt it was sent


def test_a_read_only_older_store_is_read_as_it_is_with_title_search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "runs.db"
    _version_2_store(path)

    def refused(self: RunStore) -> None:  # what SQLite says for a file this process may not write
        raise sqlite3.OperationalError("attempt to write a readonly database")

    monkeypatch.setattr(RunStore, "_upgrade", refused)
    with RunStore(path, must_exist=True) as store:
        assert store.schema_version == 2
        assert [r.id for r in store.list(search="tea")] == ["ab12cd34"]
        assert store.list(search="sencha") == []
    with pytest.raises(UsageError, match="not a usable run store"):
        RunStore(path)  # a writer must upgrade


def test_search_finds_words_that_reached_the_model_only_in_a_prompt(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.db")
    debate = Debate("answer", model=_answer_model(), store=store)
    result = debate.run_sync("Is tea good?", context={"docs": ["Quercetin levels in oolong"]})
    assert any("Quercetin" in m.content for t in result.turns() for m in (t.sent or []))
    (run,) = store.list()
    events = " ".join(json.dumps(e.data) for e in store.events(run.id))
    assert "Quercetin" not in events  # said only in the prompts
    assert [r.id for r in store.list(search="quercetin")] == [run.id]
    joined = (
        "SELECT COUNT(*) FROM search JOIN search_docs d ON d.doc = search.rowid AND d.run_id = search.run_id"
    )
    assert store._execute(joined).fetchone()[0] == store._execute("SELECT COUNT(*) FROM search").fetchone()[0]


def test_every_search_row_names_its_run_by_number_whoever_inserts_the_run(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    _version_2_store(path)  # migrated on open: its run and search rows get their number
    store = RunStore(path)
    a = store.create_run("run", title="Is tea good?")
    store.append_event(a, 1, "turn_completed", json.dumps({"turn": {"content": {"message": "genmaicha"}}}))
    store.flush()
    with sqlite3.connect(path) as db:  # a run written by hand, outside RunStore, is numbered too
        db.execute(
            "INSERT INTO runs (id, kind, status, title, started_at) "
            "VALUES ('ef56ab78', 'run', 'complete', 'Hojicha', 3)"
        )
    nums = dict(store._execute("SELECT id, num FROM runs").fetchall())
    assert sorted(nums.values()) == [1, 2, 3]
    wrong = store._execute(
        "SELECT COUNT(*) FROM search_docs d JOIN runs r ON r.id = d.run_id WHERE d.run IS NOT r.num"
    ).fetchone()[0]
    assert wrong == 0 and store._execute("SELECT COUNT(*) FROM search_docs").fetchone()[0] >= 5
    assert [r.id for r in store.list(search="sencha")] == ["ab12cd34"]
    assert [r.id for r in store.list(search="genmaicha tea")] == [a]
    assert [r.id for r in store.list(search="hojicha")] == ["ef56ab78"] and store.count(search="hojicha") == 1
    store.delete(a)
    assert (
        store.create_run("run", title="after a delete")
        and len(set(n for (n,) in store._execute("SELECT num FROM runs").fetchall())) == 3
    )


def test_item_numbers_follow_the_order_of_recording_and_a_replaced_one_moves_last(tmp_path: Path) -> None:
    with RunStore(tmp_path / "runs.db") as store:
        run_id = store.create_run("bench", title="t")
        for item in ("a", "b", "c"):
            store.put_item(run_id, item, "m", "{}")
        store.put_item(run_id, "a", "m", '{"again": 1}')  # a replace: its old number must not repeat
        store.put_item(run_id, "d", "m", "{}")
        items = list(store.iter_items(run_id))
        assert [(i.item, i.seq) for i in items] == [("b", 2), ("c", 3), ("a", 4), ("d", 5)]
        plan = store._db.execute(
            "EXPLAIN QUERY PLAN SELECT COALESCE(MAX(seq), 0) + 1 FROM items WHERE run_id = ?", ("x",)
        ).fetchall()
        assert "items_seq" in str(plan)  # found in the index, not by reading the run's items


def _priced_run(store: RunStore) -> str:
    from moot.models import Usage

    run_id = store.create_run("run", title="Tea?", config={"topic": "Tea?"})
    usage = Usage(calls=2, prompt_tokens=100, completion_tokens=20, cost_usd=0.00123, cost_source="price=")
    store.update(run_id, status="complete", usage=usage, result_json='{"final_answer": "yes"}', ended=True)
    return run_id


def test_a_run_keeps_its_cost_and_its_digests_side_by_side(tmp_path: Path) -> None:
    # The cost columns (schema 10) and the digests (schema 9) are both read from one row: a read
    # whole checks the digests of the result it loads and still has the run's cost.
    path = tmp_path / "runs.db"
    with RunStore(path) as store:
        run_id = _priced_run(store)
        record = store.get(run_id)
        assert (record.integrity, record.result) == ("intact", {"final_answer": "yes"})
        assert (record.usage.cost_usd, record.usage.cost_source) == (0.00123, "price=")
        (listed,) = store.list()
        assert (listed.usage.cost_usd, listed.result) == (0.00123, None)
    db = sqlite3.connect(path)
    db.execute('UPDATE runs SET result = \'{"final_answer": "no"}\'')
    db.commit()
    db.close()
    with RunStore(path) as store:
        record = store.get(run_id)
        assert (record.integrity, record.edited, record.usage.cost_usd) == ("edited", ["result"], 0.00123)


def test_a_schema_9_store_gets_the_cost_columns_and_keeps_its_digests(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    with RunStore(path) as store:
        run_id = _priced_run(store)
    db = sqlite3.connect(path)  # back to schema 9: digests, no cost columns
    for column in ("cost_usd", "cost_source", "cost_note"):
        db.execute(f"ALTER TABLE runs DROP COLUMN {column}")
    db.execute("UPDATE schema_version SET version = 9")
    db.commit()
    db.close()
    with RunStore(path) as store:
        assert store.schema_version == SCHEMA_VERSION
        record = store.get(run_id)
        assert (record.integrity, record.result) == ("intact", {"final_answer": "yes"})
        assert (record.usage.cost_usd, record.usage.cost_note) == (None, "recorded before moot kept costs")
