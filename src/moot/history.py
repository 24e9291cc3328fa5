"""How much of a debate each prompt carries: a history that fits the model's window.

With full visibility every turn's prompt carries every earlier turn, so a debate's prompt
tokens grow with agents x rounds², and a long one outgrows the model's context window.
Before a prompt is rendered its list of visible turns is shortened here (the prompt's own
layout, :mod:`moot.prompting`, is not touched):

- ``history: {strategy: window, max_tokens: N}`` keeps the latest turns that fit and says
  in the prompt how many were left out (``prompts/history_left_out.md``);
- ``history: {strategy: summarize, ...}`` replaces the rounds before the latest with one
  summary (a turn of phase ``summary``, made once per round by the summarizer persona's
  model, recorded and counted like any turn), then keeps the latest turns that fit;
- without the option, a prompt that would pass the model's window is shortened by ``window``,
  with one warning; never sent to fail.

A prompt fits when its estimated tokens (:func:`moot.models.pricing.estimate_tokens`:
the model's tokenizer, else characters / 3, which errs high) plus the reply's ``max_tokens``
fit the window. The window (:meth:`moot.models.Model.window`) is asked only once a prompt
could need it: below :data:`SMALLEST_WINDOW` tokens any window in use holds it, so a short
debate sends no ``/v1/models`` request. A window given with ``?context_window=N`` is used
from the start, and a server's context-length 400 (:class:`~moot.errors.ContextLengthExceeded`)
teaches the window it names: the turn is sent once more, its history tighter.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from .models import Model
from .models.base import Message
from .models.pricing import CHARS_PER_TOKEN, estimate_tokens
from .prompting import load_prompt, render_turns
from .protocol import HistorySpec
from .transcript import Turn

__all__ = ["SMALLEST_WINDOW", "Fitted", "fit_turns", "left_out_note", "summary_task"]

SMALLEST_WINDOW = 2048
"""Tokens: no window in use is smaller, unless a spec or a server's 400 says so (see module docstring)."""

Build = Callable[[list[Turn], str], list[Message]]
"""Builds one call's messages from the turns it carries and a note to add to its task."""


class Fitted:
    """One call's messages after its history was fitted, and what was left out."""

    def __init__(self, messages: list[Message], left_out: int, tokens: int) -> None:
        self.messages = messages
        """The messages to send."""
        self.left_out = left_out
        """Turns of the visible history that are not in the prompt (0: all of them are)."""
        self.tokens = tokens
        """The prompt's estimated tokens."""


def left_out_note(left_out: int) -> str:
    """The sentence that tells the model how many turns were left out (empty for none)."""
    return "\n" + load_prompt("history_left_out.md").format(left_out=left_out) if left_out else ""


def summary_task(round_number: int) -> str:
    """The summarizer's instruction for the summary of rounds 1 to ``round_number``."""
    return load_prompt("history_summary_task.md").format(round=round_number)


def history_tokens(turns: Sequence[Turn]) -> int:
    """Estimated tokens of the rendered turns (characters / 3, rounded up)."""
    return math.ceil(len(render_turns(turns)) / CHARS_PER_TOKEN)


def fit_turns(
    model: Model | None,
    turns: list[Turn],
    build: Build,
    *,
    prompt_limit: int | None,
    spec: HistorySpec | None,
) -> Fitted:
    """Keep the latest of ``turns`` such that the history and the prompt fit their limits.

    Args:
        model: the model the prompt goes to (its tokenizer counts, when it has one).
        turns: the turns the caller may see, oldest first (a summary first, when summarized).
        build: makes the messages from the kept turns and the left-out note.
        prompt_limit: tokens the prompt may take (the window less the reply's ``max_tokens``);
            None: no window is known.
        spec: the protocol's ``history`` option (its ``max_tokens`` caps the rendered turns).

    Returns:
        The messages, the number of turns left out and the prompt's estimated tokens. When
        even no turn fits, no turn is kept (the caller decides what to do with a prompt that
        is still too long).
    """
    cap = spec.max_tokens if spec is not None else None

    def fits(kept: list[Turn]) -> tuple[bool, list[Message], int]:
        messages = build(kept, left_out_note(len(turns) - len(kept)))
        if cap is not None and history_tokens(kept) > cap:
            return False, messages, 0
        if prompt_limit is None:
            return True, messages, 0
        tokens = estimate_tokens(model, messages)
        return tokens <= prompt_limit, messages, tokens

    ok, messages, tokens = fits(turns)
    if ok or not turns:
        return Fitted(messages, 0, tokens)
    # Fewer kept turns never make a longer prompt: the fewest left out is found by bisection.
    low, high = 1, len(turns)  # turns left out; leaving out all of them is the last resort
    while low < high:
        middle = (low + high) // 2
        if fits(turns[middle:])[0]:
            high = middle
        else:
            low = middle + 1
    _, messages, tokens = fits(turns[high:])
    return Fitted(messages, high, tokens)
