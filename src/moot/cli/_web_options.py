"""The ``--host`` / ``--token`` options of the commands that bind a port (``moot view``, ``moot serve``).

One rule for both: a token shorter than :data:`MIN_TOKEN` is refused, and binding anything but
loopback needs a token (the message says what the network would get, and gives a token to use).
"""

from __future__ import annotations

import secrets
from typing import Annotated

import typer

from ..errors import UsageError

__all__ = ["LOOPBACK", "MIN_TOKEN", "HostOption", "check_token", "token_option"]

LOOPBACK = ("127.0.0.1", "localhost", "::1")
"""Addresses only this machine reaches: binding them needs no token."""
MIN_TOKEN = 16
"""Shortest --token accepted: a short one is guessed by anyone who can reach the port."""

HostOption = Annotated[
    str, typer.Option("--host", help="Address to bind; anything but loopback needs --token.")
]


def token_option(envvar: str, what: str) -> object:
    """The ``--token`` option (default from ``envvar``); ``what``: where the token is required."""
    return typer.Option(
        "--token",
        envvar=envvar,
        help=f"Require this token (at least {MIN_TOKEN} characters) {what}.",
        show_default=False,
    )


def check_token(host: str, token: str | None, *, exposes: str, envvar: str) -> None:
    """Refuse a token shorter than :data:`MIN_TOKEN`, and a non-loopback ``host`` without one.

    Args:
        host: the address to bind.
        token: the token given, or None.
        exposes: what the network would get without one ("show your runs to the network").
        envvar: the variable that may hold the token, named in the message.

    Raises:
        UsageError: which, with a token to use (random, 32 characters).
    """
    if token is not None and len(token) < MIN_TOKEN:
        raise UsageError(
            f"--token must be at least {MIN_TOKEN} characters (got {len(token)}); "
            f"for example --token {secrets.token_urlsafe(24)}"
        )
    if host not in LOOPBACK and not token:
        raise UsageError(
            f"--host {host} would {exposes}: give --token (or set {envvar}), "
            f"e.g. --token {secrets.token_urlsafe(24)}"
        )
