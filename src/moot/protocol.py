"""Protocols are data: who speaks, in what order, who sees what, who decides.

A protocol loads from a preset name (``panel``), a YAML file, or a dict, and
also accepts the seeds' own shape, where the debate settings sit under
``pipeline.debate`` (``rounds``, ``order``, ``personas``). Unknown keys and
unknown persona keys are rejected with an error that names them.

Seed shapes (``pipeline.debate`` or ``debate``) are read by
:mod:`moot.seed_shapes`, the one reader for ``moot run`` and the ABSA pipeline.

The ``order`` list may contain lists: ``[[pro, con, advocate, critic], refiner]``
runs the four first concurrently, then the refiner with their turns in view.
With ``turn_mode: simultaneous`` every speaker of a round forms one concurrent
group and sees only earlier rounds; with ``sequential`` each speaker sees the
turns before it.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

import moot.seed_shapes as seed_shapes

from .errors import ConfigError
from .models.retry import RetryPolicy
from .paths import read_text, resolve_config_path, resolve_prompt_paths
from .schemas import get_output
from .seed_shapes import MODE_PRESETS, SEED_UNUSED_KEYS, DebateBlock, load_debate_block, unwrap_seed_shape
from .transcript import Persona

__all__ = [
    "Budget",
    "EarlyStop",
    "MODE_PRESETS",
    "SEED_UNUSED_KEYS",
    "DebateBlock",
    "FileMapping",
    "JudgeSpec",
    "Judging",
    "Protocol",
    "load_debate_block",
    "load_protocol",
    "preset_names",
    "read_overrides",
    "read_yaml_file",
    "presets",
]

Visibility = Literal["all", "previous_round", "ring", "none"]
Aggregation = Literal["judge", "majority", "confidence_weighted", "evidence_based", "majority_vote", "none"]


MAX_TOKENS_PER_CALL = 131_072
"""Upper bound of a per-call generation cap: no served model writes more in one reply, so a
larger value is a typo (and against an in-process model, a turn that would run for hours)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class JudgeSpec(_Strict):
    """A deciding step: the final judge, or a moderator closing every round."""

    persona: str
    """Key of the persona that plays this role (must be in ``personas``)."""
    prompt: str = "judge.md"
    """Prompt file under ``moot/prompts`` (or a path)."""
    output: str = "summary"
    """Output schema name."""
    max_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS_PER_CALL)
    """Token cap for this call (default: the protocol's per-turn cap)."""
    answer_field: str | None = None
    """Field of the output that becomes ``final_answer`` (judge only)."""
    task: str = "Evaluate the debate above."
    """The instruction closing the prompt."""


class Judging(_Strict):
    """How the deciding steps (judge, moderator) see the candidates (docs/judging.md).

    Every option is off by default, so each preset keeps the behaviour its seed documents.
    """

    blind: bool = False
    """Name the candidates ``Speaker A``, ``Speaker B``... (by the order shown): no persona name,
    role, stance or model name reaches the deciding call; its decision is mapped back to personas."""
    shuffle: bool = False
    """Show the candidates in an order drawn per deciding call from a generator seeded with
    ``seed``, the topic, the step and the round (recorded in the turn), not the persona order."""
    audit: bool = False
    """Ask each deciding call again with the order reversed (rotated for more than two candidates)
    and, when ``blind`` is off, once more blind; the extra calls are counted apart."""
    swap_robust: bool = False
    """Ask the reversed order too; when the two decisions differ, the step's decision becomes the
    protocol's undecided outcome with the reason ``position-sensitive``."""
    seed: int = 0
    """Seed of the shuffle."""


class SpeakerSpec(_Strict):
    """A speaker's own prompt and task, where it differs from the other speakers' (seed 002's refiner)."""

    prompt: str | None = None
    """Prompt file for this speaker's turns (default: the protocol's ``speaker_prompt``)."""
    output: str | None = None
    """Output schema for this speaker's turns (default: the persona's, else ``turn_output``)."""
    task: str | None = None
    """Instruction closing this speaker's prompt in every round (default: the protocol's)."""


class EarlyStop(_Strict):
    """When to end the debate before its last round."""

    rule: Literal["none", "moderator_confidence", "unanimous"] = "none"
    """``moderator_confidence``: the moderator's confidence exceeds ``threshold``;
    ``unanimous``: every speaker of the round gave the same answer."""
    threshold: float = Field(0.8, ge=0.0, le=1.0)
    """Strictly-greater-than threshold for ``moderator_confidence``."""


class Budget(_Strict):
    """Hard caps for one debate; hitting one ends the debate with a fallback."""

    max_calls: int | None = Field(None, ge=1)
    """Model calls (repairs included)."""
    max_tokens: int | None = Field(None, ge=1)
    """Prompt plus completion tokens; each request reserves its most before it starts
    (:mod:`moot.budget`), so the total never passes it."""
    max_usd: float | None = Field(None, gt=0)
    """US dollars (``--budget-usd``, ``budget_usd=``), reserved the same way; needs a price for
    every model (:mod:`moot.models.pricing`)."""


class HistorySpec(_Strict):
    """How much of the debate each prompt carries (:mod:`moot.history`).

    ``window`` keeps the latest turns and says in the prompt how many were left out;
    ``summarize`` replaces rounds before the latest with a summary, made once per round by
    the ``summarizer`` persona's model (recorded as a turn of phase ``summary``, counted in
    usage), then keeps the latest turns that fit. Without this option a prompt that would
    pass the model's context window is shortened by ``window``, with one warning.
    """

    max_tokens: int | None = Field(None, ge=1)
    """Tokens of history (the rendered turns) a prompt may carry; None: only the window bounds it."""
    strategy: Literal["window", "summarize"] = "window"
    """``window`` or ``summarize``."""
    summarizer: str | None = None
    """Key of the persona whose model writes the summaries (``summarize``; default: the judge's,
    else the moderator's, else the first speaker's)."""
    summary_max_tokens: int = Field(300, ge=16, le=MAX_TOKENS_PER_CALL)
    """Token cap of one summary."""


class Protocol(_Strict):
    """A complete debate configuration. See the module docstring for ``order`` semantics."""

    name: str = "custom"
    """Identifier shown in results."""
    enabled: bool = True
    """False skips the debate: no model is called and the result is the initial answer
    (seed 003's ``pipeline.debate.enabled``, seed 000's ``debate_mode`` feature flag)."""
    description: str = ""
    """One line for ``moot protocols``."""
    personas: dict[str, Persona]
    """Everyone who can take part, by key (speakers, moderator, judge)."""
    order: list[str | list[str]]
    """Speakers per round; a nested list is a concurrent group."""
    rounds: int = Field(2, ge=1, le=50)
    """Number of rounds (the maximum when an early-stop rule is set)."""
    rounds_limit: int | None = Field(None, ge=1)
    """The most rounds the design allows (seed 000: 3); asking for more is a usage error."""
    turn_mode: Literal["sequential", "simultaneous"] = "sequential"
    """How plain (non-nested) ``order`` entries run."""
    visibility: Visibility = "all"
    """Which earlier turns a speaker sees: all; the previous round (plus earlier turns of this
    round); its neighbours on a ring of ``order``; none."""
    turn_output: str = "message"
    """Default output schema for speaker turns."""
    speaker_prompt: str = "speaker.md"
    """Prompt file for speaker turns."""
    speakers_spec: dict[str, SpeakerSpec] = Field(default_factory=dict)
    """Per-speaker prompt, output schema and task, by persona key."""
    decision_speakers: list[str] | None = None
    """Speakers whose arguments the ``confidence_weighted`` and ``evidence_based`` rules count
    (None: every speaker with stance pro or con). Seed 002 counts the proponent and the opponent."""
    first_round_task: str | None = None
    """Instruction for round 1 (default: ``task``)."""
    task: str = "Make your contribution to the debate."
    """Instruction for later rounds."""
    moderator: JudgeSpec | None = None
    """A moderator that evaluates every round (seed 002)."""
    judge: JudgeSpec | None = None
    """A judge that runs once after the last round."""
    judging: Judging = Field(default_factory=Judging)
    """Blind, shuffled, audited or swap-robust deciding steps (all off by default)."""
    aggregation: Aggregation = "judge"
    """How ``final_answer`` is decided."""
    answer_field: str = "answer"
    """Content field holding a speaker's answer (majority vote, fallback)."""
    early_stop: EarlyStop = Field(default_factory=EarlyStop)
    """Early-stop rule."""
    max_tokens_per_turn: int = Field(500, ge=1, le=MAX_TOKENS_PER_CALL)
    """Generation cap per speaker turn; the main text is also trimmed to it (seed 000)."""
    budget: Budget = Field(default_factory=Budget)
    """Call, token and US-dollar caps."""
    history: HistorySpec | None = None
    """How much history each prompt carries (None: all it may see, shortened only to fit the window)."""
    timeout: float | None = Field(None, gt=0)
    """Overall timeout in seconds; on expiry the result falls back."""
    on_turn_failure: Literal["continue", "fallback"] = "continue"
    """A failed turn (backend error or invalid output after repair) either stays in the
    transcript and the debate goes on, or ends the debate with a fallback."""
    temperature: float | None = None
    """Sampling temperature for every call (None: backend default)."""
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    """Retry policy for transient backend errors."""
    evidence_spans_field: str | None = None
    """Judge output field holding evidence spans that must be exact substrings of the topic;
    spans that are not are dropped and counted in ``metrics['dropped_evidence_spans']``."""

    @model_validator(mode="after")
    def _check_refs(self) -> Protocol:
        if self.rounds_limit is not None and self.rounds > self.rounds_limit:
            raise ValueError(
                f"rounds {self.rounds} exceeds the limit of {self.rounds_limit} rounds for {self.name!r}"
            )
        for key, persona in self.personas.items():
            if not persona.key:
                persona.key = key
            if not persona.name:
                persona.name = key
        for key in self.speakers():
            if key not in self.personas:
                raise ValueError(f"order names unknown persona {key!r}; known: {', '.join(self.personas)}")
        for label, step in (("moderator", self.moderator), ("judge", self.judge)):
            if step is not None and step.persona not in self.personas:
                raise ValueError(f"{label}.persona names unknown persona {step.persona!r}")
        summarizer = self.history.summarizer if self.history is not None else None
        if summarizer is not None and summarizer not in self.personas:
            raise ValueError(f"history.summarizer names unknown persona {summarizer!r}")
        self._check_outputs()
        if self.aggregation == "judge" and self.judge is None:
            raise ValueError("aggregation 'judge' needs a judge")
        return self

    def _check_outputs(self) -> None:
        for label, keys in (
            ("speakers_spec", self.speakers_spec),
            ("decision_speakers", self.decision_speakers),
        ):
            unknown = [k for k in keys or () if k not in self.personas]
            if unknown:
                raise ValueError(f"{label} names unknown persona {unknown[0]!r}")
        names = [self.turn_output, *(p.output for p in self.personas.values())]
        names += [s.output for s in self.speakers_spec.values()]
        names += [step.output for step in (self.moderator, self.judge) if step is not None]
        for name in names:
            if name:
                get_output(name)  # raises ConfigError naming the schema

    def stages(self) -> list[list[str]]:
        """The groups of one round, in order; each group runs concurrently."""
        if self.turn_mode == "simultaneous" and all(isinstance(k, str) for k in self.order):
            return [[str(k) for k in self.order]]
        return [[k] if isinstance(k, str) else list(k) for k in self.order]

    def speakers(self) -> list[str]:
        """Speaker keys in order, groups flattened."""
        return [k for group in self.stages() for k in group]

    def output_for(self, key: str) -> str:
        """Output schema name for a speaker's turns."""
        spec = self.speakers_spec.get(key)
        return (spec.output if spec else None) or self.personas[key].output or self.turn_output

    def prompt_for(self, key: str) -> str:
        """Prompt file for a speaker's turns."""
        spec = self.speakers_spec.get(key)
        return (spec.prompt if spec else None) or self.speaker_prompt

    def task_for(self, key: str, number: int) -> str:
        """The instruction closing speaker ``key``'s prompt in round ``number``."""
        spec = self.speakers_spec.get(key)
        if spec is not None and spec.task:
            return spec.task
        return self.first_round_task if number == 1 and self.first_round_task else self.task


def _preset_dir() -> Any:
    return importlib.resources.files("moot").joinpath("presets")


def presets() -> dict[str, str]:
    """Preset name -> one-line description."""
    out: dict[str, str] = {}
    for entry in sorted(_preset_dir().iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            data = yaml.safe_load(entry.read_text(encoding="utf-8")) or {}
            out[entry.name[: -len(".yaml")]] = str(data.get("description", ""))
    return out


def preset_names() -> list[str]:
    """Names of the bundled presets."""
    return list(presets())


def _read_yaml(text: str, source: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"malformed YAML in {source}: {exc}".replace("\n", " ")) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{source} must contain a mapping at the top level")
    return data


class FileMapping(dict[str, Any]):
    """A mapping read from a file; ``source`` names the file in warnings about its keys."""

    source: str = "overrides"


def read_yaml_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping from ``path`` (a :class:`FileMapping` that remembers the path).

    Raises:
        ConfigError: missing file, not UTF-8, malformed YAML, or not a mapping.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    out = FileMapping(_read_yaml(read_text(path, "config file"), str(path)))
    out.source = str(path)
    return out


def read_overrides(path: str | Path) -> dict[str, Any]:
    """Protocol overrides from a YAML file, its prompt paths resolved against the file's folder.

    Raises:
        ConfigError: as :func:`read_yaml_file`, or a prompt path that leaves the folder.
    """
    path = Path(path)
    data = unwrap_seed_shape(read_yaml_file(path), str(path), infer=False)
    out = FileMapping(resolve_prompt_paths(data, path.parent, source=str(path)))
    out.source = str(path)
    return out


def _extends_spec(base: Any, base_dir: Path | None, source: str) -> str:
    # A preset name stays a name; a path in a file resolves against (and stays in) its folder.
    text = str(base)
    if base_dir is None or not (text.endswith((".yaml", ".yml")) or "/" in text):
        return text
    return str(resolve_config_path(text, base_dir, key="extends", source=source))


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if key == "personas" and isinstance(value, dict) and isinstance(out.get(key), dict):
            merged = dict(out[key])
            for pkey, pval in value.items():
                if isinstance(pval, dict) and isinstance(merged.get(pkey), dict):
                    merged[pkey] = {**merged[pkey], **pval}
                else:
                    merged[pkey] = pval
            out[key] = merged
        elif key == "judging" and isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}  # --judge-blind over a file's judging: {seed: 3}
        else:
            out[key] = value
    return out


def _config_error(exc: ValidationError, source: str) -> ConfigError:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    if err["type"] == "extra_forbidden":
        return ConfigError(f"unknown key {loc!r} in {source}", key=loc)
    if err["type"] == "missing":
        hint = (
            " (or start from a preset with `extends: NAME`, or give the seeds' shape a `mode:`)"
            if loc in ("personas", "order")
            else ""
        )
        return ConfigError(f"missing required key {loc!r} in {source}{hint}", key=loc)
    msg = err["msg"].removeprefix("Value error, ")
    return ConfigError(f"invalid {loc or 'protocol'} in {source}: {msg}", key=loc or None)


def load_protocol(
    spec: str | Path | dict[str, Any] | Protocol,
    overrides: dict[str, Any] | None = None,
    *,
    _seen: tuple[str, ...] = (),
) -> Protocol:
    """Load a protocol from a preset name, a YAML path, a dict, or pass one through.

    A dict or file may name a preset (or another file) to start from with
    ``extends: NAME``; ``overrides`` are merged on top (persona fields merge
    per persona). Both may be in the seeds' shapes (module docstring). Paths in
    a file (``extends:``, prompts) resolve against the file's folder and may not
    leave it (see :mod:`moot.paths`).

    Raises:
        ConfigError: unknown preset, unreadable or malformed file, unknown key
            or persona, an ``extends:`` cycle, a path leaving the config's
            folder, or an invalid value; the message names the culprit.
    """
    if isinstance(spec, Protocol):
        if not overrides:
            return spec
        return load_protocol(spec.model_dump(exclude_unset=False), overrides)
    source = "protocol"
    base_dir: Path | None = None
    if isinstance(spec, dict):
        data = unwrap_seed_shape(spec, source)
    else:
        text_spec = str(spec)
        path = Path(text_spec)
        is_file = text_spec.endswith((".yaml", ".yml")) or path.is_file()
        ident = str(path.resolve()) if is_file else text_spec
        if ident in _seen:
            chain = " -> ".join((*_seen, ident))
            raise ConfigError(f"extends: cycle: {chain}", key="extends")
        _seen = (*_seen, ident)
        if is_file:
            source = text_spec
            data = unwrap_seed_shape(read_yaml_file(path), source)
            base_dir = path.parent
        else:
            entry = _preset_dir().joinpath(f"{text_spec}.yaml")
            if not entry.is_file():
                raise ConfigError(
                    f"unknown protocol {text_spec!r}; available: {', '.join(preset_names())}", key=text_spec
                )
            source = f"preset {text_spec!r}"
            data = _read_yaml(entry.read_text(encoding="utf-8"), source)
            data.setdefault("name", text_spec)
            base_dir = Path(str(_preset_dir()))
    if base_dir is not None:
        data = resolve_prompt_paths(data, base_dir, source=source)
    base = data.pop("extends", None)
    if base is not None:
        parent = load_protocol(_extends_spec(base, base_dir, source), _seen=_seen)
        data = _merge(parent.model_dump(exclude_unset=False), data)
    if overrides:
        label = getattr(overrides, "source", "overrides")  # the file's path when read from one
        data = _merge(data, unwrap_seed_shape(overrides, label, infer=False))
    try:
        return Protocol.model_validate(data)
    except ValidationError as exc:
        raise _config_error(exc, source) from None


def _preset_personas(name: str) -> list[str]:
    return list(load_protocol(name).personas)


seed_shapes.preset_personas = _preset_personas  # seed shapes infer their preset from these
