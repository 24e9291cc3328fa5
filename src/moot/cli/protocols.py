"""``moot protocols``: list the presets, show one resolved, validate a config file.

::

    moot protocols                      # the presets, one line each
    moot protocols show NAME|FILE       # the resolved protocol as YAML (what `extends: NAME` starts from)
    moot protocols validate FILE [--protocol NAME]   # check a config; no model is called
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from ..engine import Debate
from ..errors import ConfigError, UnknownProviderError, UsageError
from ..models import provider_names, split_provider
from ..protocol import Protocol, load_protocol, presets, read_overrides
from ._io import AllowOutsideOption, allow_outside
from ._safe import clean

__all__ = ["describe", "register", "resolved_yaml"]

app = typer.Typer(
    name="protocols",
    help="List the protocol presets; show one resolved; validate a config file.",
    invoke_without_command=True,
    no_args_is_help=False,
)


def resolved_yaml(protocol: Protocol) -> str:
    """``protocol`` as YAML that loads back to the same protocol (every default written out)."""
    data = protocol.model_dump(mode="json")
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)


def describe(protocol: Protocol) -> str:
    """One line: who speaks when, how many rounds, who decides, the most calls without repairs.

    The speaking order reads ``a + b -> c``: ``+`` joins speakers who talk at once, ``->`` what follows.
    """
    stages = protocol.stages()
    rounds = protocol.rounds
    speakers = sum(len(group) for group in stages)
    calls = rounds * (speakers + (1 if protocol.moderator else 0)) + (1 if protocol.judge else 0)
    parts = [
        "order " + " -> ".join(" + ".join(group) for group in stages),
        f"{rounds} round{'s' if rounds != 1 else ''}",
    ]
    if protocol.moderator:
        parts.append(f"moderator {protocol.moderator.persona} each round")
    if protocol.judge:
        parts.append(f"judge {protocol.judge.persona}")
    parts.append(f"aggregation {protocol.aggregation}")
    parts.append(f"at most {calls} call{'s' if calls != 1 else ''} without repairs")
    return "; ".join(parts)


def _check_models(protocol: Protocol) -> None:
    """Persona model specs must name a known provider (nothing is resolved or loaded)."""
    known = provider_names()
    for key, persona in protocol.personas.items():
        if persona.model:
            provider = split_provider(persona.model)[0]
            if provider not in known:
                raise UsageError(f"persona {key!r}: {UnknownProviderError(provider, known)}")


@app.callback()
def protocols(ctx: typer.Context) -> None:
    """List the bundled protocol presets (or use show / validate)."""
    if ctx.invoked_subcommand is None:
        width = max(shutil.get_terminal_size().columns, 40)
        for name, description in presets().items():
            lines = textwrap.wrap(description, width - 23) or [""]
            typer.echo(clean("\n".join([f"{name:22} {lines[0]}", *(" " * 23 + line for line in lines[1:])])))


@app.command("show")
def show(
    name: Annotated[
        str, typer.Argument(help="A preset name (see `moot protocols`) or a protocol YAML file.")
    ],
    allow_outside_paths: AllowOutsideOption = False,
) -> None:
    """Print a protocol resolved to YAML: every field, with the preset's or moot's defaults filled in."""
    allow_outside(allow_outside_paths)
    typer.echo(resolved_yaml(load_protocol(name)), nl=False)


@app.command("validate")
def validate(
    file: Annotated[Path, typer.Argument(help="A protocol YAML file (or overrides, with --protocol).")],
    protocol: Annotated[
        str | None,
        typer.Option(help="Check FILE as overrides of this preset, as `moot run --protocol` reads it."),
    ] = None,
    allow_outside_paths: AllowOutsideOption = False,
) -> None:
    """Check a config without calling a model: keys, personas, order, prompt files, model providers."""
    allow_outside(allow_outside_paths)
    if not file.is_file():
        raise UsageError(f"config file not found: {file}")
    loaded: Any = file if protocol is None else protocol
    overrides = read_overrides(file) if protocol is not None else None
    try:
        # Debate() also checks prompt files and persona references; it resolves no model.
        debate = Debate(loaded, overrides=overrides)
    except ConfigError as exc:
        raise UsageError(f"{file}: {exc}") from None
    _check_models(debate.protocol)
    typer.echo(clean(f"{file}: valid protocol {debate.protocol.name!r}: {describe(debate.protocol)}"))


def register(root: typer.Typer) -> None:
    """Add ``protocols`` (list, show, validate) to ``root``."""
    root.add_typer(app, name="protocols")
