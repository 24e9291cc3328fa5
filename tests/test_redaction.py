"""Server error bodies are redacted before they reach errors, turns, events, results or files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fault_server import Fate, FaultServer
from moot import Debate, Event, models
from moot.cli import main
from moot.errors import redact
from moot.models import base
from moot.models.openai import OpenAIModel

KEY = "sk-test-SECRET-0123456789abcdef"


class TestRedact:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("Authorization: Bearer abc.def-123", "Authorization: Bearer ***"),
            (
                '{"authorization": "Bearer zzz", "x-api-key": "k-9"}',
                '{"authorization": "Bearer ***", "x-api-key": "***"}',
            ),
            ("api-key=abcdef; path=/", "api-key=***; path=/"),
            ('{\\"Api_Key\\": \\"abcdef\\"}', '{\\"Api_Key\\": \\"***\\"}'),
            (f"you sent {KEY}!", "you sent ***!"),
            ("authorization failed for this request", "authorization failed for this request"),
        ],
    )
    def test_values(self, text: str, expected: str) -> None:
        assert redact(text, [KEY, None, ""]) == expected


def echo(n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
    """A misconfigured proxy: it echoes the request headers in its error body."""
    detail = {"error": {"message": "upstream refused", "request_headers": headers, "hint": f"key was {KEY}"}}
    return Fate("status", status=401, body=json.dumps(detail))


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)
    with FaultServer(echo) as srv:
        yield srv


def test_key_never_reaches_errors_turns_events_or_results(server: FaultServer) -> None:
    model = OpenAIModel("m", base_url=server.url, api_key=KEY)
    events: list[Event] = []
    result = Debate("answer", model=model).run_sync("Q?", on_event=events.append)
    assert server.headers[0]["authorization"] == f"Bearer {KEY}"  # the server did see and echo it
    failed = [t for t in result.turns(include_judge=True) if t.error_kind == "ModelHTTPError"]
    assert failed and "Bearer ***" in (failed[0].error or "")
    dumped = result.model_dump_json() + "".join(e.model_dump_json() for e in events)
    assert KEY not in dumped and "SECRET" not in dumped


def test_key_never_reaches_the_terminal_or_out_files(
    server: FaultServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    out = tmp_path / "events.jsonl"
    main(["run", "Q?", "--model", "openai:redaction-test", "--out", str(out), "--no-store"])
    main(["run", "Q?", "--model", "openai:redaction-test", "--json", "--no-store"])
    captured = capsys.readouterr()
    models._CACHE.pop("openai:redaction-test", None)  # resolved specs are cached per process
    assert server.requests >= 2
    for text in (captured.out, captured.err, out.read_text()):
        assert KEY not in text and "SECRET" not in text
