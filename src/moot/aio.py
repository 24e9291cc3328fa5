"""``asyncio.run`` for a coroutine whose result is large (a benchmark's, a batch's, a debate's).

On Python 3.11, ``asyncio.run`` ends by asking ``signal.getsignal(SIGINT)`` twice whether its own
Ctrl-C handler is still installed; that handler is a ``functools.partial`` holding the main task,
and the standard library, failing to read it as a ``signal.Handlers`` member, formats the error
message with ``repr()`` of the partial, hence of the task, hence of the task's whole result (cut
to a few dozen characters only after it is built). A ``moot bench`` of 1,000 items spent 2 x 96 ms
of CPU there (48 us per model call), traced or not. :func:`run` keeps the result out of the task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["run"]

T = TypeVar("T")


async def _into(coro: Coroutine[Any, Any, T], box: list[T]) -> None:
    box.append(await coro)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)``, returning its result without the main task holding it (see above)."""
    box: list[T] = []
    asyncio.run(_into(coro, box))
    return box[0]
