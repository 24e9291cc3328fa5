"""The ``moot`` command line: a thin layer over the library.

Bad input (empty topic, unknown protocol or persona, malformed YAML, unknown
provider, missing API key, unreachable endpoint, a file that is missing or not
UTF-8, an output path that cannot be written) prints one ``moot: error:`` line
on stderr and exits with code 2; nothing prints a traceback. An unexpected
exception (a bug) prints one line and exits with code 3; ``MOOT_DEBUG=1`` adds
the traceback. Each warning of the ``moot`` logger (a degradation: a structured mode a
server refused, a turn that failed after its retries, a batch item that fell back) is
one ``moot: warning:`` line on stderr, said once; ``--quiet`` silences them.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import os
import sys
import traceback
from typing import Annotated

import click
import typer

from .._version import __version__
from ..app.tracing import install_from_env
from ..errors import MootError, ResourceError, UsageError, error_text
from ..gctune import skip_final_collection, tuned_gc, tuning_wanted
from ._ray_options import default_ray_address
from ._safe import clean
from ._warnings import lift_quiet, say_warnings

__all__ = ["COMMANDS", "app", "load_commands", "main"]

COMMANDS = {
    "run": "run",
    "protocols": "protocols",
    "arbitrate": "arbitrate",
    "absa": "absa",
    "absa-eval": "absa_eval",
    "bench": "bench",
    "runs": "runs",
    "view": "view",
    "serve": "serve",
    "mcp": "serve",
    "cache": "cache",
}
"""Each subcommand and the module (``moot.cli.NAME``) whose ``register(app)`` adds it.

A module is imported when its command runs (every one for ``moot --help`` or an unknown name):
``moot bench`` does not load the absa pipeline, the viewer or the server (each command started
~0.25 s sooner).
"""
_LOADED: set[str] = set()


app = typer.Typer(
    name="moot",
    help="Multi-agent LLM debate: personas argue, a judge, moderator or vote decides.",
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish, PowerShell
    pretty_exceptions_enable=False,
    no_args_is_help=True,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"moot {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
    ] = False,
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet",
            help="No `moot: warning:` lines on stderr (accepted after the subcommand too).",
        ),
    ] = False,
) -> None:
    """Multi-agent LLM debate: personas argue, a judge, moderator or vote decides."""


def load_commands(name: str | None = None) -> typer.Typer:
    """Register subcommand ``name``'s module on :data:`app` (None or an unknown name: every one).

    Returns:
        :data:`app`, with at least that command (each module is registered once per process).
    """
    wanted = [COMMANDS[name]] if name in COMMANDS else list(dict.fromkeys(COMMANDS.values()))
    for module in wanted:
        if module not in _LOADED:
            importlib.import_module(f"{__name__}.{module}").register(app)
            _LOADED.add(module)
    return app


def _fail(message: str, code: int = 2) -> int:
    # One line, always: a multi-line message (YAML errors quote the source) is joined. The message
    # may quote a server's error body or a file name: no escape sequence, no credential in a URL.
    line = " ".join(part.strip() for part in clean(message).splitlines() if part.strip())
    print(f"moot: error: {line}", file=sys.stderr)
    return code


def _internal_error(exc: BaseException) -> int:
    if os.environ.get("MOOT_DEBUG", "").strip() not in ("", "0"):
        traceback.print_exception(exc, file=sys.stderr)
    return _fail(
        f"internal error: {type(exc).__name__}: {exc} "
        "(a bug in moot; rerun with MOOT_DEBUG=1 for the traceback and report it)",
        code=3,
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``moot`` console script; returns the exit code.

    With ``OTEL_EXPORTER_OTLP_ENDPOINT`` set, the run is traced (:func:`moot.app.tracing.install_from_env`)
    and its spans are flushed before the exit, Ctrl-C included. Called without ``argv`` (the
    console script, ``python -m moot``), the process ends with it: its exit skips the collector's
    last full pass (:func:`moot.gctune.skip_final_collection`), 0.13-0.19 s of every command.
    """
    flush = install_from_env()
    try:
        return _main(argv)
    finally:
        if flush is not None:
            flush()
        if argv is None:
            skip_final_collection()


def _main(argv: list[str] | None) -> int:
    try:
        # A context of its own: what a command sets in context variables (--allow-outside-paths) ends with it.
        # The collector set for many calls in flight (moot.gctune): ~20% less CPU per model call.
        args, quiet = lift_quiet(default_ray_address(list(sys.argv[1:] if argv is None else argv)))
        command = next((a for a in args if not a.startswith("-")), None)  # the root takes flags only
        if command is not None or "--version" not in args:
            load_commands(command)
        with tuned_gc() if tuning_wanted() else contextlib.nullcontext(), say_warnings(quiet):
            rv = contextvars.copy_context().run(app, args=args, prog_name="moot", standalone_mode=False)
    except UsageError as exc:
        return _fail(str(exc))
    except ResourceError as exc:  # after work started: what was written is kept (exit 1, not 2)
        return _fail(str(exc), code=1)
    except MootError as exc:
        return _fail(error_text(exc))
    except (click.exceptions.Exit, typer.Exit) as exc:
        return int(exc.exit_code)
    except (click.exceptions.Abort, typer.Abort, KeyboardInterrupt):
        return 130
    except (click.ClickException, typer.TyperException) as exc:
        # Newer typer vendors click; both raise "usage" exceptions with format_message().
        if type(exc).__name__ == "NoArgsIsHelpError":  # `moot` alone: the help text is the message
            print(exc.format_message(), file=sys.stderr)
            return 2
        return _fail(exc.format_message())
    except UnicodeError as exc:  # safety net: every reader should already say which file
        return _fail(f"input is not valid UTF-8 text: {exc}")
    except OSError as exc:  # a file or folder the user named cannot be read or written
        where = f": {exc.filename}" if exc.filename else ""
        return _fail(f"{exc.strerror or exc}{where}")
    except Exception as exc:
        return _internal_error(exc)
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
