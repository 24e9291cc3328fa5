"""``moot serve`` (OpenAI-compatible chat completions + MCP at /mcp) and ``moot mcp`` (MCP over stdio).

Both need the ``serve`` extra (``pip install 'moot[serve]'``). See docs/serve.md.
"""

from __future__ import annotations

import asyncio
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

import moot.redact as redact

from ..errors import MissingDependencyError, UsageError
from ..runs import default_store_path
from ._model_options import ModelConcurrencyOption, apply_model_concurrency
from ._store_options import StoreOption
from ._web_options import HostOption, check_token, token_option

if TYPE_CHECKING:  # pragma: no cover
    from ..serve import ServeSettings

__all__ = ["register"]

ModelOption = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="The model spec a served name without @SPEC runs on, e.g. openai:gpt-4o-mini (default: local).",
    ),
]
MaxDebatesOption = Annotated[
    int, typer.Option("--max-debates", min=1, max=10_000, help="Debates running at once.")
]
QueueOption = Annotated[
    int | None,
    typer.Option(
        "--queue",
        min=0,
        max=100_000,
        help="Requests waiting for a slot beyond --max-debates (more get 429; default: as many).",
        show_default=False,
    ),
]
ProtocolOption = Annotated[
    list[Path] | None,
    typer.Option(
        "--protocol",
        help="A protocol YAML file to serve too, named moot:STEM (repeatable).",
        exists=True,
        dir_okay=False,
    ),
]


_TOKEN_ENV = "MOOT_SERVE_TOKEN"


def _protocols(files: list[Path] | None) -> dict[str, Path]:
    """The protocol files by served name; each is loaded now, so a bad one fails at start (exit 2)."""
    from ..protocol import load_protocol, presets

    out: dict[str, Path] = {}
    for path in files or []:
        name = path.stem
        if name in presets() or name in out:
            raise UsageError(f"--protocol {path}: the name {name!r} is taken (a preset or another file)")
        load_protocol(path)
        out[name] = path.resolve()
    return out


def _settings(
    store: Path | None,
    model: str | None,
    max_debates: int,
    queue: int | None,
    protocol: list[Path] | None,
    door: str,
) -> ServeSettings:
    from ..models import resolve_model
    from ..serve import ServeSettings

    if model is not None:
        resolve_model(model)  # an unknown provider or a missing key: exit 2 now, not a 400 per request
    return ServeSettings(
        store=default_store_path(store).resolve(),
        model=model,
        max_debates=max_debates,
        queue=queue,
        protocols=_protocols(protocol),
        door=door,
    )


def register(app: typer.Typer) -> None:
    """Add ``serve`` and ``mcp`` to ``app``."""

    @app.command("serve")
    def serve_cmd(
        store: StoreOption = None,
        host: HostOption = "127.0.0.1",
        port: Annotated[int, typer.Option(min=0, max=65535, help="Port (0: a free one, printed).")] = 8000,
        token: Annotated[str | None, token_option(_TOKEN_ENV, "as the API key of every request")] = None,
        model: ModelOption = None,
        max_debates: MaxDebatesOption = 4,
        queue: QueueOption = None,
        protocol: ProtocolOption = None,
        view_url: Annotated[
            str, typer.Option(help="Where `moot view` shows this store: each answer links its run there.")
        ] = "http://127.0.0.1:7575",
        shutdown_timeout: Annotated[
            float,
            typer.Option(
                "--shutdown-timeout",
                min=0,
                help="Seconds the debates in flight get to finish after SIGTERM; then they are cancelled "
                "(recorded interrupted).",
            ),
        ] = 30.0,
        no_mcp: Annotated[bool, typer.Option("--no-mcp", help="Do not serve MCP at /mcp.")] = False,
        model_concurrency: ModelConcurrencyOption = None,
    ) -> None:
        """Serve debates as an OpenAI-compatible API (model: moot:PRESET or moot:PRESET@SPEC), MCP at /mcp."""
        check_token(host, token, exposes="let the network run debates on your model keys", envvar=_TOKEN_ENV)
        apply_model_concurrency(model_concurrency)
        try:
            import uvicorn
        except ModuleNotFoundError:
            raise MissingDependencyError("uvicorn", "serve", "for moot serve") from None
        from ..serve import DebateService, create_app

        settings = _settings(store, model, max_debates, queue, protocol, "serve")
        settings.view_url = view_url
        service = DebateService(settings)
        holder: dict[str, Any] = {}

        async def on_started() -> None:
            """Say where it listens once it does; then watch for the shutdown to stop admitting."""
            server = holder["server"]
            while not server.started:
                await asyncio.sleep(0.02)
            bound = server.servers[0].sockets[0].getsockname() if server.servers else (host, port)
            shown = f"[{bound[0]}]" if ":" in str(bound[0]) else bound[0]
            print(
                f"moot serve: http://{shown}:{bound[1]}/v1 (MCP at /mcp), store {settings.store}, "
                f"model {redact.text(settings.model or 'local')}, {settings.max_debates} debates at once "
                "(Ctrl-C stops)",
                file=sys.stderr,
                flush=True,
            )
            while not server.should_exit:
                await asyncio.sleep(0.1)
            service.draining = True  # SIGTERM: queued and new requests get 503 while the rest finish

        web = create_app(
            service,
            token=token,
            host=host,
            mcp=not no_mcp,
            shutdown_grace_s=shutdown_timeout,
            on_started=on_started,
        )
        config = uvicorn.Config(
            web,
            host=host,
            port=port,
            log_level="warning",
            timeout_graceful_shutdown=max(1, math.ceil(shutdown_timeout)),
            lifespan="on",
        )
        holder["server"] = uvicorn.Server(config)
        holder["server"].run()

    @app.command("mcp")
    def mcp_cmd(
        store: StoreOption = None,
        model: ModelOption = None,
        max_debates: MaxDebatesOption = 4,
        protocol: ProtocolOption = None,
        model_concurrency: ModelConcurrencyOption = None,
    ) -> None:
        """Serve moot's MCP tools (debate, arbitrate, absa) over stdio, for desktop and coding agents."""
        apply_model_concurrency(model_concurrency)
        try:
            import anyio

            from ..serve import DebateService
            from ..serve.mcp_tools import build_mcp
        except ModuleNotFoundError as exc:
            raise MissingDependencyError(str(exc.name).split(".")[0], "serve", "for moot mcp") from None
        service = DebateService(_settings(store, model, max_debates, None, protocol, "mcp"))
        server = build_mcp(service)

        async def main() -> None:
            try:
                await server.run_stdio_async()
            finally:
                await service.aclose()

        anyio.run(main)
