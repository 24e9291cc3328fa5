"""What a model's calls cost in US dollars, and how many tokens its window holds.

Every answer :func:`moot.models.call_model` receives is priced here, once, into its
``usage`` (``cost_usd``, ``cost_source``, ``cost_note``):

- ``?price=IN/OUT`` in the spec (or ``price: IN/OUT`` in a persona's model mapping): US
  dollars per million input and output tokens, e.g. ``openai:llama3?price=0.15/0.60``.
  It wins over the table; the source says ``price=``.
- otherwise pydantic's ``genai-prices`` table (its bundled snapshot: no network), by
  provider and model (``openai:gpt-4o-mini`` is provider ``openai``, model ``gpt-4o-mini``);
  the source names the table and its version (``genai-prices 0.2.3``).
- the embedded model (``local``) and the test doubles cost 0, source ``local`` / ``test``.
- a reply from a response cache or a replayed record costs 0, source ``cache`` / ``replay``.
- anything else has no price: ``cost_usd`` is None (never a silent 0), ``cost_note`` says
  why, and the ``moot`` logger warns once per model.

A model's context window (:func:`table_window`) also comes from the table's ``context_window``
when the backend knows none of its own (``n_ctx``, a server's ``max_model_len``, ``?context_window=N``).

Token counts before a call (budgets reserve them, histories are cut to fit a window) are
:func:`estimate_tokens`: the backend's tokenizer when it has one (``Model.count_tokens``),
else characters / 3 rounded up, plus 4 a message: English runs ~4 characters a token, so the
estimate errs high, never low (``tiktoken`` fetches its vocabulary at run time and fails offline).
"""

from __future__ import annotations

import functools
import logging
import math
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from ..errors import UsageError

if TYPE_CHECKING:
    from .base import Message, Model, Usage

__all__ = [
    "COST_OPTIONS",
    "CHARS_PER_TOKEN",
    "Price",
    "Pricing",
    "apply_cost_options",
    "cost_text",
    "estimate_tokens",
    "parse_price",
    "price_usage",
    "pricing_of",
    "spec_pricing",
    "table_window",
]

logger = logging.getLogger(__name__)

COST_OPTIONS = ("price", "context_window")
"""The spec options every backend accepts for cost and window (``?price=0.15/0.60&context_window=8192``)."""

LOCAL_N_CTX = 4096
"""The embedded model's default context window (``moot.models.local.DEFAULT_N_CTX`` is this)."""

CHARS_PER_TOKEN = 3.0
"""Characters a token when no tokenizer is at hand: fewer than English's ~4, so estimates err high."""
MESSAGE_OVERHEAD_TOKENS = 4
"""Tokens a chat message costs beyond its text (role, separators), as chat templates add them."""

M = TypeVar("M", bound="Model")

_WARNED: set[str] = set()
_LOCK = threading.Lock()


@dataclass(frozen=True)
class Price:
    """US dollars per million input and output tokens."""

    input_usd_per_mtok: float
    """Per million prompt tokens."""
    output_usd_per_mtok: float
    """Per million completion tokens."""

    def cost_usd(self, prompt_tokens: int, completion_tokens: int) -> float:
        """The price of that many tokens."""
        return (prompt_tokens * self.input_usd_per_mtok + completion_tokens * self.output_usd_per_mtok) / 1e6

    def __str__(self) -> str:
        return f"{self.input_usd_per_mtok:g}/{self.output_usd_per_mtok:g}"


@dataclass(frozen=True)
class Pricing:
    """How one model is priced: rates (None: unpriced), where they come from, why not."""

    price: Price | None
    """Rates per million tokens (zero for a free model); None when unknown."""
    source: str
    """``genai-prices X.Y.Z``, ``price=``, ``local``, ``test``; empty when unpriced."""
    note: str | None = None
    """Why the model has no price (None when it has one)."""
    provider: str = ""
    """The table's provider id (``openai``), when looked up there."""
    model_ref: str = ""
    """The model name looked up in the table."""


def parse_price(text: str) -> Price:
    """``"0.15/0.60"`` -> ``Price(0.15, 0.60)`` (US dollars per million input/output tokens).

    Raises:
        UsageError: not two non-negative numbers separated by ``/``.
    """
    parts = str(text).replace(",", "/").split("/")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        values = []
    if len(values) != 2 or not all(v >= 0 and math.isfinite(v) for v in values):
        raise UsageError(
            f"price must be INPUT/OUTPUT US dollars per million tokens, e.g. price=0.15/0.60; got {text!r}"
        )
    return Price(values[0], values[1])


def apply_cost_options(model: M, options: Mapping[str, str]) -> M:
    """Set ``model.price`` and ``model.context_window`` from a spec's ``price`` / ``context_window``.

    Raises:
        UsageError: a malformed price or a window that is not a positive integer.
    """
    if "price" in options:
        model.price = parse_price(options["price"])
    if "context_window" in options:
        raw = options["context_window"].strip()
        if not (raw.isdigit() and int(raw) > 0):
            raise UsageError(f"context_window must be a positive number of tokens, got {raw!r}")
        model.context_window = int(raw)
    return model


@functools.cache
def _table_version() -> str:
    import genai_prices

    return f"genai-prices {genai_prices.__version__}"


@functools.cache
def _table_lookup(provider: str, model_ref: str) -> tuple[Price | None, int | None, str | None, bool]:
    """Rates, context window, the reason when unpriced, and whether the rates are flat.

    From genai-prices' bundled snapshot. Flat: the table's price of a few token counts is the
    rates times the counts, so a call is priced by multiplying (the table's own calculation
    takes ~0.3 ms a call); tiered or conditional prices are asked of the table every call.
    """
    try:
        per_in = _table_cost(provider, model_ref, 1_000_000, 0)
        per_out = _table_cost(provider, model_ref, 0, 1_000_000)
    except LookupError as exc:
        return None, None, f"{provider}:{model_ref} is not in {_table_version()} ({exc})", False
    price = Price(per_in, per_out)
    flat = all(
        math.isclose(
            _table_cost(provider, model_ref, i, o), price.cost_usd(i, o), rel_tol=1e-9, abs_tol=1e-12
        )
        for i, o in ((1_000, 1_000), (300_000, 50_000), (3_000_000, 10))
    )
    from genai_prices import Usage as TableUsage
    from genai_prices import calc_price

    window = calc_price(TableUsage(input_tokens=1), model_ref, provider_id=provider).model.context_window
    return price, window, None, flat


def _table_key(model: Model) -> tuple[str, str] | None:
    """``(provider, model)`` to look up in the table, from the model's spec (None: not a hosted API)."""
    provider, _, rest = model.name.partition(":")
    ref = rest.partition("?")[0].strip()
    if provider in ("openai", "anthropic") and ref:
        return provider, ref
    return None


def pricing_of(model: Model) -> Pricing:
    """How ``model``'s calls are priced (see the module docstring for the order)."""
    if model.price is not None:
        return Pricing(model.price, "price=")
    if model.free_cost_source is not None:
        return Pricing(Price(0.0, 0.0), model.free_cost_source)
    key = _table_key(model)
    if key is None:
        note = f"no price for {model.name}: give one with ?price=IN/OUT (USD per million tokens)"
        return Pricing(None, "", note)
    price, _, reason, flat = _table_lookup(*key)
    if price is None:
        note = f"no price for {model.name}: {reason}; give one with ?price=IN/OUT (USD per million tokens)"
        return Pricing(None, "", note, *key)
    # A flat price is multiplied out; a tiered one is asked of the table per call (``provider`` set).
    return Pricing(price, _table_version(), None, *(("", "") if flat else key))


def spec_pricing(spec: str) -> tuple[Pricing, int | None]:
    """How the model a spec names would be priced, and its window when the spec or the table says.

    Nothing is built, loaded or called (``--dry-run`` and ``moot protocols show`` price a debate
    before anything runs): the same order as :func:`pricing_of`, read from the spec's text.

    Raises:
        UsageError: a malformed ``price`` or ``context_window`` option.
    """
    import urllib.parse

    head, _, query = spec.strip().partition("?")
    provider, _, name = head.partition(":")
    options = dict(urllib.parse.parse_qsl(query))
    window = None
    if "context_window" in options:
        raw = options["context_window"].strip()
        if not (raw.isdigit() and int(raw) > 0):
            raise UsageError(f"context_window must be a positive number of tokens, got {raw!r}")
        window = int(raw)
    if provider == "local":
        n_ctx = options.get("n_ctx", "")
        held = int(n_ctx) if n_ctx.isdigit() else LOCAL_N_CTX
        window = min(window or held, held)
    key = (provider, name.strip()) if provider in ("openai", "anthropic") and name.strip() else None
    if key is not None and window is None:
        window = _table_lookup(*key)[1]
    if "price" in options:
        return Pricing(parse_price(options["price"]), "price="), window
    if provider in ("local", "test"):
        return Pricing(Price(0.0, 0.0), provider), window
    if key is None:
        return Pricing(
            None, "", f"no price for {spec}: give one with ?price=IN/OUT (USD per million tokens)"
        ), window
    price, _, reason, _ = _table_lookup(*key)
    if price is None:
        note = f"no price for {spec}: {reason}; give one with ?price=IN/OUT (USD per million tokens)"
        return Pricing(None, "", note, *key), window
    return Pricing(price, _table_version(), None), window


def table_window(model: Model) -> int | None:
    """The context window the price table gives for ``model`` (None: not listed or no field)."""
    key = _table_key(model)
    return _table_lookup(*key)[1] if key is not None else None


def price_usage(model: Model, usage: Usage) -> Usage:
    """``usage`` with its cost filled in from ``model``'s pricing (unless a wrapper already did).

    A usage that already names its source (a cache hit, a replay) is returned as it is. An
    unpriced model gives ``cost_usd=None`` with the reason, and one warning per model.
    """
    if usage.cost_source or usage.cost_note:
        return usage
    pricing = model.pricing()
    if pricing.price is None:
        _warn_once(model.name, pricing.note or f"no price for {model.name}")
        return usage.model_copy(update={"cost_usd": None, "cost_note": pricing.note})
    if pricing.provider and usage.calls:
        # The table's own calculation, per call: tiers and conditional prices stay right.
        cost = _table_cost(pricing.provider, pricing.model_ref, usage.prompt_tokens, usage.completion_tokens)
    else:
        cost = pricing.price.cost_usd(usage.prompt_tokens, usage.completion_tokens)
    return usage.model_copy(update={"cost_usd": cost, "cost_source": pricing.source})


def _table_cost(provider: str, model_ref: str, prompt_tokens: int, completion_tokens: int) -> float:
    from genai_prices import Usage as TableUsage
    from genai_prices import calc_price

    table = TableUsage(input_tokens=prompt_tokens, output_tokens=completion_tokens)
    return float(calc_price(table, model_ref, provider_id=provider).total_price)


def _warn_once(name: str, note: str) -> None:
    with _LOCK:
        if name in _WARNED:
            return
        _WARNED.add(name)
    logger.warning("%s; its calls' cost is unknown (null)", note)


def cost_text(usage: Usage) -> str:
    """``$0.00123 (genai-prices 0.2.3)``, ``$0 (local)``, or ``unknown: <why>``: a cost as people read it."""
    if usage.cost_usd is None:
        return f"unknown: {usage.cost_note or 'a model has no price'}"
    amount = "$0" if usage.cost_usd == 0 else f"${usage.cost_usd:.5f}"
    return f"{amount} ({usage.cost_source})" if usage.cost_source else amount


def estimate_tokens(model: Model | None, messages: Iterable[Message]) -> int:
    """Tokens ``messages`` will take as a prompt: the model's tokenizer if it has one, else chars / 3.

    Conservative (see the module docstring): a budget reserves, and a history is cut, by this.
    """
    total = 0
    for message in messages:
        counted = model.count_tokens(message.content) if model is not None else None
        if counted is None:
            counted = math.ceil(len(message.content) / CHARS_PER_TOKEN)
        total += counted + MESSAGE_OVERHEAD_TOKENS
    return total
