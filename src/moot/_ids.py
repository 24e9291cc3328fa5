"""Unique ids without a system call per id.

``uuid.uuid4()`` reads ``os.urandom`` every time, which costs up to ~0.4 ms on
these VMs; one private generator, seeded from ``os.urandom`` once per process
(and again in a forked child), gives ids just as unique at ~1 µs, and a
program's own ``random.seed()`` cannot make two processes repeat them.
"""

from __future__ import annotations

import os
import random

__all__ = ["new_id"]

_rng = random.Random()  # seeded from os.urandom
os.register_at_fork(after_in_child=_rng.seed)


def new_id(hex_digits: int = 32) -> str:
    """A random id of ``hex_digits`` lowercase hex digits."""
    return f"{_rng.getrandbits(4 * hex_digits):0{hex_digits}x}"
