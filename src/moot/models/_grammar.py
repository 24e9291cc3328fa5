"""What a model spec may hold, read strictly: a part moot does not understand is an error naming it.

A spec that is half understood is worse than one refused: ``openai:M@http://box/v1`` read as
the model ``M@http://box/v1`` sent the prompt and the key to OpenAI's own endpoint instead of
the box. So every part of a spec is either understood or named in a :class:`~moot.errors.UsageError`
before any backend is built (and so before anything is sent):

* the options after ``?``: ``key=value`` pairs joined by ``&``, each key known to the backend
  (:func:`parse_options`), given once, with a value;
* the model name of a remote backend (:func:`check_model_name`): letters, digits and ``. _ - : / + ~``;
  a URL, whitespace, ``@`` (except the ``openai:`` replica form), ``&``, ``=``, ``#``... are refused;
* a local model's path (:func:`check_path`): no URL, no control character, no space at either end;
* each endpoint URL (:func:`check_endpoint`): ``http``/``https``, a host, a valid port, no user
  name or password, no fragment, no whitespace or control character.
"""

from __future__ import annotations

import re
from urllib.parse import unquote_plus, urlsplit

import moot.redact as redact

from ..errors import UsageError

__all__ = ["check_endpoint", "check_model_name", "check_path", "parse_options"]

_KEY = re.compile(r"[a-z][a-z0-9_]*")
_NAME_CHAR = re.compile(r"[A-Za-z0-9._:/+~-]")
_USERINFO = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*@")


def _odd(text: str) -> str | None:
    """The first whitespace, control or non-ASCII character of ``text``, if any."""
    for char in text:
        if char.isspace() or not char.isprintable() or not char.isascii():
            return char
    return None


def parse_options(query: str, allowed: tuple[str, ...]) -> dict[str, str]:
    """``"a=1&b=x%2Fy"`` -> ``{"a": "1", "b": "x/y"}``, each key in ``allowed`` and given once.

    Values are percent-decoded (``+`` is a space, as ``urlencode`` writes it).

    Raises:
        UsageError: a part that is not ``key=value`` (an empty one included), a key given
            twice, a key not in ``allowed``, an empty value, whitespace or a control character.
    """
    known = ", ".join(allowed)
    if not query:
        raise UsageError(f"a '?' with no option after it; known options: {known}")
    odd = _odd(query)
    if odd is not None:
        raise UsageError(f"model options hold {odd!r}: {redact.text(query)!r}")
    options: dict[str, str] = {}
    for part in query.split("&"):
        key, eq, raw = part.partition("=")
        if not eq or not _KEY.fullmatch(key):
            what = "an empty option ('&&' or a trailing '&')" if not part else f"option {redact.text(part)!r}"
            raise UsageError(f"cannot read {what}: options are key=value joined by '&'; known: {known}")
        if key not in allowed:
            raise UsageError(f"unknown model option {key!r}; known: {known}")
        if key in options:
            raise UsageError(f"model option {key!r} given twice")
        value = unquote_plus(raw)
        if not value.strip():
            raise UsageError(f"model option {key!r} has no value")
        options[key] = value
    return options


def check_model_name(provider: str, name: str, *, replicas: bool = False) -> str:
    """``name`` if it is a plain model name for a remote ``provider``; else the error naming the odd part.

    Args:
        provider: ``openai``, ``anthropic``..., for the message.
        name: the model name (empty: the backend's default).
        replicas: the provider reads ``MODEL@URL,URL`` (the caller has split it off already).

    Raises:
        UsageError: a URL, whitespace, ``@`` or any character outside ``A-Z a-z 0-9 . _ - : / + ~``.
    """
    for char in name:
        if not _NAME_CHAR.fullmatch(char):
            hint = ""
            if char == "@":
                hint = " (MODEL@URL names endpoints in openai: specs only)"
                if replicas:
                    hint = " (the replica form is openai:MODEL@URL[,URL...])"
            shown = redact.text(name)
            raise UsageError(f"model name {shown!r} holds {char!r}, which moot does not read{hint}")
    if "://" in name:
        hint = (
            f"name the endpoint with {provider}:MODEL@URL or {provider}:MODEL?base_url=URL"
            if replicas
            else f"a {provider} spec names a model, not an endpoint"
        )
        raise UsageError(f"model name {redact.text(name)!r} holds a URL ('://'): {hint}")
    return name


def check_endpoint(url: str) -> str:
    """``url`` if it is an endpoint moot can send to; else the error naming what is wrong with it.

    Raises:
        UsageError: not ``http``/``https``, no host, a bad port, a user name and password, a
            fragment, whitespace, a control or non-ASCII character.
    """
    shown = redact.url(url)
    odd = _odd(url)
    if odd is not None:
        raise UsageError(f"endpoint {shown!r} holds {odd!r}")
    if _USERINFO.match(url):
        raise UsageError(
            f"endpoint {shown} holds a user name and password: moot sends the API key as a "
            "bearer token (OPENAI_API_KEY, or api_key_env=VAR in the spec); drop them from the URL"
        )
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https"):
        got = f"scheme {parts.scheme!r}" if parts.scheme else "no scheme"
        raise UsageError(f"endpoint {shown!r} has {got}: give an http:// or https:// URL")
    if not parts.hostname:
        raise UsageError(f"endpoint {shown!r} has no host")
    try:
        port = parts.port  # urlsplit checks the port only when it is read
    except ValueError:
        port = 0
    if port == 0:
        raise UsageError(f"endpoint {shown!r} has a port that is not a number from 1 to 65535")
    if parts.fragment or url.endswith("#"):
        raise UsageError(f"endpoint {shown!r} has a fragment ('#...'), which is never sent")
    return url


def check_path(provider: str, path: str) -> str:
    """``path`` if it can name a model file of ``provider`` (``local``); else the error naming the odd part.

    A path may hold spaces inside it (a folder name), not at either end.

    Raises:
        UsageError: a URL (``://``), a control character, or whitespace at either end.
    """
    if "://" in path:
        shown = redact.text(path)
        raise UsageError(f"{provider}: model path {shown!r} is a URL; {provider} runs a file on this machine")
    if any(not c.isprintable() for c in path) or path != path.strip():
        raise UsageError(f"{provider}: model path {path!r} holds a control character or a space at an end")
    return path
