"""Model specs: $MOOT_MODEL as the default, ``?key=value`` options, per-persona endpoints."""

from __future__ import annotations

import importlib.util
import json
import os
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from moot import models
from moot.cli import main
from moot.errors import MissingCredentialsError, UsageError
from moot.models import default_model_spec, resolve_model
from moot.models._spec import spec_from_mapping, split_provider
from moot.models.base import split_spec_options
from moot.models.testing import FunctionModel
from moot.protocol import load_protocol
from moot.transcript import DebateResult


def _reply(req: Any) -> dict[str, object]:
    if req.metadata["phase"] == "judge":
        return {"final_answer": "merged", "citations": []}
    return {"answer": "a", "confidence": 0.5}


class TestSplitting:
    def test_provider_ignores_colons_in_options(self) -> None:
        assert split_provider("openai:m?base_url=http://h:1/v1") == ("openai", "m?base_url=http://h:1/v1")
        assert split_provider("local?n_threads=2") == ("local", "?n_threads=2")
        assert split_provider("local") == ("local", "")

    def test_mapping_round_trips_through_the_query(self) -> None:
        spec = spec_from_mapping({"spec": "openai:m", "base_url": "http://h:8000/v1?x=1", "api_key_env": "K"})
        name, options = split_spec_options(split_provider(spec)[1], ("base_url", "api_key_env"))
        assert name == "m" and options == {"base_url": "http://h:8000/v1?x=1", "api_key_env": "K"}
        assert spec_from_mapping({"spec": "local"}) == "local"
        with pytest.raises(ValueError, match="needs 'spec'"):
            spec_from_mapping({"base_url": "http://h"})


class TestDefaultModel:
    def test_moot_model_is_the_default(
        self,
        monkeypatch: pytest.MonkeyPatch,
        fake_provider: Callable[..., None],
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        fake_provider("fake", lambda rest: FunctionModel(_reply, name=f"fake:{rest}"))
        monkeypatch.delenv("MOOT_MODEL", raising=False)
        assert default_model_spec() == "local"
        monkeypatch.setenv("MOOT_MODEL", "fake:from-env")
        assert resolve_model(None).name == "fake:from-env"
        assert main(["run", "Why?", "--json"]) == 0
        result = DebateResult.model_validate_json(capsys.readouterr().out)
        assert result.verdict is not None and result.verdict.model == "fake:from-env"
        # An explicit --model still wins over the environment.
        assert main(["run", "Why?", "--json", "--model", "fake:flag"]) == 0
        result = DebateResult.model_validate_json(capsys.readouterr().out)
        assert result.verdict is not None and result.verdict.model == "fake:flag"


class TestBackendOptions:
    def test_local_options(self) -> None:
        # find_spec, not importorskip: importing llama_cpp leaves /dev/null handles open at exit.
        if importlib.util.find_spec("llama_cpp") is None:
            pytest.skip("llama-cpp-python is not installed")
        from moot.models.local import LocalModel

        model = LocalModel.from_spec("?n_threads=3&n_ctx=2048&n_gpu_layers=0&seed=7")
        assert (model.n_threads, model.n_ctx, model.n_gpu_layers, model.seed) == (3, 2048, 0, 7)
        assert model.embedded and model.name == "local?n_threads=3&n_ctx=2048&n_gpu_layers=0&seed=7"
        assert LocalModel.from_spec("").name == "local"
        with pytest.raises(UsageError, match="unknown model option"):
            LocalModel.from_spec("?gpu=1")
        with pytest.raises(UsageError, match="n_threads must be >= 1"):
            LocalModel.from_spec("?n_threads=0")
        with pytest.raises(UsageError, match="n_threads_batch must be >= 1"):
            LocalModel.from_spec("?n_threads_batch=0")
        with pytest.raises(UsageError, match="n_ctx must be an integer, got 'big'"):
            LocalModel.from_spec("?n_ctx=big")

    def test_local_thread_counts(self, monkeypatch: pytest.MonkeyPatch) -> None:
        if importlib.util.find_spec("llama_cpp") is None:
            pytest.skip("llama-cpp-python is not installed")
        from moot.models.local import LocalModel

        monkeypatch.delenv("MOOT_LLAMA_THREADS", raising=False)
        monkeypatch.delenv("MOOT_LLAMA_BATCH_THREADS", raising=False)
        monkeypatch.setattr(os, "cpu_count", lambda: 8)
        # Defaults: decode with half the CPUs, read prompts with all of them (llama-cpp-python's own).
        model = LocalModel.from_spec("")
        assert (model.n_threads, model.n_threads_batch) == (4, 8)
        monkeypatch.setenv("MOOT_LLAMA_THREADS", "1")
        monkeypatch.setenv("MOOT_LLAMA_BATCH_THREADS", "1")
        assert (LocalModel.from_spec("").n_threads, LocalModel.from_spec("").n_threads_batch) == (1, 1)
        # The spec wins over the environment; a value that is not a count is ignored there.
        model = LocalModel.from_spec("?n_threads=2&n_threads_batch=3")
        assert (model.n_threads, model.n_threads_batch) == (2, 3)
        monkeypatch.setenv("MOOT_LLAMA_BATCH_THREADS", "many")
        assert LocalModel.from_spec("").n_threads_batch == 8

    def test_openai_options(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from moot.models.openai import OpenAIModel

        monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
        monkeypatch.setenv("BOX_KEY", "sk-box")
        model = OpenAIModel.from_spec("llama3?base_url=http://box:8000/v1&api_key_env=BOX_KEY")
        assert (model.name, model.base_url) == ("openai:llama3", "http://box:8000/v1")
        assert model._api_key == "sk-box"
        model = OpenAIModel.from_spec("m?base_url=http://box/v1&structured_mode=json_object")
        assert model.structured_mode == "json_object" and model.mode_fixed
        with pytest.raises(MissingCredentialsError) as info:
            OpenAIModel.from_spec("m?base_url=http://box/v1&api_key_env=NOT_SET_ANYWHERE")
        assert info.value.env_var == "NOT_SET_ANYWHERE"
        with pytest.raises(UsageError, match="unknown structured mode"):
            OpenAIModel.from_spec("m?base_url=http://box/v1&structured_mode=xml")
        with pytest.raises(UsageError, match="unknown model option"):
            OpenAIModel.from_spec("m?base=http://box/v1")

    def test_persona_model_mapping_becomes_a_spec(self) -> None:
        protocol = load_protocol(
            {
                "extends": "answer",
                "personas": {"critical": {"model": {"spec": "openai:m", "base_url": "http://b/v1"}}},
            }
        )
        assert protocol.personas["critical"].model == "openai:m?base_url=http%3A%2F%2Fb%2Fv1"


class _Endpoint:
    """A real OpenAI-compatible HTTP endpoint on loopback that records who called it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []  # (model, authorization)
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                endpoint.calls.append((body["model"], self.headers.get("Authorization", "")))
                schema = body.get("response_format", {}).get("json_schema", {}).get("schema", {})
                wants_final = "final_answer" in schema.get("properties", {})
                content = {"final_answer": "merged", "citations": []} if wants_final else _reply_body()
                payload = json.dumps(
                    {
                        "id": "c",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body["model"],
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": json.dumps(content)},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _reply_body() -> dict[str, object]:
    return {"answer": "an answer", "confidence": 0.6}


@pytest.fixture
def endpoints() -> Iterator[tuple[_Endpoint, _Endpoint]]:
    a, b = _Endpoint(), _Endpoint()
    yield a, b
    a.close()
    b.close()
    for key in [k for k in models._CACHE if "127.0.0.1" in k]:
        del models._CACHE[key]


@pytest.mark.integration
def test_personas_route_to_their_own_endpoints(
    endpoints: tuple[_Endpoint, _Endpoint],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    a, b = endpoints
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("A_KEY", "key-a")
    monkeypatch.setenv("B_KEY", "key-b")
    config = tmp_path / "routed.yaml"
    config.write_text(
        "extends: answer\n"
        "personas:\n"
        "  critical:\n"
        f"    model: {{spec: 'openai:model-b', base_url: '{b.url}', api_key_env: B_KEY}}\n"
    )
    default = f"openai:model-a?base_url={a.url}&api_key_env=A_KEY"
    assert main(["run", "Why?", "--config", str(config), "--model", default, "--json"]) == 0
    result = DebateResult.model_validate_json(capsys.readouterr().out)
    assert result.final_answer == "merged" and result.failed_turns == 0
    assert sorted(set(a.calls)) == [("model-a", "Bearer key-a")] and len(a.calls) == 3
    assert sorted(set(b.calls)) == [("model-b", "Bearer key-b")] and len(b.calls) == 2
