"""Reading user files, and the paths a config file may name.

A config file can point at other files: prompt files (``speaker_prompt``,
``judge.prompt``, ``moderator.prompt``, ``speakers_spec.KEY.prompt``), a base
protocol (``extends: other.yaml``) and, for ABSA, override thresholds
(``debate_override: thresholds.json``). Those paths resolve relative to the
config file's own folder, not the working directory, and may not leave that
folder (or the package's own prompt folder): a config from elsewhere must not
be able to send ``/etc/passwd`` or ``../../.ssh/id_rsa`` to a model.
:func:`allow_outside_paths` lifts the limit; the CLI sets it from
``--allow-outside-paths``, or ``MOOT_ALLOW_PATHS=1`` does.

Dicts handed to the library by code carry no folder; their paths are left as
they are (code that calls the library is trusted with its own files).
"""

from __future__ import annotations

import contextvars
import importlib.resources
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .errors import ConfigError, UsageError

__all__ = [
    "CACHE_DIR_ENV",
    "allow_outside_paths",
    "cache_dir",
    "outside_paths_allowed",
    "read_text",
    "resolve_config_path",
    "resolve_prompt_paths",
    "set_outside_paths_allowed",
]

ENV_ALLOW = "MOOT_ALLOW_PATHS"
"""Environment variable that, set to ``1``, lets config paths leave the config's folder."""

_ALLOW: contextvars.ContextVar[bool] = contextvars.ContextVar("moot_allow_outside_paths", default=False)


def outside_paths_allowed() -> bool:
    """Whether config paths may leave their config's folder (flag or ``MOOT_ALLOW_PATHS=1``)."""
    return _ALLOW.get() or os.environ.get(ENV_ALLOW, "").strip().lower() in ("1", "true", "yes")


def set_outside_paths_allowed(allow: bool) -> None:
    """Allow (or not) config paths outside their folder from now on in this context.

    Prefer :func:`allow_outside_paths`, which restores the previous state; this one is for
    callers that run in a context of their own (the CLI runs each command in one).
    """
    _ALLOW.set(allow)


@contextmanager
def allow_outside_paths(allow: bool = True) -> Iterator[None]:
    """Within the block, config paths may (or, with ``False``, may not) leave their folder."""
    token = _ALLOW.set(allow)
    try:
        yield
    finally:
        _ALLOW.reset(token)


def read_text(path: str | Path, what: str, *, error: type[UsageError] = UsageError) -> str:
    """The UTF-8 text of a user's file, or one clear error.

    Args:
        path: the file.
        what: what the file is, for the message (``"context file"``, ``"dataset"``...).
        error: the exception class to raise (``ConfigError`` for files a config names).

    Raises:
        UsageError: missing, a directory, unreadable, or not UTF-8 (the byte offset is named).
    """
    path = Path(path)
    if path.is_dir():
        raise error(f"{what} {path} is a directory, not a file")
    if not path.is_file():
        raise error(f"{what} not found: {path}")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(
            f"{what} {path} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None


def _prompt_dir() -> Path:
    return Path(str(importlib.resources.files("moot").joinpath("prompts")))


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def resolve_config_path(ref: str, base_dir: Path, *, key: str, source: str) -> Path:
    """Resolve ``ref``, a path written in the config file ``source``, against its folder ``base_dir``.

    Symlinks are followed before the check, so a link inside the folder that
    points out of it is refused too.

    Raises:
        ConfigError: the path leaves ``base_dir`` (and the package's prompt folder)
            while outside paths are not allowed; the message names the key and the way out.
    """
    path = (base_dir / Path(ref).expanduser()).resolve()
    if outside_paths_allowed():
        return path
    if _inside(path, base_dir.resolve()) or _inside(path, _prompt_dir().resolve()):
        return path
    raise ConfigError(
        f"{key}: {ref!r} in {source} points outside the config's folder {base_dir.resolve()}; "
        f"pass --allow-outside-paths (or set {ENV_ALLOW}=1) to allow it",
        key=key,
    )


def _resolve_prompt(ref: Any, base_dir: Path, *, key: str, source: str) -> Any:
    if not isinstance(ref, str) or not ref.strip():
        return ref  # the schema reports the wrong type
    candidate = Path(ref)
    shipped = candidate.name == ref and (_prompt_dir() / candidate).is_file()
    if shipped and not (base_dir / candidate).is_file():
        return ref  # a prompt shipped with moot, e.g. judge.md, stays a name
    path = resolve_config_path(ref, base_dir, key=key, source=source)
    if not path.is_file():
        raise ConfigError(
            f"{key}: prompt file {ref!r} not found next to {source} nor among moot's prompts", key=key
        )
    return str(path)


def resolve_prompt_paths(data: dict[str, Any], base_dir: Path, *, source: str) -> dict[str, Any]:
    """A copy of protocol data with its prompt paths resolved against ``base_dir``.

    A name of a prompt shipped with moot stays a name unless a file of that name
    sits next to the config (which then wins, as a local customisation).

    Raises:
        ConfigError: a prompt path leaves the folder, or names no file.
    """
    out = dict(data)

    def nested(spec: Any, key: str) -> Any:
        if not isinstance(spec, dict) or "prompt" not in spec:
            return spec
        return {**spec, "prompt": _resolve_prompt(spec["prompt"], base_dir, key=key, source=source)}

    if "speaker_prompt" in out:
        out["speaker_prompt"] = _resolve_prompt(
            out["speaker_prompt"], base_dir, key="speaker_prompt", source=source
        )
    for role in ("judge", "moderator"):
        if role in out:
            out[role] = nested(out[role], f"{role}.prompt")
    speakers = out.get("speakers_spec")
    if isinstance(speakers, dict):
        out["speakers_spec"] = {
            name: nested(spec, f"speakers_spec.{name}.prompt") for name, spec in speakers.items()
        }
    return out


CACHE_DIR_ENV = "MOOT_CACHE_DIR"
"""Environment variable naming moot's own cache folder (what moot learnt about endpoints)."""


def cache_dir() -> Path:
    """The per-user cache folder: ``$MOOT_CACHE_DIR``, else ``$XDG_CACHE_HOME/moot``, else ``~/.cache/moot``.

    Not created here: whoever writes into it does. Nothing in it is needed: deleting it only
    makes moot learn again what it had remembered.
    """
    explicit = os.environ.get(CACHE_DIR_ENV, "").strip()
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "moot"
