"""Mask credentials before any text is stored, logged, printed, traced or shown.

A credential reaches moot inside text it did not write: an endpoint URL with
user-info (``http://user:pass@host/v1``) or a key in its query
(``...?api_key=K``), a model spec carrying such a URL, a command line, a
server's error body. Every place text leaves the process (the run store, the
terminal, the viewer, a span) passes it through one of these functions, which
keep the text readable and replace only the secret::

    http://user:pass@host/v1?api_key=K&model=m  ->  http://***@host/v1?api_key=***&model=m

* :func:`url` masks one URL; :func:`text` every URL and credential-looking
  query parameter inside free text, in plain and percent-encoded form (a
  ``base_url`` inside a model spec is encoded); :func:`data` walks JSON data
  (a key named like a secret has its whole value masked, every string is
  passed through :func:`text`); :func:`argv` masks a command line.
* Query parameters masked: :data:`SECRET_PARAMS` and every name listed
  (comma-separated) in ``$MOOT_REDACT_PARAMS``, compared without case.
* Server error bodies also lose ``Authorization``/``x-api-key`` header values
  (:func:`moot.errors.redact`).

The functions are cheap on text with nothing to mask (one substring scan
before any regular expression), so they run on every write.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from .errors import REDACTED
from .errors import redact as _redact_headers

__all__ = ["MASK", "SECRET_PARAMS", "argv", "data", "secret_key", "text", "url"]

MASK = REDACTED
"""What replaces a secret: ``***``."""

SECRET_PARAMS = (
    "api_key",
    "api-key",
    "apikey",
    "key",
    "token",
    "access_token",
    "auth_token",
    "id_token",
    "refresh_token",
    "sig",
    "signature",
    "password",
    "passwd",
    "secret",
    "client_secret",
    "x-amz-signature",
    "x-amz-credential",
    "x-goog-signature",
)
"""Query parameter names whose value is always masked (more: ``$MOOT_REDACT_PARAMS``)."""

# Whole key names of JSON objects and options (after a prefix such as ``openai_``): ``max_tokens``
# or a persona's ``key`` stay, ``api_key``, ``auth_token`` or ``client_secret`` go.
_SECRET_NAMES = (
    r"(api[_-]?key|token|access[_-]?token|auth[_-]?token|secret|client[_-]?secret|password|passwd"
    r"|authorization|bearer|credentials?)"
)
_SECRET_KEY = re.compile(rf"^(.*[_-])?{_SECRET_NAMES}$", re.I)

# User-info: ``//user:pass@`` or percent-encoded ``%2F%2Fuser%3Apass%40`` (a URL inside a spec's query),
# up to the last "@" before the path (a password may hold "@"). No backslash or quote: the text may be JSON.
_USERINFO = re.compile(r"(?i)(//)([^/\s?#\"'<>\\]+)@|(%2F%2F)((?:(?!%2F)[^/\s?#&\"'<>\\])+)%40")


@lru_cache(maxsize=8)
def _rules(extra: str) -> tuple[int, re.Pattern[str], re.Pattern[str]]:
    """``(longest name + 3, name-before-"=" pattern, full pattern)`` for the names in force."""
    listed = (p.strip().lower() for p in extra.split(","))
    names = sorted(set(SECRET_PARAMS).union(p for p in listed if p), key=len, reverse=True)
    alternatives = "|".join(re.escape(n) for n in names)
    before = re.compile(rf"(?i)(?:[?&;]|%3F|%26|%3B)(?:{alternatives})$")
    # A name after ``?``, ``&`` or ``;`` (or their encodings), then ``=`` (or ``%3D``), then the
    # value up to the next separator. ``api_key_env=VAR`` names a variable, not a key: whole names only.
    full = re.compile(
        rf"(?i)((?:[?&;]|%3F|%26|%3B)(?:{alternatives}))(=|%3D)((?:(?!%26|%3B)[^&;#\s\"'<>\\])*)"
    )
    return max(len(n) for n in names) + 3, before, full


def _has_param(value: str, longest: int, before: re.Pattern[str]) -> bool:
    # Look only just before each "=" (found at C speed): a regular expression tried at every
    # position of a 1 kB event costs ~40 us, this a few.
    for sign in ("=", "%3D", "%3d"):
        at = value.find(sign)
        while at != -1:
            if before.search(value, max(0, at - longest), at):
                return True
            at = value.find(sign, at + 1)
    return False


def _has_userinfo(value: str) -> bool:
    return ("@" in value and "//" in value) or "%40" in value


def _userinfo(match: re.Match[str]) -> str:
    if match.group(1) is not None:
        return f"{match.group(1)}{MASK}@"
    return f"{match.group(3)}{MASK}%40"


def url(value: str) -> str:
    """One URL with its user-info and credential query parameters masked; the rest kept.

    ``http://user:pass@h/v1?api_key=K&x=1`` -> ``http://***@h/v1?api_key=***&x=1``.
    """
    return text(value)


def text(value: str) -> str:
    """``value`` with every URL user-info and credential-looking query parameter masked.

    Works on free text (an error message, a command line argument, a model spec) as on a
    bare URL, and on percent-encoded URLs inside another URL's query.
    """
    if not value:
        return value
    if _has_userinfo(value):
        value = _USERINFO.sub(_userinfo, value)
    longest, before, full = _rules(os.environ.get("MOOT_REDACT_PARAMS", ""))
    if _has_param(value, longest, before):
        value = full.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK if m.group(3) else ''}", value)
    return value


def secret_key(name: object) -> bool:
    """Whether a JSON key or option name holds a secret (``api_key``, ``openai_token``...)."""
    return bool(_SECRET_KEY.search(str(name)))


def data(value: Any) -> Any:
    """A copy of JSON-like ``value``: secret-named keys' values become ``***``, strings pass :func:`text`.

    Server error bodies in it also lose ``Authorization``/``x-api-key`` values.
    """
    if isinstance(value, str):
        return _redact_headers(text(value))
    if isinstance(value, Mapping):
        return {k: (MASK if secret_key(k) and v not in (None, "") else data(v)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [data(v) for v in value]
    return value


def argv(args: Sequence[str]) -> list[str]:
    """A command line with secret option values (``--token X``, ``--api-key=X``) and URL secrets masked."""
    out: list[str] = []
    hide = False
    for arg in args:
        if hide:
            out.append(MASK)
            hide = False
            continue
        name, eq, _ = arg.partition("=")
        if name.startswith("--") and secret_key(name[2:]):
            if eq:
                out.append(f"{name}={MASK}")
            else:
                out.append(arg)
                hide = True
            continue
        out.append(text(arg))
    return out
