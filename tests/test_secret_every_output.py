"""A credential in an endpoint URL reaches no output of any command: files, store, spans, pages, terminal.

``tests/test_hardening_secrets.py`` covers the store, the viewer and the files of ``bench`` and
``absa-eval``. Here every command also writes every output it has (``run --out``, ``--json``,
``run --input --output``, ``absa --output``, ``bench --out``, ``absa-eval --out``, ``arbitrate
--json``), spans are collected with the SDK's in-memory exporter, and the endpoint is once
unreachable too, so error texts that name it are written as well. The secret is in the URL as
``?api_key=``, ``?token=`` and ``&access_token=``, through the spec and through ``$OPENAI_BASE_URL``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from engine_helpers import write_gold
from fault_server import Fate, FaultServer, free_port, schema_reply
from moot import models
from moot.app import tracing
from moot.cli import main
from moot.models import base

SECRET = "SECRETqq7w"


def _ok(n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
    return Fate("ok", content=schema_reply(body))


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """Every command's spans, as if ``OTEL_EXPORTER_OTLP_ENDPOINT`` were set (no global provider)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "active_tracer", lambda: provider.get_tracer("moot"))
    monkeypatch.setenv(tracing.CAPTURE_ENV, "true")
    yield exporter
    provider.shutdown()


def _span_text(exporter: InMemorySpanExporter) -> str:
    parts = []
    for s in exporter.get_finished_spans():
        parts.append(s.name + json.dumps(dict(s.attributes or {}), default=str))
        parts += [e.name + json.dumps(dict(e.attributes or {}), default=str) for e in s.events]
        parts.append(str(s.status.description))
    return "\n".join(parts)


def _inputs(tmp: Path) -> dict[str, Path]:
    gold = write_gold(tmp / "gold.jsonl")
    topics = tmp / "topics.jsonl"
    topics.write_text(json.dumps({"topic": "Is x?"}) + "\n" + json.dumps({"topic": "Is y?"}) + "\n")
    sentences = tmp / "sentences.jsonl"
    sentences.write_text(json.dumps({"id": "s1", "sentence": "The food was great."}) + "\n")
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
    return {"gold": gold, "topics": topics, "sentences": sentences, "reports": reports}


def _commands(spec: str, tag: str, files: dict[str, Path]) -> list[list[str]]:
    bench = ["bench", "--n", "2", "--methods", "single,vote:3", "--no-plots"]
    return [
        ["run", "Is x?", "--model", spec, "--out", f"run-{tag}.jsonl"],
        ["run", "Is x?", "--model", spec, "--json"],
        ["run", "--input", str(files["topics"]), "--output", f"batch-{tag}.jsonl", "--model", spec],
        ["absa", "The food was great.", "--model", spec, "--json"],
        ["absa", "--input", str(files["sentences"]), "--output", f"absa-{tag}.jsonl", "--model", spec],
        [*bench, "--model", spec, "--out", f"bench-{tag}"],
        ["absa-eval", str(files["gold"]), "--model", spec, "--out", f"eval-{tag}", "--no-ablations"],
        ["arbitrate", str(files["reports"]), "--model", spec, "--json"],
        ["arbitrate", str(files["reports"]), "--model", spec],
    ]


def test_a_credential_in_the_url_is_in_no_output_of_any_command(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    spans: InMemorySpanExporter,
) -> None:
    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("MOOT_REQUEST_TIMEOUT", "3")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    store = tmp_path / "store" / "runs.db"
    monkeypatch.setenv("MOOT_STORE", str(store))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    (work / "inputs").mkdir()
    files = _inputs(work / "inputs")
    printed = []
    codes: dict[str, int] = {}
    try:
        with FaultServer(_ok) as server:
            urls = {
                "key": f"{server.url}?api_key={SECRET}",
                "token": f"{server.url}?token={SECRET}",
                # A URL with its own '&' goes percent-encoded in a spec (a bare '&' starts an option).
                "access": quote(f"{server.url}?x=1&access_token={SECRET}", safe=""),
            }
            for tag, url in urls.items():
                for args in _commands(f"openai:M?base_url={url}", tag, files):
                    codes[" ".join(args)] = main(args)
                    printed.append(capsys.readouterr())
            with monkeypatch.context() as m:  # the URL from the environment, the spec without one
                m.setenv("OPENAI_BASE_URL", f"{server.url}?x=1&access_token={SECRET}")
                for args in _commands("openai:M", "env", files):
                    codes[" ".join(args)] = main(args)
                    printed.append(capsys.readouterr())
            assert server.requests > 0 and all(SECRET in p for p in server.paths)
        # An endpoint where nothing listens: every error text that names it is written too.
        for param in ("api_key", "token"):
            dead = f"http://127.0.0.1:{free_port()}/v1?{param}={SECRET}"
            run = ["run", "Is x?", "--model", f"openai:M?base_url={dead}", "--out", f"dead-{param}.jsonl"]
            codes[f"dead {param}"] = main([*run, "--initial-answer", "kept"])
            printed.append(capsys.readouterr())
            codes[f"dead {param}, no initial answer"] = main(
                ["run", "Is x?", "--model", f"openai:M?base_url={dead}"]
            )
            printed.append(capsys.readouterr())
            bench = ["bench", "--n", "1", "--methods", "single", "--no-plots", "--out", f"dead-bench-{param}"]
            codes[f"dead bench {param}"] = main([*bench, "--model", f"openai:M?base_url={dead}"])
            printed.append(capsys.readouterr())
    finally:
        for spec in [s for s in models._CACHE if s.startswith("openai:")]:
            models._CACHE.pop(spec, None)
    for param in ("api_key", "token"):
        assert codes.pop(f"dead {param}") == 1 and codes.pop(f"dead {param}, no initial answer") == 2
        assert codes.pop(f"dead bench {param}") == 1
    assert set(codes.values()) == {0}, ({k: v for k, v in codes.items() if v}, [p.err for p in printed])
    assert main(["runs", "list", "--json"]) == 0
    listed = capsys.readouterr()
    printed.append(listed)
    ids = [r["id"] for r in json.loads(listed.out.splitlines()[-1])["runs"]]
    for run_id in ids:
        for args in (
            ["runs", "show", run_id],
            ["runs", "show", "--json", run_id],
            ["runs", "export", run_id],
        ):
            assert main(args) == 0, args
            printed.append(capsys.readouterr())
    # The files each command wrote (events, results, bench and eval folders) and the store.
    written = [p for p in work.rglob("*") if p.is_file()]
    names = {"run-key.jsonl", "batch-token.jsonl", "absa-env.jsonl", "dead-token.jsonl"}
    assert {p.name for p in written} >= names
    assert any(b'"model_request"' in p.read_bytes() for p in written if p.name == "run-key.jsonl")
    for path in [*written, *store.parent.glob(store.name + "*")]:
        assert SECRET.encode() not in path.read_bytes(), path
    for out in printed:
        assert SECRET not in out.out and SECRET not in out.err
    text = _span_text(spans)
    assert text and SECRET not in text
    _pages(store, ids)


def _pages(store: Path, ids: list[str]) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from moot.view import create_app

    client = TestClient(create_app(store), base_url="http://127.0.0.1:7575")
    paths = ["/", "/api/runs"]
    for run_id in ids:
        paths += [f"/runs/{run_id}", f"/api/runs/{run_id}", f"/api/runs/{run_id}/events"]
        paths += [f"/api/runs/{run_id}/items"]
    for path in paths:
        page = client.get(path)
        assert page.status_code == 200, path
        assert SECRET not in page.text, path
