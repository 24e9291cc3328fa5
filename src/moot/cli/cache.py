"""``moot cache stats | clear | prune``: the response cache file."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer

from ..models.cache import ResponseCache, default_cache_path, parse_age
from ._safe import safe_json

__all__ = ["register"]

FileOption = Annotated[
    Path | None,
    typer.Option(
        "--cache-file", help="The cache file (default $MOOT_CACHE or ./.moot/cache.db).", show_default=False
    ),
]


def _open(path: Path | None, *, must_exist: bool = True) -> ResponseCache:
    target = path if path is not None else default_cache_path()
    if must_exist and not target.exists():
        raise FileNotFoundError(2, "no response cache here", str(target))
    return ResponseCache(target)


def _when(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


def register(app: typer.Typer) -> None:
    """Add the ``cache`` command group to ``app``."""
    group = typer.Typer(help="The response cache of --cache: see what it holds, clear or prune it.")
    app.add_typer(group, name="cache")

    @group.command("stats")
    def stats(
        cache_file: FileOption = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    ) -> None:
        """Entries, bytes on disk, the oldest and newest entry, entries per model."""
        target = cache_file if cache_file is not None else default_cache_path()
        if not target.exists():  # nothing cached yet: say so, create nothing
            typer.echo(
                safe_json(json.dumps({"path": str(target), "entries": 0, "bytes": 0}))
                if as_json
                else f"{target}: no cache yet (0 entries)"
            )
            return
        s = _open(cache_file).stats()
        if as_json:
            data = {
                "path": str(s.path),
                "entries": s.entries,
                "bytes": s.bytes,
                "oldest": s.oldest,
                "newest": s.newest,
                "models": s.models,
            }
            typer.echo(safe_json(json.dumps(data)))
            return
        typer.echo(f"{s.path}: {s.entries} entries, {s.bytes:,} bytes")
        typer.echo(f"oldest {_when(s.oldest)}, newest {_when(s.newest)}")
        for name, count in sorted(s.models.items()):
            typer.echo(f"  {name}: {count}")

    @group.command("clear")
    def clear(
        cache_file: FileOption = None,
        yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
    ) -> None:
        """Remove every entry."""
        cache = _open(cache_file)
        if not yes:
            typer.confirm(f"remove all {cache.stats().entries} entries of {cache.path}?", abort=True)
        typer.echo(f"removed {cache.clear()} entries from {cache.path}")

    @group.command("prune")
    def prune(
        older_than: Annotated[str, typer.Option("--older-than", help="An age: 12h, 7d, 2w.")],
        cache_file: FileOption = None,
    ) -> None:
        """Remove entries older than --older-than."""
        cache = _open(cache_file)
        typer.echo(
            f"removed {cache.prune(parse_age(older_than))} entries older than {older_than} from {cache.path}"
        )
