"""No credential from an endpoint URL in any stored byte, output line, file or viewer page.

Every command runs against a real OpenAI-compatible server on 127.0.0.1 whose URL carries
the secret as ``?api_key=`` (in ``$OPENAI_BASE_URL`` or in the spec's ``base_url``) or as
``user:pass@``; afterwards the secret is looked for in the store file (its WAL too), in
every file the commands wrote, in what they printed, in ``moot runs`` and in the viewer.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine_helpers import write_gold
from fault_server import Fate, FaultServer, schema_reply
from moot import models, redact
from moot.cli import main
from moot.models import base

SECRET = "SECRETzz9q"


def _ok(n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
    return Fate("ok", content=schema_reply(body))


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultServer]:
    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with FaultServer(_ok) as srv:
        yield srv
    for spec in [s for s in models._CACHE if s.startswith("openai:")]:
        models._CACHE.pop(spec, None)


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("http://user:pw@h/v1?api_key=K&model=m", "http://***@h/v1?api_key=***&model=m"),
        (
            "openai:m?base_url=http%3A%2F%2Fu%3Apw%40h%2Fv1%3Ftoken%3DK",
            "openai:m?base_url=http%3A%2F%2F***%40h%2Fv1%3Ftoken%3D***",
        ),
        ("https://h/x?sig=a;access_token=b#f", "https://h/x?sig=***;access_token=***#f"),
        (
            "openai:m?base_url=http://h/v1&api_key_env=GPU_KEY",
            "openai:m?base_url=http://h/v1&api_key_env=GPU_KEY",
        ),
        ("mail me@example.com or see //host/path@x", "mail me@example.com or see //host/path@x"),
        ("http://u:p@ss@h/v1", "http://***@h/v1"),
    ],
)
def test_urls_keep_their_shape_without_the_secret(raw: str, shown: str) -> None:
    assert redact.text(raw) == shown
    assert redact.text(shown) == shown  # masking twice changes nothing


def test_params_named_in_the_environment_are_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOOT_REDACT_PARAMS", "Session, x-my-auth")
    assert redact.text("http://h/?session=1&X-My-Auth=2&x=3") == "http://h/?session=***&X-My-Auth=***&x=3"


def test_json_text_stays_valid_json() -> None:
    data = {"a": 'http://h/?key=abc"q', "b": "http://u:p@h/\nz", "max_tokens": 5, "api_key": "k"}
    masked = json.loads(redact.text(json.dumps(data)))
    assert masked["a"] == 'http://h/?key=***"q' and masked["b"] == "http://***@h/\nz"
    assert redact.data(data)["api_key"] == "***" and redact.data(data)["max_tokens"] == 5


def _files(root: Path) -> Iterator[Path]:
    yield from (p for p in root.rglob("*") if p.is_file())


def _commands(url: str, tmp: Path) -> list[tuple[list[str], dict[str, str]]]:
    tmp.mkdir(exist_ok=True)
    gold = write_gold(tmp / "gold.jsonl")
    reports = tmp / "reports.json"
    finding = {"metric": "unemployment_rate", "citation": "[GCC-STAT]", "confidence": 0.9}
    reports.write_text(
        json.dumps(
            {
                "reports": [
                    {"agent": "A", "findings": [finding | {"value": 0.10}]},
                    {"agent": "B", "findings": [finding | {"value": 0.12, "citation": "[World Bank]"}]},
                ]
            }
        )
    )
    spec = f"openai:M?base_url={url}"
    bench = ["bench", "--n", "2", "--methods", "single", "--no-plots"]
    return [
        (["run", "Is x?", "--model", "openai:M"], {"OPENAI_BASE_URL": url}),
        (["run", "Is x?", "--model", spec], {}),
        ([*bench, "--model", spec, "--out", str(tmp / "b1")], {}),
        ([*bench, "--model", "openai:M", "--out", str(tmp / "b2")], {"OPENAI_BASE_URL": url}),
        (["absa", "The food was great.", "--model", spec], {}),
        (["absa-eval", str(gold), "--model", spec, "--out", str(tmp / "ae"), "--no-ablations"], {}),
        (["arbitrate", str(reports), "--model", spec], {}),
    ]


def _look_everywhere(tmp: Path, store: Path, printed: str) -> None:
    assert SECRET not in printed
    for path in [*_files(tmp), *store.parent.glob(store.name + "*")]:
        assert SECRET.encode() not in path.read_bytes(), path


def test_a_key_in_the_url_is_in_no_record_line_file_or_page(
    server: FaultServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store" / "runs.db"
    monkeypatch.setenv("MOOT_STORE", str(store))
    url = f"{server.url}?api_key={SECRET}"
    for args, env in _commands(url, tmp_path / "work"):
        with monkeypatch.context() as m:
            for k, v in env.items():
                m.setenv(k, v)
            assert main(args) == 0, args
    assert all("api_key=" in p for p in server.paths)  # the key did reach the server, in the query
    # A resume asks for the credential again instead of reading it from the record.
    b1 = str(tmp_path / "work" / "b1")
    assert main(["bench", "--resume", b1, "--n", "3", "--no-plots"]) == 2
    assert "held a credential" in capsys.readouterr().err
    resume = ["bench", "--resume", b1, "--n", "3", "--no-plots", "--model", f"openai:M?base_url={url}"]
    assert main(resume) == 0
    assert main(["runs", "list"]) == 0
    assert main(["runs", "list", "--json"]) == 0
    printed = capsys.readouterr()
    ids = [r["id"] for r in json.loads(printed.out.splitlines()[-1])["runs"]]
    assert len(ids) == 7
    assert any("api_key=***" in json.dumps(r) for r in json.loads(printed.out.splitlines()[-1])["runs"])
    for run_id in ids:
        assert main(["runs", "show", run_id]) == 0
        assert main(["runs", "show", "--json", run_id]) == 0
        assert main(["runs", "export", run_id]) == 0
    shown = capsys.readouterr()
    _look_everywhere(tmp_path, store, printed.out + printed.err + shown.out + shown.err)
    _pages(store, ids)


def _pages(store: Path, ids: list[str]) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from moot.view import create_app

    client = TestClient(create_app(store), base_url="http://127.0.0.1:7575")
    paths = ["/", "/api/runs"]
    for run_id in ids:
        paths += [
            f"/runs/{run_id}",
            f"/api/runs/{run_id}",
            f"/api/runs/{run_id}/events",
            f"/api/runs/{run_id}/items",
        ]
    for path in paths:
        page = client.get(path)
        assert page.status_code == 200, path
        assert SECRET not in page.text, path


def test_user_and_password_in_the_url_is_refused_without_showing_them(
    server: FaultServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store" / "runs.db"
    monkeypatch.setenv("MOOT_STORE", str(store))
    url = server.url.replace("http://", f"http://user:{SECRET}@")
    for args, env in _commands(url, tmp_path / "work"):
        with monkeypatch.context() as m:
            for k, v in env.items():
                m.setenv(k, v)
            assert main(args) == 2, args
        err = capsys.readouterr().err
        assert "http://***@127.0.0.1" in err and "user name and password" in err, args
    assert server.requests == 0
    _look_everywhere(tmp_path, store, "")


def test_a_store_written_before_masking_shows_no_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from moot.runs import RunStore

    path = tmp_path / "old.db"
    with RunStore(path) as store:
        run_id = store.create_run("run", title="t", model="openai:m")
    leaked = f"openai:m?base_url=http://u:{SECRET}@h/v1?api_key={SECRET}"
    with sqlite3.connect(path) as db:  # what an older moot wrote, unmasked
        db.execute(
            "UPDATE runs SET model = ?, argv = ?, config = ?, error = ? WHERE id = ?",
            (leaked, json.dumps(["moot", "--model", leaked]), json.dumps({"model": leaked}), leaked, run_id),
        )
    for args in (
        ["runs", "list", "--store", str(path)],
        ["runs", "show", "--json", run_id, "--store", str(path)],
    ):
        assert main(args) == 0
    out = capsys.readouterr().out
    assert SECRET not in out and "http://***@h/v1?api_key=***" in out
