"""How a deciding step sees its candidates: order, blind labels, and what counts as its decision.

A *deciding step* is a call that rules over the speakers' turns: a protocol's judge (``answer``'s
synthesizer, ``panel``'s judge, ``patch``'s consistency judge) and its moderator (``adversarial``).
Its *candidates* are the speakers whose turns it reads, in the order they are shown.

Order:
    By default the persona order (the seeds' behaviour). With ``judging.shuffle`` the order is drawn
    per deciding call from ``random.Random`` seeded with ``(judging.seed, topic, step, round)``, so a
    run is reproducible and every call of a bench gets its own order. The audit's second order is
    the shown order rotated by one (for two candidates: reversed).

Blind:
    Candidates are shown as ``Speaker A``, ``Speaker B``... in the order shown; their stance is not
    shown, and every candidate's persona key, name and role is replaced by its label inside the
    turns' text (a speaker saying "as the critic" would otherwise name itself). The decision's text
    is mapped back (``Speaker A`` -> the persona key), so a result still names personas.

The same decision (what the audit compares), per output schema:
    ``summary`` (``panel``): the winner, as a persona key (``none`` for no winner);
    ``moderation`` (``adversarial``): the leaning (support / oppose / uncertain);
    ``patch_judgement`` (``patch``): the accepted edits (op, target, value), as a set;
    anything else (``answer``'s synthesis): the answer field, normalised, or what the caller's
    ``decision_key`` reads from it (a bench scores the parsed answer: 42 and "42." are the same).
    ``moot.arbitration`` compares the agent each ruling chooses, and its value.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .consensus import normalise
from .transcript import JudgingRecord, Persona, Turn

__all__ = [
    "DecisionKey",
    "UNREAD",
    "Z95",
    "audit_line",
    "audit_order",
    "audit_summary",
    "blind_turns",
    "candidate_of",
    "candidates",
    "decision_of",
    "given_options",
    "label",
    "resolve_candidate",
    "shown_order",
    "unblind",
    "wilson_interval",
]

UNREAD = "(no answer read)"
"""The decision of a valid ruling whose answer the caller's ``decision_key`` cannot read: two such
rulings made the same (non-)decision."""

DecisionKey = Callable[[str], str | None]
"""Reads the decisive value from a final answer's text (a bench task's parser); None: unreadable."""

Z95 = 1.959963984540054
"""The 97.5% quantile of the standard normal distribution."""


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval for ``successes`` out of ``n`` (``(0, 1)`` when ``n`` is 0).

    Raises:
        ValueError: negative counts or ``successes > n``.
    """
    if n < 0 or successes < 0 or successes > n:
        raise ValueError(f"invalid counts: {successes}/{n}")
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    z2 = z * z
    denom = 1 + z2 / n
    center = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    low = 0.0 if successes == 0 else max(0.0, center - half)  # exact bounds at 0/n and n/n
    high = 1.0 if successes == n else min(1.0, center + half)
    return (low, high)


def label(index: int) -> str:
    """The blind label of the ``index``-th candidate shown: ``Speaker A`` ... ``Speaker Z``, then numbers."""
    return f"Speaker {chr(ord('A') + index)}" if index < 26 else f"Speaker {index + 1}"


def candidates(turns: Iterable[Turn]) -> list[str]:
    """The speakers of ``turns`` (speaking turns only), in the order they first appear."""
    out: list[str] = []
    for turn in turns:
        if turn.phase == "turn" and turn.speaker not in out:
            out.append(turn.speaker)
    return out


def shown_order(cands: Sequence[str], *, shuffle: bool, seed: int, topic: str, step: str) -> list[str]:
    """The order a deciding call shows ``cands`` in (module docstring)."""
    order = list(cands)
    if shuffle and len(order) > 1:
        random.Random(f"{seed}|{step}|{topic}").shuffle(order)
    return order


def audit_order(order: Sequence[str]) -> list[str]:
    """The audit's second order: ``order`` rotated by one (reversed, for two candidates)."""
    return [*order[1:], *order[:1]]


def _identity_pattern(personas: dict[str, Persona], keys: Iterable[str]) -> list[tuple[re.Pattern[str], str]]:
    out = []
    for key in keys:
        persona = personas.get(key)
        names = {key, persona.name if persona else "", persona.role if persona else ""}
        for name in sorted((n for n in names if n and len(n) > 1), key=len, reverse=True):
            out.append((re.compile(rf"(?<!\w){re.escape(name)}(?!\w)", re.IGNORECASE), key))
    return out


def _map_strings(value: Any, fn: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, list):
        return [_map_strings(v, fn) for v in value]
    if isinstance(value, dict):
        return {k: _map_strings(v, fn) for k, v in value.items()}
    return value


def blind_turns(
    turns: Sequence[Turn], order: Sequence[str], personas: dict[str, Persona]
) -> tuple[list[Turn], dict[str, str]]:
    """``turns`` as a blind deciding call sees them, and the labels used (label -> persona key)."""
    labels = {key: label(i) for i, key in enumerate(order)}
    patterns = _identity_pattern(personas, order)

    def scrub(text: str) -> str:
        for pattern, key in patterns:
            text = pattern.sub(labels[key], text)
        return text

    out = []
    for turn in turns:
        if turn.phase != "turn" or turn.speaker not in labels:
            out.append(turn)
            continue
        content = _map_strings(turn.content, scrub) if turn.content is not None else None
        out.append(
            turn.model_copy(update={"speaker": labels[turn.speaker], "stance": None, "content": content})
        )
    return out, {v: k for k, v in labels.items()}


def unblind(content: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    """``content`` with each blind label replaced by its persona key."""
    if not labels:
        return content
    pattern = re.compile(r"(?<!\w)Speaker ([A-Z]|\d+)(?!\w)")

    def back(text: str) -> str:
        return pattern.sub(lambda m: labels.get(m.group(0), m.group(0)), text)

    out: dict[str, Any] = _map_strings(content, back)
    return out


def resolve_candidate(value: Any, personas: dict[str, Persona], cands: Sequence[str]) -> str | None:
    """The candidate a name in a decision means (its key, name or role), or None."""
    text = normalise(value)
    if not text:
        return None
    for key in cands:
        persona = personas.get(key)
        names = {key, persona.name if persona else "", persona.role if persona else ""}
        if text in {normalise(n) for n in names if n}:
            return key
    return None


def _edit_key(edit: Any) -> str:
    if not isinstance(edit, dict):
        return json.dumps(edit, sort_keys=True)
    target = edit.get("target") or {}
    ref = target.get("aspect_ref") if isinstance(target, dict) else target
    return json.dumps([edit.get("op"), normalise(ref), normalise(edit.get("value"))])


def decision_of(
    turn: Turn,
    *,
    answer_field: str | None,
    personas: dict[str, Persona],
    cands: Sequence[str],
    key: DecisionKey | None = None,
) -> str | None:
    """The decisive value of a deciding turn (module docstring), normalised; None for a failed turn."""
    if not turn.ok:
        return None
    if turn.output == "summary":
        winner = turn.get("winner")
        return resolve_candidate(winner, personas, cands) or (normalise(winner) or "none")
    if turn.output == "moderation":
        return normalise(turn.get("leaning"))
    if turn.output == "patch_judgement":
        return json.dumps(sorted(_edit_key(e) for e in turn.get("final_patch") or []))
    value = turn.get(answer_field) if answer_field else turn.text
    text = value if isinstance(value, str) else turn.text
    if key is not None:
        read = key(text)
        return UNREAD if read is None else normalise(read)
    return normalise(text)


def candidate_of(
    decision: str | None,
    turn: Turn,
    *,
    personas: dict[str, Persona],
    cands: Sequence[str],
    seen: Sequence[Turn],
    answer_field: str,
    key: DecisionKey | None = None,
) -> str | None:
    """The candidate a decision sides with, when it names or repeats exactly one; else None.

    A winner names one; a leaning sides with the one candidate of that stance; an answer repeats
    the candidate whose last answer reads the same (``key``, else normalised text).
    """
    if decision is None:
        return None
    if turn.output == "summary":
        return decision if decision in cands else None
    if turn.output == "moderation":
        stance = {"support": "pro", "oppose": "con"}.get(decision)
        match = [k for k in cands if stance and personas.get(k) and personas[k].stance == stance]
        return match[0] if len(match) == 1 else None
    if turn.output == "patch_judgement":
        return None
    last: dict[str, str | None] = {}
    for t in seen:
        if t.phase == "turn" and t.ok and t.speaker in cands:
            value = t.get(answer_field)
            text = value if isinstance(value, str) and value else t.text
            read = key(text) if key is not None else text
            last[t.speaker] = normalise(read) if read is not None else None
    match = [k for k, v in last.items() if v is not None and v == decision and v != UNREAD]
    return match[0] if len(match) == 1 else None


def audit_summary(records: Iterable[JudgingRecord | None]) -> dict[str, Any]:
    """The audit's figures over deciding steps (the fields of ``summary.judge_audit``).

    ``n`` counts decisions asked in both orders; rates are None where nothing was measured.
    """
    pos = first = ident = extra = decisions = 0
    n = n_first = n_ident = 0
    for r in records:
        if r is None:
            continue
        decisions += 1
        extra += r.extra_calls
        if r.position_flip is not None:
            n += 1
            pos += r.position_flip
        if r.first_slot is not None:
            n_first += 1
            first += r.first_slot
        if r.identity_flip is not None:
            n_ident += 1
            ident += r.identity_flip
    low, high = wilson_interval(pos, n)
    ilow, ihigh = wilson_interval(ident, n_ident)
    return {
        "position_flip_rate": pos / n if n else None,
        "position_flip_ci95": [round(low, 4), round(high, 4)] if n else None,
        "first_slot_share": first / n_first if n_first else None,
        "first_slot_n": n_first,
        "identity_flip_rate": ident / n_ident if n_ident else None,
        "identity_flip_ci95": [round(ilow, 4), round(ihigh, 4)] if n_ident else None,
        "identity_n": n_ident,
        "n": n,
        "decisions": decisions,
        "extra_calls": extra,
    }


def audit_line(a: dict[str, Any]) -> str:
    """One line of :func:`audit_summary`'s figures, for terminals (``moot bench``, ``moot runs show``)."""
    if not a.get("decisions"):
        return "no deciding step (decided by rule)"

    def share(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.2f}"

    ci = a.get("position_flip_ci95")
    interval = f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ""
    return (
        f"position flip rate {share(a['position_flip_rate'])}{interval} (n {a['n']}), first-slot share "
        f"{share(a['first_slot_share'])}, identity flip rate {share(a['identity_flip_rate'])}, "
        f"extra calls {a['extra_calls']}"
    )


def given_options(
    blind: bool | None, shuffle: bool | None, audit: bool | None, swap_robust: bool | None
) -> dict[str, bool]:
    """The ``judge_*=`` arguments a caller gave, as ``{"blind": True, ...}``.

    None is not given (the protocol's own ``judging`` stands); an explicit False turns it off.
    """
    options = {"blind": blind, "shuffle": shuffle, "audit": audit, "swap_robust": swap_robust}
    return {k: v for k, v in options.items() if v is not None}
