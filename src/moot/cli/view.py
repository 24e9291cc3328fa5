"""``moot view``: browse the run store in a local web app (extra ``moot[view]``)."""

from __future__ import annotations

from typing import Annotated

import typer

from ..errors import MissingDependencyError, UsageError
from ..runs import default_store_path
from ._safe import clean
from ._store_options import StoreOption
from ._web_options import HostOption, check_token, token_option

__all__ = ["register"]

_TOKEN_ENV = "MOOT_VIEW_TOKEN"


def register(app: typer.Typer) -> None:
    """Add ``view`` to ``app``."""

    @app.command("view")
    def view_cmd(
        store: StoreOption = None,
        host: HostOption = "127.0.0.1",
        port: Annotated[int, typer.Option(min=1, max=65535, help="Port.")] = 7575,
        token: Annotated[str | None, token_option(_TOKEN_ENV, "on every request")] = None,
    ) -> None:
        """Browse recorded runs in the browser: lists, debate timelines, bench reports, ABSA, live updates."""
        check_token(host, token, exposes="show your runs to the network", envvar=_TOKEN_ENV)
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
