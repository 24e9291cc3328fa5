"""The structured mode an endpoint refused is remembered across processes (moot.models.structured_mode)."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fault_server import Fate, FaultServer, schema_reply
from moot.models.structured_mode import MEMORY_FILE, ModeMemory, ModeSelector

# What LiteLLM's proxy answers (after its own three retries) in front of llama.cpp's server.
LITELLM_500 = json.dumps(
    {
        "error": {
            "message": "litellm.APIError: APIError: OpenAIException - Error code: 500 - "
            "{'error': {'code': 500, 'message': 'response_format type must be one of \"text\" or "
            "\"json_object\", but got: json_schema', 'type': 'server_error'}}",
            "type": None,
            "param": None,
            "code": "500",
        }
    }
)


def refusing_json_schema(n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        return Fate("status", status=500, body=LITELLM_500)
    if fmt:
        return Fate(content=schema_reply(body))
    return Fate(content="a plain answer")


def test_a_second_process_does_not_probe_again(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "MOOT_CACHE_DIR": str(tmp_path / "cache"),
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
    }
    env.pop("MOOT_OPENAI_STRUCTURED_MODE", None)
    with FaultServer(refusing_json_schema) as srv:
        argv = [
            sys.executable,
            "-m",
            "moot",
            "run",
            "Is tea good?",
            "--model",
            f"openai:m?base_url={srv.url}",
        ]

        def kinds_of_one_run() -> list[str]:
            start = len(srv.bodies)
            done = subprocess.run([*argv, "--json"], env=env, capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stderr
            return [(b.get("response_format") or {}).get("type", "-") for b in srv.bodies[start:]]

        first = kinds_of_one_run()
        second = kinds_of_one_run()
    assert "json_schema" in first and "json_object" in first  # probed, refused (a 500), fell back
    assert "json_schema" not in second and "json_object" in second  # remembered: no probe
    memory = json.loads((tmp_path / "cache" / MEMORY_FILE).read_text())
    (entry,) = memory.values()
    assert entry["mode"] == "json_object" and entry["why"] == "HTTP 500 to json_schema"
    assert list(memory) == [f"{srv.url} m"]


def test_expiry_a_fixed_mode_and_an_unreadable_file(tmp_path: Path) -> None:
    now = [1_000_000.0]
    memory = ModeMemory(tmp_path / "modes.json", ttl_s=100, clock=lambda: now[0])
    assert memory.recall("http://h/v1 m") is None
    memory.remember("http://h/v1 m", "prompt", "HTTP 400 to json_object")
    assert ModeSelector(None, key="http://h/v1 m", memory=memory).mode == "prompt"
    assert ModeSelector(None, key="http://other/v1 m", memory=memory).mode == "json_schema"
    # A mode set by config is never replaced by a remembered one.
    assert ModeSelector("json_schema", key="http://h/v1 m", memory=memory).mode == "json_schema"
    now[0] += 101  # expired: probe again
    assert ModeSelector(None, key="http://h/v1 m", memory=memory).mode == "json_schema"
    (tmp_path / "modes.json").write_text("{not json")
    assert memory.recall("http://h/v1 m") is None  # unreadable counts as empty
    memory.remember("http://h/v1 m", "json_object", "HTTP 500 to json_schema")  # and is replaced whole
    assert memory.recall("http://h/v1 m") == "json_object"


def _write_many(path: str, worker: int) -> None:
    memory = ModeMemory(Path(path))
    for i in range(20):
        memory.remember(f"http://w{worker}-{i}/v1 m", "json_object", "HTTP 500 to json_schema")


def test_concurrent_writers_keep_each_others_entries(tmp_path: Path) -> None:
    path = tmp_path / "cache" / MEMORY_FILE
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_write_many, args=(str(path), w)) for w in range(4)]
    for p in workers:
        p.start()
    for p in workers:
        p.join(60)
    assert [p.exitcode for p in workers] == [0] * 4
    assert len(json.loads(path.read_text())) == 80
    assert not [p for p in path.parent.iterdir() if p.suffix == ".tmp"]


def test_an_unwritable_cache_folder_is_logged_and_the_run_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    memory = ModeMemory(blocker / "modes.json")  # a folder inside a file: cannot be made
    with caplog.at_level("WARNING", logger="moot"):
        memory.remember("http://h/v1 m", "json_object", "HTTP 500 to json_schema")
    assert "cannot remember the structured mode of http://h/v1 m" in caplog.text
