"""Prompt assembly from the files in ``moot/prompts``.

Messages are laid out so that what every call of a debate shares comes first:
the system message holds the instructions, ``[TOPIC]`` and
``[SHARED_CONTEXT_JSON]``, identical for all speaker calls of one debate, so
servers with prefix caching (vLLM, llama.cpp, and the in-process local model)
reuse that prefix. The user message holds the turns the caller may see
(``[HISTORY]`` or ``[ALL_TURNS]``, identical for every speaker who sees the same
turns), then what differs per call: ``[PERSONA]`` and the task.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from .errors import ConfigError
from .models.base import Message
from .paths import read_text
from .structured import schema_hint
from .transcript import Persona, Turn

__all__ = ["blind_prompt", "build_messages", "load_prompt", "render_context", "render_turns"]


@functools.lru_cache(maxsize=64)
def load_prompt(name: str) -> str:
    """The text of prompt file ``name`` from ``moot/prompts``, or of a path to a file.

    Raises:
        ConfigError: no such prompt.
    """
    # A shipped name wins over a same-named file in the working directory, so the folder moot
    # runs in cannot change its prompts; config files name their own prompts by full path.
    entry = importlib.resources.files("moot").joinpath("prompts", name)
    if Path(name).name == name and entry.is_file():
        return entry.read_text(encoding="utf-8").strip()
    path = Path(name)
    if not path.is_file():
        raise ConfigError(f"prompt file {name!r} not found in moot/prompts or on disk", key=name)
    return read_text(path, "prompt file").strip()


def blind_prompt(name: str) -> str:
    """The blind variant of prompt ``name`` if one exists beside it, else ``name``.

    ``synthesizer.md`` -> ``synthesizer_blind.md``: a blind deciding call must not read who argued
    what in its instructions either (docs/judging.md).
    """
    path = Path(name)
    variant = f"{path.stem}_blind{path.suffix}"
    if path.name == name:
        if importlib.resources.files("moot").joinpath("prompts", variant).is_file():
            return variant
        return name
    sibling = path.with_name(variant)
    return str(sibling) if sibling.is_file() else name


def render_context(context: Any) -> str:
    """Context as JSON text (strings are wrapped so the section is always JSON)."""
    if context is None:
        return "{}"
    if isinstance(context, BaseModel):
        return context.model_dump_json()
    if isinstance(context, str):
        return json.dumps({"documents": context}, ensure_ascii=False)
    return json.dumps(context, ensure_ascii=False, default=str)


def _edit_line(agent: str, edit: dict[str, Any]) -> str:
    target = edit.get("target") or {}
    ref = target.get("aspect_ref") if isinstance(target, dict) else target
    parts = [f"- {agent}: {edit.get('op')} target={ref}"]
    if edit.get("value") is not None:
        parts.append(f"value={edit['value']}")
    if edit.get("evidence"):
        parts.append(f"evidence={edit['evidence']!r}")
    return " ".join(parts)


def render_turn(turn: Turn) -> str:
    """One turn as compact text for ``[HISTORY]``/``[ALL_TURNS]``.

    The same for every reader (no "(you)" mark), so speakers who see the same turns share it.
    """
    stance = f", {turn.stance}" if turn.stance else ""
    tag = f"{turn.speaker} [{turn.phase}, round {turn.round}{stance}]"
    if not turn.ok:
        return f"- {tag}: (no valid reply)"
    content = turn.content or {}
    if "proposed_edits" in content:
        edits = content["proposed_edits"] or []
        if not edits:
            return f"- {turn.speaker}: (no edits)"
        return "\n".join(_edit_line(turn.speaker, e) for e in edits)
    text = turn.text
    if not text:
        return f"- {tag}: {json.dumps(content, ensure_ascii=False)}"
    extras = []
    for key in ("key_points", "supporting_evidence", "citations"):
        if content.get(key):
            extras.append(f"{key}: " + "; ".join(str(x) for x in content[key]))
    if content.get("confidence") is not None:
        extras.append(f"confidence: {content['confidence']}")
    return f"- {tag}: {text}" + "".join(f"\n  {e}" for e in extras)


def render_turns(turns: Iterable[Turn]) -> str:
    """Several turns, or ``(none yet)``."""
    lines = [render_turn(t) for t in turns]
    return "\n".join(lines) if lines else "(none yet)"


def build_messages(
    *,
    prompt: str,
    topic: str,
    context: str,
    persona: Persona,
    section: str,
    turns: Iterable[Turn],
    task: str,
    output_type: type[BaseModel],
    max_tokens: int | None,
) -> list[Message]:
    """Assemble one call's messages.

    Args:
        prompt: prompt file name.
        topic: the debate topic.
        context: rendered ``[SHARED_CONTEXT_JSON]``.
        persona: who speaks.
        section: ``HISTORY`` for speakers, ``ALL_TURNS`` for judges.
        turns: the turns this caller may see.
        task: the closing instruction.
        output_type: the schema the reply must match.
        max_tokens: the token cap to state in the prompt.
    """
    system = f"{load_prompt(prompt)}\n\n[TOPIC]\n{topic}\n\n[SHARED_CONTEXT_JSON]\n{context}"
    # The cap is enforced by max_tokens and trimming; stating it in the prompt made small models
    # parrot "stay under N tokens" into their answers, so the prompt only asks for brevity.
    limit = " Be concise." if max_tokens else ""
    # The transcript comes before the persona, rendered without a per-viewer "(you)" mark (the
    # persona block names the speaker): speakers who see the same turns then share the prompt up
    # to [PERSONA], so prefix caches skip re-reading it (measured in bench/throughput_local.py).
    user = (
        f"[{section}]\n{render_turns(turns)}\n\n"
        f"[PERSONA]\n{json.dumps(persona.prompt_view(), ensure_ascii=False)}\n\n"
        f"[TASK]\n{task}{limit}\n"
        f"Reply with one JSON object of the form {schema_hint(output_type)}"
    )
    return [Message(role="system", content=system), Message(role="user", content=user)]
