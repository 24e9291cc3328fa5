"""``moot serve`` and ``moot mcp``: debates behind OpenAI's chat completions API and an MCP server.

Needs the ``serve`` extra (``pip install 'moot[serve]'``: FastAPI, uvicorn, the ``mcp`` SDK)::

    from moot.serve import DebateService, ServeSettings, create_app
    app = create_app(DebateService(ServeSettings(store=Path(".moot/runs.db"))))   # serve with uvicorn

:mod:`moot.serve.service` runs the debates (the gate, the names, the recording);
:mod:`moot.serve.openai_api` is the HTTP app; :mod:`moot.serve.mcp_tools` the MCP tools.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .service import Busy, DebateService, Draining, ServeSettings, parse_served_name

__all__ = ["Busy", "DebateService", "Draining", "ServeSettings", "create_app", "parse_served_name"]

if TYPE_CHECKING:  # pragma: no cover
    from fastapi import FastAPI

_EXTRA = ("fastapi", "starlette", "uvicorn", "mcp", "anyio", "pydantic_settings", "sse_starlette")


def create_app(service: DebateService, **kwargs: Any) -> FastAPI:
    """The ``moot serve`` app (see :func:`moot.serve.openai_api.create_app`).

    Raises:
        MissingDependencyError: the ``serve`` extra is not installed.
    """
    from ..errors import MissingDependencyError

    try:
        from .openai_api import create_app as _create
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in _EXTRA:
            raise MissingDependencyError(exc.name.split(".")[0], "serve", "for moot serve") from None
        raise
    return _create(service, **kwargs)
