"""The deciding-step options of ``moot run``, ``bench``, ``arbitrate`` and ``absa`` (docs/judging.md)."""

from __future__ import annotations

from typing import Annotated

import typer

__all__ = [
    "JudgeAuditOption",
    "JudgeBlindOption",
    "JudgeShuffleOption",
    "JudgeSwapRobustOption",
    "judging_options",
]

JudgeBlindOption = Annotated[
    bool,
    typer.Option(
        "--judge-blind",
        help="Show the deciding step (judge, moderator, arbitrator) the candidates as Speaker A, B...: "
        "no persona name, role, stance or model name.",
    ),
]
JudgeShuffleOption = Annotated[
    bool,
    typer.Option(
        "--judge-shuffle",
        help="Show the deciding step the candidates in a seeded random order per call (recorded).",
    ),
]
JudgeAuditOption = Annotated[
    bool,
    typer.Option(
        "--judge-audit",
        help="Ask each deciding call again in the reversed order (and blind): position and identity "
        "flip rates with 95%% intervals; the extra calls are counted apart.",
    ),
]
JudgeSwapRobustOption = Annotated[
    bool,
    typer.Option(
        "--judge-swap-robust",
        help="A decision that changes with the candidates' order becomes undecided (position-sensitive).",
    ),
]


def judging_options(blind: bool, shuffle: bool, audit: bool, swap_robust: bool) -> dict[str, bool]:
    """The options switched on, as ``{"blind": True, ...}`` (off ones left out: the protocol's stand)."""
    given = {"blind": blind, "shuffle": shuffle, "audit": audit, "swap_robust": swap_robust}
    return {k: v for k, v in given.items() if v}
