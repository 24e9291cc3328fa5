"""The ``--ray [ADDRESS]`` / ``--ray-workers N`` options of ``moot bench`` and ``moot absa --input``."""

from __future__ import annotations

from typing import Annotated

import typer

__all__ = ["RayOption", "RayWorkersOption", "default_ray_address"]

DEFAULT_ADDRESS = "auto"
"""What ``--ray`` without an address means: the cluster running here, else a new one."""

RayOption = Annotated[
    str | None,
    typer.Option(
        "--ray",
        metavar="ADDRESS",
        # typer renders help as rich markup, where a bare [ray] is a tag and vanishes.
        help="Run on a Ray cluster (needs moot\\[ray]): local starts one here, auto (--ray alone) joins "
        "the one running here (else starts one), or HOST:6379 / ray://HOST:10001. "
        "--concurrency is then per worker.",
        show_default=False,
    ),
]
RayWorkersOption = Annotated[
    int | None,
    typer.Option(
        "--ray-workers",
        min=1,
        help="With --ray: workers, one CPU and one model each (default: one per CPU of the cluster).",
        show_default=False,
    ),
]


def default_ray_address(args: list[str]) -> list[str]:
    """``args`` with ``--ray`` given no address (last, or before another option) made ``--ray auto``.

    Click has no option whose value may be left out (typer deprecates click's flag_value), so
    the address is filled in before parsing. Nothing after ``--`` is touched.
    """
    out: list[str] = []
    for i, arg in enumerate(args):
        if arg == "--":
            return out + args[i:]
        out.append(arg)
        if arg == "--ray" and (i + 1 == len(args) or args[i + 1].startswith("-")):
            out.append(DEFAULT_ADDRESS)
    return out
