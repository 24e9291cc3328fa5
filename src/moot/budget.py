"""A debate's budget as a bound: each request reserves its most before it starts.

A round's turns run together, so checking what was spent before a call lets every turn of
the round start under the limit and all of them pass it together (a ``max_tokens: 1000``
budget ended at 1,429). Here a request may start only if what the finished turns spent,
plus what the turns in flight spent and reserved, plus this request's most (its prompt's
estimated tokens, :func:`moot.models.pricing.estimate_tokens`, plus ``max_tokens``) fits.
The reservation is released when the turn's usage is counted, so the unused part goes back.

The same ledger bounds tokens (``budget: {max_tokens: N}``) and US dollars
(``budget: {max_usd: X}``, ``--budget-usd X``, ``budget_usd=``): a US-dollar budget needs a
price for every model of the debate (:func:`check_priced`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .errors import BudgetExceeded, UsageError
from .models import Model
from .models.base import CallStats, Message, Usage
from .models.pricing import estimate_tokens
from .protocol import Budget

__all__ = ["REPAIR_OVERHEAD_TOKENS", "Ledger", "check_priced"]

REPAIR_OVERHEAD_TOKENS = 200
"""Tokens a repair request adds to its turn's prompt beyond the invalid reply (the instruction)."""


@dataclass
class _Held:
    stats: CallStats
    tokens: int = 0
    usd: float = 0.0


def check_priced(budget: Budget, models: Sequence[Model]) -> None:
    """A US-dollar budget can only be kept with a price for each model.

    Raises:
        UsageError: ``max_usd`` is set and a model has no price (named, with how to give one).
    """
    if budget.max_usd is None:
        return
    for model in models:
        pricing = model.pricing()
        if pricing.price is None:
            raise UsageError(f"a budget in US dollars needs every model's price: {pricing.note}")


class Ledger:
    """What one debate spent, has in flight and has reserved, against its budget.

    Args:
        budget: the protocol's caps (``max_tokens``, ``max_usd``; ``max_calls`` is counted by the run).
        spent: the usage of the turns already counted (the result's).
    """

    def __init__(self, budget: Budget, spent: Callable[[], Usage]) -> None:
        self.budget = budget
        self._spent = spent
        self._held: dict[int, _Held] = {}

    @property
    def active(self) -> bool:
        """Whether there is a token or US-dollar cap to keep."""
        return self.budget.max_tokens is not None or self.budget.max_usd is not None

    def reserve(
        self, stats: CallStats, model: Model, messages: Sequence[Message], max_tokens: int, attempt: int
    ) -> None:
        """Reserve the most the next request of a turn can take, or refuse it.

        ``stats`` is the turn's (its requests so far are counted from it); ``attempt`` 1 is the
        repair, whose prompt also carries the invalid reply and the instruction.

        Raises:
            BudgetExceeded: the request could pass a cap.
        """
        if not self.active:
            return
        prompt = estimate_tokens(model, messages) + attempt * (max_tokens + REPAIR_OVERHEAD_TOKENS)
        tokens = prompt + max_tokens
        held = self._held.setdefault(id(stats), _Held(stats))
        held.tokens, held.usd = 0, 0.0  # this turn's previous reservation is replaced
        used_tokens, used_usd = self._committed()
        cap = self.budget.max_tokens
        if cap is not None and used_tokens + tokens > cap:
            raise BudgetExceeded("tokens", cap, used_tokens, would=tokens)
        usd = 0.0
        if self.budget.max_usd is not None:
            price = model.pricing().price
            usd = price.cost_usd(prompt, max_tokens) if price is not None else 0.0
            if used_usd + usd > self.budget.max_usd:
                raise BudgetExceeded("usd", self.budget.max_usd, used_usd, would=usd)
        held.tokens, held.usd = tokens, usd

    def release(self, stats: CallStats) -> None:
        """The turn of ``stats`` is counted in the spent usage now: drop its reservation."""
        self._held.pop(id(stats), None)

    def _committed(self) -> tuple[int, float]:
        """Tokens and US dollars spent, in flight and reserved."""
        spent = self._spent()
        tokens = spent.total_tokens
        usd = spent.cost_usd or 0.0
        for held in self._held.values():
            usage = held.stats.usage
            tokens += usage.total_tokens + held.tokens
            usd += (usage.cost_usd or 0.0) + held.usd
        return tokens, usd
