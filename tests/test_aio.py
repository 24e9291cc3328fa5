"""moot.aio.run: asyncio.run without the main task holding the result (its repr is not built at exit)."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import pytest

from moot import aio


class _Big:
    reprs = 0

    def __repr__(self) -> str:
        _Big.reprs += 1
        return "big"


async def _make() -> _Big:
    await asyncio.sleep(0)
    return _Big()


def test_the_result_comes_back_and_is_never_repr_d() -> None:
    _Big.reprs = 0
    result = aio.run(_make())
    assert isinstance(result, _Big)
    assert _Big.reprs == 0


def test_plain_asyncio_run_builds_the_result_s_repr_at_exit() -> None:
    """What aio.run avoids, on this Python (3.11 formats it; a later one may not)."""
    import sys

    _Big.reprs = 0
    # asyncio.run installs its Ctrl-C handler (the partial holding the task) only over Python's
    # default one; a suite started in the background (`make test &`) has Ctrl-C ignored instead.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        asyncio.run(_make())
    finally:
        signal.signal(signal.SIGINT, previous)
    if sys.version_info < (3, 12):
        assert _Big.reprs >= 1


def test_an_exception_propagates() -> None:
    async def fail() -> Any:
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        aio.run(fail())
