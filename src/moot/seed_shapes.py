"""The seeds' configuration shapes: one reader for ``moot run`` and the ABSA pipeline.

Seed shapes (``pipeline.debate`` or ``debate``) are read by one function,
:func:`load_debate_block`, for ``moot run`` and the ABSA pipeline alike:

- the preset is the config's ``extends:``, else the one its ``mode:`` names
  (``persona`` -> ``panel``, ``patch`` -> ``patch``), else the preset whose
  personas the block's ``order``/``personas`` keys all belong to (so seed 003's
  EPM/TAN/CJ block runs the ``patch`` debate with or without ``mode:``); a
  ``mode:`` whose preset does not know the block's personas while another
  preset does is an error naming both;
- ``enabled: false`` skips the debate (no model call; the initial answer is
  the result);
- keys the seeds define and moot does not use (``max_rounds``, seed 003's
  metadata, and ``injection``) are accepted with a one-line warning on the
  ``moot`` logger; the round count is ``rounds`` (the preset's when absent).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError

__all__ = ["MODE_PRESETS", "SEED_UNUSED_KEYS", "DebateBlock", "load_debate_block", "unwrap_seed_shape"]

_log = logging.getLogger("moot")

MODE_PRESETS = {"persona": "panel", "patch": "patch"}
"""An ABSA config's ``mode:`` -> the preset that runs its debate."""

SEED_UNUSED_KEYS = {
    "max_rounds": "seed 003 metadata; the round count is `rounds`",
    "injection": "memory injection is not implemented",
}
"""Keys a seed's debate block defines that moot accepts without acting on them, and why."""

_ABSA_ONLY_KEYS = frozenset(
    {"enable_debate_override", "debate_override", "moderator", "max_tokens", "run_stage2"}
)


@dataclass(frozen=True)
class DebateBlock:
    """A seed-shaped debate block, read by :func:`load_debate_block`."""

    data: dict[str, Any]
    """Protocol fields, with ``extends`` set to the preset when one was decided."""
    preset: str | None
    """The preset the block extends (explicit, from ``mode``, or inferred from its personas)."""
    ignored: tuple[str, ...]
    """Seed keys accepted without effect (each logged once as a warning)."""


def _block_persona_keys(block: dict[str, Any]) -> set[str]:
    keys = set(block["personas"]) if isinstance(block.get("personas"), dict) else set()
    order = block.get("order")
    for item in order if isinstance(order, list) else []:
        if isinstance(item, list):
            keys.update(str(k) for k in item)
        else:
            keys.add(str(item))
    return keys


preset_personas: Callable[[str], Iterable[str]] | None = None
"""The persona keys of a preset, by name: set by :mod:`moot.protocol` when it loads (it reads seed
shapes through this module, so this module does not import it)."""


def _preset_for(block: dict[str, Any], mode: Any) -> str | None:
    assert preset_personas is not None, "moot.protocol sets seed_shapes.preset_personas on import"
    personas_of = preset_personas
    if mode is not None and mode not in MODE_PRESETS:
        raise ConfigError(f"unknown mode {mode!r}; known: {', '.join(MODE_PRESETS)}", key="mode")
    keys = _block_persona_keys(block)
    owners = [m for m, preset in MODE_PRESETS.items() if keys and keys <= set(personas_of(preset))]
    if mode is None:
        return MODE_PRESETS[owners[0]] if len(owners) == 1 else None
    if owners and mode not in owners:
        raise ConfigError(
            f"mode {mode!r} contradicts the personas {', '.join(sorted(keys))}, which belong to mode "
            f"{owners[0]!r} (preset {MODE_PRESETS[owners[0]]!r}); fix the mode or the personas",
            key="mode",
        )
    return MODE_PRESETS[mode]


def load_debate_block(
    block: dict[str, Any],
    *,
    mode: Any = None,
    where: str = "pipeline.debate",
    source: str = "config",
    infer: bool = True,
) -> DebateBlock:
    """Read a seed-shaped debate block (see the module docstring): the one reader of that shape.

    Args:
        block: the mapping under ``pipeline.debate`` (or ``debate``).
        mode: the config's ``mode:`` (``persona`` or ``patch``), if it has one.
        where: the block's dotted path, for messages.
        source: the file or label the block came from, for messages.
        infer: decide the preset (False for overrides merged onto a chosen preset).

    Raises:
        ConfigError: unknown mode, or a mode contradicting the block's personas.
    """
    data = dict(block)
    ignored = []
    for key, why in SEED_UNUSED_KEYS.items():
        if key in data:
            data.pop(key)
            ignored.append(key)
            _log.warning("%s: %s.%s has no effect (%s)", source, where, key, why)
    preset = data.get("extends")
    if infer and preset is None:
        preset = _preset_for(data, mode)
        if preset is not None:
            data["extends"] = preset
    elif infer and mode is not None and MODE_PRESETS.get(str(mode)) != preset:
        raise ConfigError(f"mode {mode!r} contradicts extends: {preset}", key="mode")
    return DebateBlock(data=data, preset=None if preset is None else str(preset), ignored=tuple(ignored))


def unwrap_seed_shape(data: dict[str, Any], source: str, *, infer: bool = True) -> dict[str, Any]:
    """Protocol data from the seeds' shapes ``{pipeline: {debate: ...}}`` and ``{debate: ...}``.

    Any other mapping is returned as a copy, unchanged. ``infer=False`` (overrides merged onto
    a chosen preset) reads the block without deciding a preset.
    """
    if "pipeline" not in data and "debate" not in data:
        return dict(data)  # a copy: the caller's mapping is never changed
    top = {k: v for k, v in data.items() if k != "pipeline"}
    pipeline = data.get("pipeline") or {}
    if not isinstance(pipeline, dict):
        raise ConfigError(f"'pipeline' must be a mapping in {source}", key="pipeline")
    for key, value in pipeline.items():
        if key in top:
            raise ConfigError(f"{key!r} is set both at the top level and under 'pipeline'", key=key)
        top[key] = value
    where = "pipeline.debate" if "pipeline" in data else "debate"
    block = top.pop("debate", None) or {}
    if not isinstance(block, dict):
        raise ConfigError(f"{where!r} must be a mapping in {source}", key=where)
    mode = top.pop("mode", None)
    enable = top.pop("enable_debate", None)
    for key in ("name", "description"):
        if key in top:
            block.setdefault(key, top.pop(key))
    for key in sorted(top):
        if key not in _ABSA_ONLY_KEYS:
            raise ConfigError(f"unknown key {key!r} in {source}", key=key)
        _log.warning("%s: %s has no effect here (it applies to `moot absa`)", source, key)
    out = load_debate_block(block, mode=mode, where=where, source=source, infer=infer).data
    if enable is not None:
        out.setdefault("enabled", enable)  # as in the ABSA pipeline, the block's own `enabled` wins
    return out
