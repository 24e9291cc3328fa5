"""Pipeline configuration: one pydantic model, loadable from the seeds' YAML shapes.

Accepted shapes (all may be mixed; unknown keys are a ``ConfigError`` naming the key)::

    # seed 001 (flat)
    enable_debate: true
    enable_debate_override: true
    debate: {rounds: 2, order: [analyst, critic, empath], personas: {...}}
    debate_override: {min_total: 1.6, min_margin: 0.8, min_target_conf: 0.7}

    # seed 003 (experiment / conditions YAML)
    pipeline:
      debate:
        enabled: true          # same as enable_debate (wins over it when both are set)
        max_rounds: 3          # meta information only; rounds decides (as in the seed); warned
        rounds: 1
        order: [epm, tan, cj]
        injection: {...}       # accepted, no effect yet; warned
        personas: {epm: {name: EPM, role: ..., goal: ..., stance: "", style: ""}}

The debate block is read by :func:`moot.protocol.load_debate_block`, the same
reader ``moot run --config`` uses: the mode comes from ``mode:`` when given,
else from the block's personas (EPM/TAN/CJ -> patch), else ``persona``; a mode
contradicting the personas is an error naming both. Any protocol field (e.g.
``max_tokens_per_turn``) may be set in the block.

Shipped configs (by name): ``default``, ``abl_no_debate``, ``abl_no_debate_override``.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from ..errors import ConfigError
from ..paths import read_text, resolve_config_path, resolve_prompt_paths
from ..protocol import MODE_PRESETS, Protocol, load_debate_block, load_protocol

__all__ = [
    "SHIPPED_CONFIGS",
    "AbsaConfig",
    "ModeratorThresholds",
    "OverrideThresholds",
    "ablations",
    "load_config",
    "load_override_thresholds",
]

SHIPPED_CONFIGS = ("default", "abl_no_debate", "abl_no_debate_override", "patch")
"""Config names resolvable without a path (files under ``moot/resources/absa/``)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class OverrideThresholds(_Strict):
    """Debate override thresholds (seed 001 section 5.1)."""

    min_total: float = 1.6
    """Minimum pos+neg hint weight for an aspect."""
    min_margin: float = 0.8
    """Minimum |pos - neg|."""
    min_target_conf: float = 0.7
    """Confidence at or above which a matching polarity is left alone."""


class ModeratorThresholds(_Strict):
    """The moderator's thresholds; defaults are seed 001 section 6.3's numbers."""

    drop_guard: float = 0.2
    """Rule B: stage1_ate.confidence - stage2_ate.confidence at or above this keeps Stage 1."""
    span_iou: float = 0.8
    """Rule A: minimum span IoU."""
    tie_margin: float = 0.1
    """Rule D: below this ATE/ATSA confidence gap the sentence ATE wins."""
    debate_low_conf: float = 0.55
    """Rule E: below this confidence (or when mixed) the debate consensus overrides."""


class AbsaConfig(_Strict):
    """The whole ABSA pipeline configuration."""

    name: str = "default"
    """A label for reports and ablation tables."""
    description: str = ""
    enable_debate: bool = True
    """Run the debate between Stage 1 and Stage 2."""
    enable_debate_override: bool = True
    """Apply the debate override (persona mode) or the judge's final_patch (patch mode) in Stage 2."""
    mode: Literal["persona", "patch"] | None = None
    """persona: the ``panel`` preset (analyst/critic/empath); patch: the ``patch`` preset (EPM/TAN/CJ).
    None (not given) is decided from the debate block's personas, else ``persona``; after loading
    it always holds the mode that runs."""
    debate: dict[str, Any] = Field(default_factory=dict)
    """The debate block (``rounds``, ``order``, ``personas``, ``enabled``, any protocol field)."""
    debate_override: OverrideThresholds | None = None
    """None reads ``moot/resources/debate_override_thresholds.json``."""
    moderator: ModeratorThresholds = Field(default_factory=ModeratorThresholds)
    max_tokens: int = Field(512, ge=16)
    """Generation cap for each Stage-1/Stage-2 call."""
    temperature: float | None = None
    """Sampling temperature of Stage-1/Stage-2 calls; None keeps the backend default."""
    run_stage2: bool = True
    """Run the Stage-2 ATE/ATSA review calls (the override and patch still apply without them)."""
    budget_usd: float | None = Field(None, gt=0)
    """US dollars each sentence's debate may cost (``--budget-usd``; the debate's own
    ``budget.max_usd``, :mod:`moot.budget`): past it the debate falls back with ``budget``."""

    _protocol: Protocol | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _read_debate_block(self) -> AbsaConfig:
        try:
            block = load_debate_block(self.debate, mode=self.mode, where="debate", source=self.name)
            preset = block.preset or MODE_PRESETS["persona"]
            if preset not in MODE_PRESETS.values():
                raise ConfigError(
                    f"the ABSA pipeline runs the panel or patch preset, not {preset!r}", key="extends"
                )
            data = {**block.data, "extends": preset}
            if self.budget_usd is not None:
                data["budget"] = {**(data.get("budget") or {}), "max_usd": self.budget_usd}
            self._protocol = load_protocol(data)
        except ConfigError as exc:
            raise _prefixed(exc) from None
        self.mode = "patch" if preset == MODE_PRESETS["patch"] else "persona"
        if "enabled" in self.debate:  # seed 003's spelling wins, as in the seed
            self.enable_debate = bool(self.debate["enabled"])
        return self

    @property
    def debate_on(self) -> bool:
        """Whether the debate runs."""
        return self.enable_debate

    def stage_calls(self) -> list[int]:
        """The token cap of every Stage-1/Stage-2 call one sentence makes (repairs not counted).

        ATE, ATSA and the validator, and the two reviews with ``run_stage2``. Sizes the default
        deadline (:func:`moot.absa.pipeline.default_timeout_s`).
        """
        return [self.max_tokens] * (5 if self.run_stage2 else 3)

    def with_judging(self, options: dict[str, bool]) -> AbsaConfig:
        """This config with its debate's deciding-step options set (``--judge-blind``...: docs/judging.md).

        The debate block says so too, so a recorded config re-runs the same way.
        """
        if not options:
            return self
        block = {**self.debate, "judging": {**(self.debate.get("judging") or {}), **options}}
        out = self.model_copy(update={"debate": block})
        proto = self.protocol()
        out._protocol = proto.model_copy(update={"judging": proto.judging.model_copy(update=options)})
        return out

    def protocol(self) -> Protocol:
        """The debate protocol this config runs."""
        if self._protocol is None:  # pragma: no cover - set by the validator
            raise ConfigError("config not validated")
        return self._protocol

    @property
    def rounds(self) -> int:
        """Effective number of rounds."""
        return self.protocol().rounds

    @property
    def order(self) -> list[str]:
        """Effective speaking order."""
        return self.protocol().speakers()

    @property
    def preset(self) -> str:
        """The engine preset this mode uses."""
        return MODE_PRESETS[self.mode or "persona"]

    def thresholds(self) -> OverrideThresholds:
        """Override thresholds: the config's, else the shipped JSON file's."""
        return self.debate_override if self.debate_override is not None else load_override_thresholds()


def _prefixed(exc: ConfigError) -> ConfigError:
    # Errors from the debate block name their key under ``debate.`` (mode stays top level).
    if exc.key is None or exc.key == "mode":
        return exc
    key = f"debate.{exc.key}"
    if str(exc).startswith("unknown key"):
        return ConfigError(f"unknown config key {key!r}", key=key)
    return ConfigError(f"invalid config at {key!r}: {exc}", key=key)


def load_override_thresholds(path: str | Path | None = None) -> OverrideThresholds:
    """Read override thresholds from a JSON file (default: the shipped one).

    Raises:
        ConfigError: the file is missing, unreadable, not UTF-8, not a JSON object, or has unknown keys.
    """
    if path is None:
        text = (
            resources.files("moot").joinpath("resources/debate_override_thresholds.json").read_text("utf-8")
        )
    else:
        text = read_text(path, "override thresholds file", error=ConfigError)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"override thresholds {path} are not valid JSON: {exc}", key="debate_override"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"override thresholds {path} must be a JSON object of thresholds, not a {type(data).__name__}",
            key="debate_override",
        )
    data = {k: v for k, v in data.items() if not k.startswith("_")}  # "_comment" keys
    thresholds: OverrideThresholds = _validate(OverrideThresholds, data, prefix="debate_override")
    return thresholds


def _validate(model: type[_Strict], data: Any, *, prefix: str = "") -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        key = f"{prefix}.{key}" if prefix and key else (prefix or key)
        if err["type"] == "extra_forbidden":
            raise ConfigError(f"unknown config key {key!r}", key=key) from None
        raise ConfigError(f"invalid config value at {key!r}: {err['msg']}", key=key) from None


def _flatten(data: dict[str, Any], base_dir: Path | None, source: str) -> dict[str, Any]:
    # Seed 003 nests pipeline settings under ``pipeline:``; merge them into the top level.
    # Paths in a config file (thresholds, prompts) resolve against its folder and stay in it.
    out = {k: v for k, v in data.items() if k != "pipeline"}
    pipeline = data.get("pipeline")
    if pipeline is not None:
        if not isinstance(pipeline, dict):
            raise ConfigError("'pipeline' must be a mapping", key="pipeline")
        for key, value in pipeline.items():
            if key in out:
                raise ConfigError(f"{key!r} is set both at the top level and under 'pipeline'", key=key)
            out[key] = value
    if isinstance(out.get("debate_override"), str):
        ref: str | Path = out["debate_override"]
        if base_dir is not None:
            ref = resolve_config_path(str(ref), base_dir, key="debate_override", source=source)
        out["debate_override"] = load_override_thresholds(ref).model_dump()
    if base_dir is not None and isinstance(out.get("debate"), dict):
        out["debate"] = resolve_prompt_paths(out["debate"], base_dir, source=source)
    return out


def load_config(source: str | Path | dict[str, Any] | AbsaConfig | None = None) -> AbsaConfig:
    """Load a pipeline config from a shipped name, a YAML/JSON path, a dict, or None (defaults).

    Args:
        source: ``None`` or ``"default"``, ``"abl_no_debate"``, ``"abl_no_debate_override"``,
            a file path, a mapping in one of the seeds' shapes, or an ``AbsaConfig``.

    Returns:
        The validated config.

    Raises:
        ConfigError: unknown key (``.key`` names it), bad value, or unreadable file.
    """
    if isinstance(source, AbsaConfig):
        return source
    if source is None:
        source = "default"
    base_dir: Path | None = None
    if isinstance(source, dict):
        data: Any = source
    else:
        text = _read_source(source)
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            message = " ".join(str(exc).split())  # one line: YAML errors quote the source over several
            raise ConfigError(f"invalid YAML in {source}: {message}") from None
        data = {} if data is None else data
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: an ABSA config must be a mapping, not a {type(data).__name__}")
        data = dict(data)
        if isinstance(source, str) and source in SHIPPED_CONFIGS:
            data.setdefault("name", source)
        else:
            data.setdefault("name", Path(source).stem)
            base_dir = Path(source).parent
    if not isinstance(data, dict):
        raise ConfigError("an ABSA config must be a mapping")
    result: AbsaConfig = _validate(AbsaConfig, _flatten(data, base_dir, str(source)))
    return result


def _read_source(source: str | Path) -> str:
    if isinstance(source, str) and source in SHIPPED_CONFIGS:
        return resources.files("moot").joinpath(f"resources/absa/{source}.yaml").read_text("utf-8")
    path = Path(source)
    if not path.is_file():
        known = ", ".join(SHIPPED_CONFIGS)
        raise ConfigError(f"no such ABSA config file: {source} (shipped configs: {known})", key="config")
    return read_text(path, "ABSA config", error=ConfigError)


def ablations(config: AbsaConfig) -> dict[str, AbsaConfig]:
    """The config and its two seed ablations, keyed by name, in table order.

    The ablations keep every other setting of ``config`` so the comparison
    isolates the debate and the override.
    """
    return {
        config.name: config,
        "abl_no_debate_override": config.model_copy(
            update={"name": "abl_no_debate_override", "enable_debate": True, "enable_debate_override": False}
        ),
        "abl_no_debate": config.model_copy(
            update={"name": "abl_no_debate", "enable_debate": False, "enable_debate_override": False}
        ),
    }
