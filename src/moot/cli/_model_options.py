"""``--model-concurrency N``: the one option every subcommand that calls a model takes."""

from __future__ import annotations

from typing import Annotated

import typer

from ..models.base import cap_concurrency
from ._io import MAX_CONCURRENCY

__all__ = ["ModelConcurrencyOption", "apply_model_concurrency"]

ModelConcurrencyOption = Annotated[
    int | None,
    typer.Option(
        "--model-concurrency",
        min=1,
        max=MAX_CONCURRENCY,
        metavar="N",
        help="Cap the requests in flight per model endpoint (default: adaptive, from what the work "
        "asks for, shrinking on 429/503/time-outs; the embedded model: 1).",
        show_default=False,
    ),
]


def apply_model_concurrency(value: int | None) -> None:
    """Cap every model of this command at ``value`` requests in flight per endpoint (None: adaptive)."""
    if value is not None:
        cap_concurrency(value)
