"""Unique ids for runs and debates: the standard library's random UUIDs.

``uuid.uuid4()`` draws from ``os.urandom``: unique across processes and forks, and a
program's own ``random.seed()`` cannot make two processes repeat an id. A run or a
debate takes one id, so its cost (a few microseconds, ~0.4 ms at worst on a busy VM)
is nothing next to a model call. (``uuid7`` would not do for the 12-digit debate ids:
its first 48 bits are the time in milliseconds.)
"""

from __future__ import annotations

import uuid

__all__ = ["new_id"]


def new_id(hex_digits: int = 32) -> str:
    """A random id of ``hex_digits`` (at most 32) lowercase hex digits, from :func:`uuid.uuid4`."""
    return uuid.uuid4().hex[:hex_digits]
