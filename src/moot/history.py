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

A chat history (``moot bench``'s ``society:N:T``: each agent holds the question, then its
answer and its peers' answers round after round) is fitted the same way, by exchanges
(:func:`fit_exchanges`); both keep the latest entries with :func:`fewest_left_out`.

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

__all__ = [
    "SMALLEST_WINDOW",
    "Exchange",
    "Fitted",
    "fewest_left_out",
    "fit_exchanges",
    "fit_turns",
    "left_out_note",
    "message_tokens",
    "summary_task",
]

SMALLEST_WINDOW = 2048
"""Tokens: no window in use is smaller, unless a spec or a server's 400 says so (see module docstring)."""

Build = Callable[[list[Turn], str], list[Message]]
"""Builds one call's messages from the turns it carries and a note to add to its task."""

Exchange = tuple[Message, Message]
"""One round of a chat history: the agent's answer (assistant), then the message that answered it (user)."""


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


def message_tokens(messages: Sequence[Message]) -> int:
    """Estimated tokens of the messages' text (characters / 3, rounded up), as :func:`history_tokens`."""
    return math.ceil(sum(len(m.content) for m in messages) / CHARS_PER_TOKEN)


def fewest_left_out(count: int, fits: Callable[[int], bool]) -> int:
    """The fewest of ``count`` oldest entries to leave out so that ``fits(left_out)`` holds.

    The caller has found that keeping every entry does not fit. Fewer kept entries never make
    a longer prompt, so the answer is found by bisection over 1 to ``count``; ``count`` (all
    left out, the last resort) is returned without asking ``fits``.
    """
    low, high = 1, count
    while low < high:
        middle = (low + high) // 2
        if fits(middle):
            high = middle
        else:
            low = middle + 1
    return high


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
    left_out = fewest_left_out(len(turns), lambda k: fits(turns[k:])[0])
    _, messages, tokens = fits(turns[left_out:])
    return Fitted(messages, left_out, tokens)


def fit_exchanges(
    model: Model | None,
    question: Sequence[Message],
    exchanges: Sequence[Exchange],
    *,
    prompt_limit: int | None,
    max_tokens: int | None,
) -> Fitted:
    """Keep the question and the latest ``exchanges`` of a chat history that fit their limits.

    The oldest exchanges are left out first. The latest is always kept whole: its user message
    is the round's task (a society's debate prompt), and keeping its answer before it keeps the
    roles alternating. When some were left out, that message ends with :func:`left_out_note`
    (its count is of exchanges: rounds).

    Args:
        model: the model the prompt goes to (its tokenizer counts the prompt, when it has one).
        question: the messages always kept (the question), first.
        exchanges: (answer, reply) pairs, oldest first.
        prompt_limit: tokens the whole prompt may take (the window less the reply's
            ``max_tokens``); None: no window is known.
        max_tokens: tokens of history the prompt may carry: the kept exchanges' text, the
            note included (:func:`message_tokens`); None: only the window bounds it.

    Returns:
        The messages, the number of exchanges left out and the prompt's estimated tokens (0
        when no window was checked). When even the latest exchange alone passes a limit, it is
        kept, and the caller decides what to do with the prompt.
    """
    head = list(question)

    def build(left_out: int) -> list[Message]:
        kept = [m for pair in exchanges[left_out:] for m in pair]
        if left_out and kept:
            last = kept[-1]
            kept[-1] = Message(role=last.role, content=last.content + left_out_note(left_out))
        return head + kept

    def fits(left_out: int) -> tuple[bool, list[Message], int]:
        messages = build(left_out)
        if max_tokens is not None and message_tokens(messages[len(head) :]) > max_tokens:
            return False, messages, 0
        if prompt_limit is None:
            return True, messages, 0
        tokens = estimate_tokens(model, messages)
        return tokens <= prompt_limit, messages, tokens

    ok, messages, tokens = fits(0)
    if ok or len(exchanges) < 2:
        return Fitted(messages, 0, tokens)
    left_out = fewest_left_out(len(exchanges) - 1, lambda k: fits(k)[0])  # the latest is kept
    _, messages, tokens = fits(left_out)
    return Fitted(messages, left_out, tokens)
