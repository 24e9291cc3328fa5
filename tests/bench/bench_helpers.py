"""Helpers for the benchmark tests: an arithmetic oracle model with a scripted plan."""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from moot.models import FunctionModel, ModelRequest

_EXPR = re.compile(r"result of ([0-9+*\-]+)\?")

#: plan(item_index, agent, round) -> "right" | "wrong" | "wrong2" | "junk"
Plan = Callable[[int, int, int], str]


def gold_of(request: ModelRequest) -> int:
    match = _EXPR.search(request.messages[0].content)
    assert match, request.messages[0].content
    a, b, c, d, e, f = (int(x) for x in re.findall(r"\d+", match.group(1)))
    return a + b * c + d - e * f


def reply_for(kind: str, gold: int) -> str:
    if kind == "right":
        return f"Step by step: the result is ({gold})."
    if kind == "wrong":
        return f"I computed it carefully: ({gold + 1})."
    if kind == "wrong2":
        return f"The answer is ({gold + 2})."
    if kind == "junk":
        return "I am not sure how to do this."
    if kind == "blank":
        return " \n"
    raise AssertionError(kind)


def oracle(plan: Plan, *, delay: float = 0.0) -> FunctionModel:
    """A model whose reply for (item, agent, round) follows ``plan``, whatever the method."""

    def fn(request: ModelRequest) -> str:
        item = int(str(request.metadata["item"]).rsplit("-", 1)[1])
        agent = int(str(request.metadata["speaker"]).removeprefix("agent"))
        return reply_for(plan(item, agent, int(request.metadata["round"])), gold_of(request))

    return FunctionModel(fn, delay=delay)


def bench_script(name: str) -> ModuleType:
    """The script ``bench/{name}.py``, imported as a module."""
    path = Path(__file__).parent.parent.parent / "bench" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def untimed(record: Any) -> str:
    """A record as JSON without its clock readings (the unit's and each request's seconds) and its
    seal (``sha256``, of the whole record, its times included): two runs of the same units compare equal."""
    data = record.model_dump()
    data.pop("wall_s")
    data.pop("sha256")
    for answers in data["rounds"]:
        for answer in answers:
            answer.pop("latency_s", None)
            answer.pop("queue_s", None)
    return json.dumps(data, sort_keys=True)
