"""``moot view``: browse the run store in a local web app (extra ``moot[view]``)."""

from __future__ import annotations

import secrets
from typing import Annotated

import typer

from ..errors import MissingDependencyError, UsageError
from ..runs import default_store_path
from ._safe import clean
from ._store_options import StoreOption

__all__ = ["register"]

LOOPBACK = ("127.0.0.1", "localhost", "::1")
MIN_TOKEN = 16
"""Shortest --token accepted: a short one is guessed by anyone who can reach the port."""


def check_token(host: str, token: str | None) -> None:
    """Refuse a token shorter than :data:`MIN_TOKEN`, and a non-loopback ``host`` without one.

    Raises:
        UsageError: which, with a token to use (random, 32 characters).
    """
    if token is not None and len(token) < MIN_TOKEN:
        raise UsageError(
            f"--token must be at least {MIN_TOKEN} characters (got {len(token)}); "
            f"for example --token {secrets.token_urlsafe(24)}"
        )
    if host not in LOOPBACK and not token:
        raise UsageError(
            f"--host {host} would show your runs to the network: give --token (or set MOOT_VIEW_TOKEN), "
            f"e.g. --token {secrets.token_urlsafe(24)}"
        )


def register(app: typer.Typer) -> None:
    """Add ``view`` to ``app``."""

    @app.command("view")
    def view_cmd(
        store: StoreOption = None,
        host: Annotated[
            str,
            typer.Option(help="Address to bind; anything but loopback needs --token."),
        ] = ("127.0.0.1"),
        port: Annotated[int, typer.Option(min=1, max=65535, help="Port.")] = 7575,
        token: Annotated[
            str | None,
            typer.Option(
                envvar="MOOT_VIEW_TOKEN",
                help=f"Require this token (at least {MIN_TOKEN} characters) on every request.",
                show_default=False,
            ),
        ] = None,
    ) -> None:
        """Browse recorded runs in the browser: lists, debate timelines, bench reports, ABSA, live updates."""
        check_token(host, token)
        path = default_store_path(store)
        if not path.is_file():
            raise UsageError(f"no run store at {path}: run something first (moot run ...), or pass --store")
        try:
            import uvicorn
        except ModuleNotFoundError:
            raise MissingDependencyError("uvicorn", "view", "for moot view") from None
        from ..view import create_app

        web = create_app(path, token=token, host=host)
        problem = getattr(web.state, "store_error", None)
        if problem:  # the pages say it too; the terminal hears it first
            typer.echo(f"moot: warning: {clean(problem)}", err=True)
        shown = f"[{host}]" if ":" in host else host
        url = f"http://{shown}:{port}/" + (f"?token={token}" if token else "")
        typer.echo(f"moot view: {path} at {url} (Ctrl-C stops)", err=True)
        uvicorn.run(web, host=host, port=port, log_level="warning")
