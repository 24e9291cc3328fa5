"""``moot view``: the run store in the browser (FastAPI, Jinja2 templates, no CDN).

Needs the ``view`` extra (``pip install 'moot[view]'``)::

    from moot.view import create_app
    app = create_app(".moot/runs.db")   # serve with uvicorn
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["create_app"]

if TYPE_CHECKING:  # pragma: no cover
    from fastapi import FastAPI


def create_app(store_path: Any, *, token: str | None = None, host: str = "127.0.0.1") -> FastAPI:
    """The viewer app (see :func:`moot.view.app.create_app`).

    Raises:
        MissingDependencyError: the ``view`` extra is not installed.
    """
    from ..errors import MissingDependencyError

    try:
        from .app import create_app as _create
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in ("fastapi", "starlette", "jinja2", "uvicorn"):
            raise MissingDependencyError(exc.name.split(".")[0], "view", "for moot view") from None
        raise
    return _create(store_path, token=token, host=host)
