"""``moot absa --from RUN_ID --replay`` against a real local server that counts requests."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import pytest

from fault_server import Fate, FaultServer, schema_reply, without_timings
from moot import models
from moot.cli import main
from moot.runs import RunStore

pytestmark = pytest.mark.integration

SENTENCES = [
    "The pasta was great but the service was slow.",
    "The battery lasts all day, the screen is dim.",
    "Friendly staff and a tiny menu.",
]
TERMS = ("pasta", "service", "battery", "screen", "staff", "menu")


def _absa_server(n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
    """Replies like a sampling model: aspects found in the sentence, polarities and numbers drawn."""
    if n == 0:
        return Fate(content="Sure! Here is the analysis you asked for.")  # invalid: a repair follows
    rng = random.Random(n)
    reply = json.loads(schema_reply(body))
    system = body["messages"][0]["content"]
    found = re.search(r"SENTENCE:\s*\n(.+)", system)
    sentence = found.group(1).strip() if found else ""
    terms = [t for t in TERMS if t in sentence]
    name = (body.get("response_format") or {}).get("json_schema", {}).get("name")
    if name == "AteOutput":
        reply["aspects"] = [
            {"term": t, "start": sentence.index(t), "end": sentence.index(t) + len(t)} for t in terms
        ]
    if name == "AtsaOutput":
        reply["aspect_sentiments"] = [
            {"aspect": t, "polarity": rng.choice(["positive", "negative"]), "confidence": 0.9} for t in terms
        ]
    for key, value in reply.items():
        if isinstance(value, float):
            reply[key] = round(rng.random(), 3)
    if "label" in reply:
        reply["label"] = rng.choice(["positive", "negative", "mixed"])
    return Fate(content=json.dumps(reply))


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Any:
    with FaultServer(_absa_server) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        yield srv
    models._CACHE.pop("openai:m", None)  # resolved against this server: must not outlive it


def _without_timings(data: Any) -> Any:
    # The request times and a turn's model (``replay:...`` in a replay, so also the model that
    # ruled a deciding step) differ too.
    return without_timings(data, also=("started", "ended", "model", "ruled_by"))


def _newest(store: Path) -> Any:
    with RunStore(store) as opened:
        return opened.get(opened.list()[0].id)


def test_moot_absa_from_replay_one_sentence(
    server: FaultServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "runs.db"
    base = ["--store", str(store), "--json"]
    assert main(["absa", SENTENCES[0], "--model", "openai:m", *base]) in (0, 1)
    first = json.loads(capsys.readouterr().out)
    source = _newest(store)
    served = server.requests
    assert served == first["usage"]["calls"] and served > 6  # the stages, a repair, the debate
    assert [r["attempt"] for r in source.result["stage_requests"][:2]] == [0, 1]  # the repair is kept

    code = main(["absa", "--from", source.id[:8], "--replay", *base])
    said = capsys.readouterr()
    again = json.loads(said.out)
    assert server.requests == served  # 0 requests
    assert _without_timings(again) == _without_timings(first)
    assert again["usage"]["calls"] == 0 and again["usage"]["cached"] == served
    assert f"replay: {served} replies from the record, 0 requests sent" in said.err
    assert code == (1 if first["errors"] else 0)
    replayed = _newest(store)  # a new run, linked to its source
    assert replayed.id != source.id
    assert replayed.config["from_run"] == source.id and replayed.config["replay"] == {"from_run": source.id}
    assert replayed.config["sentence"] == SENTENCES[0]
    assert main(["runs", "show", replayed.id, "--store", str(store)]) == 0
    assert f"replay of run {source.id}" in capsys.readouterr().out
    # A replay replays in turn; --from without --replay runs it live, with the model it replayed.
    assert main(["absa", "--from", replayed.id, "--replay", *base]) == code
    assert _newest(store).model == "replay:openai:m"
    assert _without_timings(json.loads(capsys.readouterr().out)) == _without_timings(first)
    assert server.requests == served
    assert main(["absa", "--from", replayed.id, *base]) in (0, 1)
    live = json.loads(capsys.readouterr().out)
    assert server.requests == served + live["usage"]["calls"] and live["usage"]["calls"] > 6
    assert _newest(store).config["model"] == "openai:m"
    served = server.requests

    # A setting that needs replies never recorded: the stage and the sentence named, nothing sent.
    assert main(["absa", SENTENCES[1], "--model", "openai:m", "--config", "abl_no_debate", *base]) in (0, 1)
    capsys.readouterr()
    no_debate, served = _newest(store), server.requests
    code = main(["absa", "--from", no_debate.id, "--replay", "--config", "default", *base])
    said = capsys.readouterr()
    assert server.requests == served and code == 1
    assert "no recorded reply for analyst (turn, round 1) of sentence: 'The battery lasts all day" in said.err
    assert (
        "no reply for analyst (round 1, turn, sentence 'The battery"
        in json.loads(said.out)["errors"]["debate:turn:analyst:r1"]
    )


def test_moot_absa_from_replay_a_batch(
    server: FaultServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "runs.db"
    inp = tmp_path / "in.jsonl"
    inp.write_text(
        "".join(json.dumps({"id": f"s{i}", "sentence": s}) + "\n" for i, s in enumerate(SENTENCES))
    )
    first, again = tmp_path / "first.jsonl", tmp_path / "again.jsonl"
    argv = ["absa", "--input", str(inp), "--model", "openai:m", "--store", str(store), "--concurrency", "3"]
    assert main([*argv, "--output", str(first)]) in (0, 1)
    source, served = _newest(store), server.requests
    capsys.readouterr()
    code = main(
        [
            "absa",
            "--from",
            source.id,
            "--replay",
            "--output",
            str(again),
            "--concurrency",
            "3",
            "--store",
            str(store),
        ]
    )
    said = capsys.readouterr()
    assert server.requests == served  # 0 requests
    rows = [[json.loads(line) for line in path.read_text().splitlines()] for path in (first, again)]
    by_id = [{r["id"]: _without_timings(r) for r in rs} for rs in rows]
    assert by_id[1] == by_id[0] and set(by_id[0]) == {"s0", "s1", "s2"}
    assert all(r["usage"]["calls"] == 0 for r in rows[1])
    assert f"replay: {served} replies from the record" in said.err
    assert code == (1 if any(r["errors"] for r in rows[0]) else 0)
    replayed = _newest(store)
    assert replayed.config["replay"] == {"from_run": source.id} and replayed.config["batch"] is True
    assert main(["absa", "--from", source.id, "--replay", "--store", str(store)]) == 2
    assert "--from a batch needs --output" in capsys.readouterr().err
    # --from without --replay: the recorded sentences again, live, under their ids.
    live = tmp_path / "live.jsonl"
    assert main(["absa", "--from", source.id, "--output", str(live), "--store", str(store)]) in (0, 1)
    ids = [json.loads(line)["id"] for line in live.read_text().splitlines()]
    assert sorted(ids) == ["s0", "s1", "s2"] and server.requests > served
    assert _newest(store).config["from_run"] == source.id and "replay" not in _newest(store).config


def test_moot_absa_replay_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["absa", "Nice.", "--replay", "--no-store"]) == 2
    assert "give --from RUN_ID" in capsys.readouterr().err
    store = tmp_path / "runs.db"
    assert main(["run", "Tea or coffee?", "--model", "test", "--store", str(store), "--json"]) == 0
    capsys.readouterr()
    debate = _newest(store).id
    assert main(["absa", "--from", debate, "--replay", "--store", str(store)]) == 2
    assert "not an ABSA run" in capsys.readouterr().err
