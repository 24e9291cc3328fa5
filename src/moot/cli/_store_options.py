"""The ``--store PATH`` / ``--no-store`` options every recording command takes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["NoStoreOption", "StoreOption", "TrustEditedOption"]

StoreOption = Annotated[
    Path | None,
    typer.Option(
        "--store", help="Run store file (default $MOOT_STORE or ./.moot/runs.db).", show_default=False
    ),
]
NoStoreOption = Annotated[bool, typer.Option("--no-store", help="Do not record this run in the run store.")]
TrustEditedOption = Annotated[
    bool,
    typer.Option(
        "--trust-edited",
        help="With --from: use a record that was edited after it was recorded (refused otherwise); "
        "the new run records that it replayed an edited record.",
    ),
]
