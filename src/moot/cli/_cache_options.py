"""``--cache``, ``--cache-file`` and ``--cache-expiry``: every command that calls a model takes them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..errors import UsageError
from ..models.cache import activate_cache, open_cache, parse_age

__all__ = ["CacheExpiryOption", "CacheFileOption", "CacheOption", "apply_cache_options"]

CacheOption = Annotated[
    bool,
    typer.Option(
        "--cache",
        help="Answer each model request from the response cache when it holds the reply, and keep "
        "new replies there ($MOOT_CACHE or ./.moot/cache.db). Cached replies count as usage.cached.",
    ),
]
CacheFileOption = Annotated[
    Path | None,
    typer.Option("--cache-file", help="The response cache file (implies --cache).", show_default=False),
]
CacheExpiryOption = Annotated[
    str | None,
    typer.Option(
        "--cache-expiry",
        help="Ignore cached replies older than this (e.g. 12h, 7d); default: never expire.",
        show_default=False,
    ),
]


def apply_cache_options(
    cache: bool, cache_file: Path | None, expiry: str | None, *, ray_address: str | None = None
) -> None:
    """Open the cache the options ask for and make it the command's (no-op without them).

    Raises:
        UsageError: a bad ``--cache-expiry``, a file that is not a moot response cache, or
            ``--cache`` with ``--ray`` (Ray workers are processes of their own, maybe on other
            machines: they would not see this process's cache).
    """
    expiry_s = parse_age(expiry) if expiry is not None else None
    if not cache and cache_file is None:
        return
    if ray_address is not None:
        raise UsageError("--cache works within one process: it cannot be combined with --ray")
    activate_cache(open_cache(cache_file if cache_file is not None else True, expiry_s=expiry_s))
