"""An OpenAI-compatible endpoint on 127.0.0.1 that reports usage and enforces a context window.

Like vLLM: ``GET /v1/models`` lists the model with its ``max_model_len``, and a chat request
whose prompt plus ``max_tokens`` passes the window gets a 400 whose message starts "This
model's maximum context length is N tokens". Token counts are characters / 4 rounded up (of
every message's content, plus 4 a message), so they are exact to test against. Every request
is logged (:attr:`UsageServer.log`): its path, prompt tokens, ``max_tokens``, phase and status.
Replies satisfy the requested schema with each string ``words`` words long.
"""

from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass
from typing import Any

from fault_server import Fate, FaultServer
from moot.models.testing import schema_instance

__all__ = ["Logged", "UsageServer", "prompt_tokens"]


def prompt_tokens(body: dict[str, Any]) -> int:
    """The server's count of a request's prompt tokens."""
    return sum(math.ceil(len(str(m.get("content") or "")) / 4) + 4 for m in body.get("messages") or [])


def _fill(value: Any, words: int) -> Any:
    if isinstance(value, str) and set(value) == {"x"}:  # a free string (an enum's value stays)
        return " ".join(["word"] * words)
    if isinstance(value, dict):
        return {k: _fill(v, words) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, words) for v in value]
    return value


@dataclass
class Logged:
    """One request the server read."""

    path: str
    prompt_tokens: int = 0
    max_tokens: int | None = None
    phase: str = ""
    status: int = 200


class UsageServer(FaultServer):
    """Use as a context manager; point ``openai:MODEL?base_url=`` at :attr:`url`.

    A :class:`~fault_server.FaultServer` (its HTTP serving) whose every answer is :meth:`_reply`'s.
    """

    def __init__(self, *, model: str = "m", window: int | None = None, words: int = 40) -> None:
        super().__init__(self._fate)
        self.model = model
        self.window = window
        self.words = words
        self.window_listed = True
        """Whether ``/v1/models`` lists the window (False: only a refused request tells it)."""
        self.log: list[Logged] = []
        self._log_lock = threading.Lock()

    def chat(self) -> list[Logged]:
        """The chat requests (not ``/v1/models``)."""
        return [r for r in self.log if r.path.endswith("/chat/completions")]

    def _fate(self, n: int, body: dict[str, Any], headers: dict[str, str]) -> Fate:
        status, payload = self._reply(self.paths[n], body)
        return Fate("status", status=status, payload=json.dumps(payload).encode())

    def _reply(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if path.endswith("/models"):
            entry: dict[str, Any] = {"id": self.model, "object": "model"}
            if self.window is not None and self.window_listed:
                entry["max_model_len"] = self.window
            with self._log_lock:
                self.log.append(Logged(path))
            return 200, {"object": "list", "data": [entry]}
        tokens = prompt_tokens(body)
        asked = body.get("max_tokens")
        phase = str((body.get("metadata") or {}).get("phase", ""))
        if self.window is not None and tokens + int(asked or 0) > self.window:
            message = (
                f"This model's maximum context length is {self.window} tokens. However, you requested "
                f"{tokens + int(asked or 0)} tokens ({tokens} in the messages, {asked} in the completion). "
                "Please reduce the length of the messages or completion."
            )
            with self._log_lock:
                self.log.append(Logged(path, tokens, asked, phase, 400))
            return 400, {"object": "error", "message": message, "type": "BadRequestError", "code": 400}
        fmt = body.get("response_format") or {}
        schema = (fmt.get("json_schema") or {}).get("schema") or fmt.get("schema")
        text = json.dumps(_fill(schema_instance(schema), self.words)) if schema else "The answer is 4."
        completion = math.ceil(len(text) / 4)
        with self._log_lock:
            self.log.append(Logged(path, tokens, asked, phase))
        return 200, {
            "id": "chatcmpl-usage",
            "object": "chat.completion",
            "created": 0,
            "model": self.model,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            ],
            "usage": {
                "prompt_tokens": tokens,
                "completion_tokens": completion,
                "total_tokens": tokens + completion,
            },
        }
