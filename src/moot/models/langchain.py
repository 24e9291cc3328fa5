"""LangChain chat models as moot backends (extra ``moot[langchain]``: ``langchain-core`` only).

A LangGraph app already has its models configured (``ChatOpenAI``, ``ChatAnthropic``,
``ChatOllama``...). Give one to moot wherever it takes a model::

    from langchain_openai import ChatOpenAI
    Debate("answer", model=ChatOpenAI(model="gpt-4o-mini"))
    debate_node("answer", model=ChatOpenAI(model="gpt-4o-mini"), ...)

:func:`moot.models.resolve_model` wraps any ``BaseChatModel`` in :class:`LangChainModel`.

* **Structured output** goes through the model's own mechanism,
  ``with_structured_output(schema, include_raw=True)`` (``method="json_schema"`` first, then the
  model's default, e.g. a forced tool call); a model without one (``NotImplementedError``) gets
  moot's prompt mode: the prompt alone asks for the JSON, and moot validates and repairs it.
* **Usage** comes from the reply's ``usage_metadata`` (input and output tokens).
* **Callbacks**: the call runs with the caller's LangChain config (inside a LangGraph node, the
  node's), tagged ``moot`` and with moot's metadata (speaker, round, phase, debate), so
  LangChain callbacks, LangSmith and LangGraph's ``messages`` stream see every call.
* **Failures** map onto moot's errors (an HTTP status, a refused connection, a timeout), so
  retries, deadlines and failed-turn records are those of every backend. The model's own
  retries (``ChatOpenAI(max_retries=2)`` by default) run inside each of moot's attempts; set
  them to 0 to let moot's retry policy alone decide.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import MissingDependencyError, ModelConnectionError, ModelError, ModelHTTPError, never_sent
from .base import (
    Model,
    ModelRequest,
    ModelResponse,
    Usage,
    check_allow_model_requests,
    default_request_timeout,
)

__all__ = ["LangChainModel", "is_langchain_model"]

_FAKE_MODULE = "langchain_core.language_models.fake"
"""langchain-core's own fake chat models (and their subclasses) send nothing: no kill-switch check."""


def is_langchain_model(obj: object) -> bool:
    """True for a LangChain ``BaseChatModel`` (checked without importing LangChain unless loaded)."""
    import sys

    module = sys.modules.get("langchain_core.language_models.chat_models")
    return module is not None and isinstance(obj, module.BaseChatModel)


def _require() -> Any:
    try:
        from langchain_core import messages
    except ImportError:
        raise MissingDependencyError(
            "langchain-core", "langchain", "LangChain chat models as backends"
        ) from None
    return messages


def _text(content: Any) -> str:
    """A message's content as text (content blocks joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b if isinstance(b, str) else str(b.get("text", "")) for b in content if b)
    return str(content or "")


class LangChainModel(Model):
    """A moot Model around a LangChain chat model.

    Args:
        chat_model: any ``langchain_core`` ``BaseChatModel``.
        name: the name runs record (default ``langchain:<model name>``).
        max_concurrency: cap of the adaptive concurrency limit (None: it adapts; :mod:`moot.models.limits`).
        request_timeout: seconds one whole request may take (default: moot's).
    """

    def __init__(
        self,
        chat_model: Any,
        *,
        name: str | None = None,
        max_concurrency: int | None = None,
        request_timeout: float | None = None,
    ) -> None:
        super().__init__()
        _require()
        self.chat_model = chat_model
        ident = getattr(chat_model, "model_name", None) or getattr(chat_model, "model", None)
        self.name = name or f"langchain:{ident if isinstance(ident, str) else type(chat_model).__name__}"
        self.max_concurrency = max_concurrency
        self.request_timeout = request_timeout if request_timeout is not None else default_request_timeout()
        self._fake = any(c.__module__.startswith(_FAKE_MODULE) for c in type(chat_model).__mro__)
        base_url = getattr(chat_model, "openai_api_base", None) or getattr(chat_model, "base_url", None)
        if isinstance(base_url, str) and base_url:
            self.base_url = base_url

    def _runnable(self, request: ModelRequest) -> tuple[Any, bool]:
        """The model bound to this request's parameters, and whether it returns structured output."""
        params: dict[str, Any] = {}
        if request.max_tokens is not None:
            params["max_tokens"] = request.max_tokens
        if request.temperature is not None:
            params["temperature"] = request.temperature
        model = self.chat_model.bind(**params) if params else self.chat_model
        if request.json_schema is None:
            return model, False
        schema = {"title": request.schema_name, **request.json_schema}
        for kwargs in ({"method": "json_schema"}, {}):
            try:
                structured = self.chat_model.with_structured_output(schema, include_raw=True, **kwargs)
            except NotImplementedError:
                return model, False  # moot's prompt mode: the prompt asks for the JSON
            except (TypeError, ValueError):
                continue  # this model has no such method: try its default
            if params:
                # with_structured_output binds on the model; parameters go in as call kwargs.
                structured = self.chat_model.bind(**params).with_structured_output(
                    schema, include_raw=True, **kwargs
                )
            return structured, True
        return model, False

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Send the request through the chat model's ``ainvoke``.

        Raises:
            ModelError: the model failed (mapped from the provider's exception).
        """
        if not self._fake:
            check_allow_model_requests()
        messages = _require()
        kinds = {
            "system": messages.SystemMessage,
            "user": messages.HumanMessage,
            "assistant": messages.AIMessage,
        }
        chat = [kinds[m.role](content=m.content) for m in request.messages]
        runnable, structured = self._runnable(request)
        meta = {f"moot_{k}": v for k, v in request.metadata.items() if isinstance(v, str | int | float)}
        config = {
            "tags": ["moot"],
            "metadata": meta,
            "run_name": f"moot {request.metadata.get('speaker', '')}",
        }
        try:
            out = await runnable.ainvoke(chat, config=config)
        except ModelError:
            raise
        except Exception as err:  # noqa: BLE001 - every provider's errors, mapped below
            raise self._map_error(err) from err
        if structured:
            raw, parsed = out.get("raw"), out.get("parsed")
            text = json.dumps(parsed) if isinstance(parsed, dict) else _text(getattr(raw, "content", ""))
        else:
            raw = out
            text = _text(getattr(out, "content", ""))
        usage = getattr(raw, "usage_metadata", None) or {}
        metadata = getattr(raw, "response_metadata", None) or {}
        return ModelResponse(
            text=text,
            usage=Usage(
                calls=1,
                prompt_tokens=int(usage.get("input_tokens") or 0),
                completion_tokens=int(usage.get("output_tokens") or 0),
            ),
            model=str(metadata.get("model_name") or metadata.get("model") or self.name),
            finish_reason=metadata.get("finish_reason") or metadata.get("stop_reason"),
        )

    def _map_error(self, err: Exception) -> ModelError:
        """A provider's exception as moot's error: HTTP status, connection, timeout, or other."""
        kind = type(err).__name__
        status = getattr(err, "status_code", None)
        if isinstance(status, int):
            return ModelHTTPError(status, str(err)[:2000], model=self.name)
        if isinstance(err, TimeoutError) or "Timeout" in kind:
            return ModelConnectionError(f"{self.name}: timed out: {err}", model=self.name)
        if "Connect" in kind or isinstance(err, ConnectionError) or never_sent(err):
            return ModelConnectionError(f"{self.name}: {err}", model=self.name, sent=not never_sent(err))
        return ModelError(f"{self.name}: {kind}: {err}", model=self.name)
