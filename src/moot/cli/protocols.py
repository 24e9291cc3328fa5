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
from ..models import default_model_spec, provider_names, split_provider
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
    model: Annotated[
        str | None,
        typer.Option(help="Price the protocol on this model spec (default $MOOT_MODEL, else local)."),
    ] = None,
) -> None:
    """Print a protocol resolved to YAML, then (as YAML comments) its cost at most and each model's window."""
    allow_outside(allow_outside_paths)
    protocol = load_protocol(name)
    typer.echo(resolved_yaml(protocol), nl=False)
    from ..engine import Debate
    from ..estimate import estimate_debate

    # A short question with no context: what the protocol itself costs, before any history grows big.
    spec = model or default_model_spec()
    try:
        players = {key: persona.model or spec for key, persona in protocol.personas.items()}
        said = estimate_debate(Debate(protocol, model=model), "A one-line question?", None, players).lines()
    except UsageError as exc:  # a model that cannot be resolved here (no key): the YAML still stands
        said = [f"no estimate: {exc}"]
    lines = ["", f"cost and window for a one-line topic on {spec}:", *said]
    typer.echo(clean("\n".join(f"# {line}".rstrip() for line in lines)))


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
