"""Seed 003's own YAML, end to end through the CLI against a real OpenAI-compatible HTTP server.

The server (tests/fault_server.py, a real socket on 127.0.0.1) counts every request it
reads, so the call counts below are the server's, not moot's own accounting.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from fault_server import Fate, FaultServer, schema_reply
from moot import models
from moot.absa import FinalResult
from moot.cli import main
from moot.transcript import DebateResult
from seed_configs import SEED_003_CONDITIONS, SEED_003_OVERRIDE

pytestmark = pytest.mark.integration

SENTENCE = "The pasta was great but the service was slow."


def _schema_name(body: dict[str, Any]) -> str:
    fmt = body.get("response_format") or {}
    return str((fmt.get("json_schema") or {}).get("name") or fmt.get("type") or "text")


def handler(n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
    """Valid replies for every schema; the patch judge quotes the sentence exactly."""
    if _schema_name(body) == "PatchJudgement":
        judgement = {
            "final_patch": [],
            "final_tuples": [{"aspect_ref": "pasta", "polarity": "positive"}],
            "unresolved_conflicts": [],
            "sentence_polarity": "mixed",
            "sentence_evidence_spans": ["pasta was great"],
            "aspect_evidence": [{"aspect_ref": "pasta", "spans": ["pasta was great"]}],
        }
        return Fate(content=json.dumps(judgement))
    return Fate(content=schema_reply(body))


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Any:
    with FaultServer(handler) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.delenv("MOOT_OPENAI_STRUCTURED_MODE", raising=False)
        monkeypatch.setattr(models, "_CACHE", {})  # `openai:m` must resolve against this server
        yield srv


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "seed.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("mode", ["", "mode: patch\n"], ids=["without-mode", "with-mode"])
def test_override_example_runs_the_patch_debate_four_calls(
    server: FaultServer, tmp_path: Path, mode: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _write(tmp_path, mode + SEED_003_OVERRIDE)
    assert main(["run", SENTENCE, "--config", cfg, "--model", "openai:m", "--json", "--no-store"]) == 0
    res = DebateResult.model_validate_json(capsys.readouterr().out)
    assert server.requests == 4 and res.usage.calls == 4
    names = [_schema_name(b) for b in server.bodies]
    assert names == ["PatchTurn", "PatchTurn", "PatchTurn", "PatchJudgement"]
    assert res.protocol == "patch" and res.verdict is not None and res.verdict.ok
    assert res.verdict.get("aspect_evidence") == [{"aspect_ref": "pasta", "spans": ["pasta was great"]}]


def test_conditions_max_rounds_3_is_one_round_four_calls(
    server: FaultServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _write(tmp_path, SEED_003_CONDITIONS)
    argv = ["run", SENTENCE, "--protocol", "patch", "--config", cfg, "--model", "openai:m", "--json"]
    assert main([*argv, "--no-store"]) == 0
    res = DebateResult.model_validate_json(capsys.readouterr().out)
    assert server.requests == 4 and len(res.rounds) == 1


def test_moot_absa_with_the_override_example_runs_the_patch_debate(
    server: FaultServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _write(tmp_path, SEED_003_OVERRIDE)
    assert main(["absa", SENTENCE, "--config", cfg, "--model", "openai:m", "--json", "--no-store"]) == 0
    res = FinalResult.model_validate_json(capsys.readouterr().out)
    debate_calls = Counter(
        n for n in (_schema_name(b) for b in server.bodies) if n in ("PatchTurn", "PatchJudgement", "PrtTurn")
    )
    assert debate_calls == {"PatchTurn": 3, "PatchJudgement": 1}  # no persona/PRA panel
    assert res.mode == "patch" and res.debate is not None and res.debate.usage.calls == 4
    assert server.requests == res.usage.calls
