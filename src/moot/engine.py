"""The debate engine: one async core that runs any protocol.

>>> from moot import Debate
>>> result = Debate("answer").run_sync("Why is the sky blue?")  # doctest: +SKIP

The engine imports no provider SDK; models are resolved from specs lazily.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeAlias

import moot.aio as aio

from .deadline import Deadline, run_timeout_s
from .debate_run import DebateRun, EventCallback
from .errors import ConfigError, UsageError
from .judging import DecisionKey, given_options
from .models import Model, ModelLike, default_model_spec, model_info, resolve_model
from .models.base import endpoint_stats
from .models.cache import ResponseCache, open_cache, with_cache
from .observe import RunStart
from .prompting import load_prompt
from .protocol import Protocol, load_protocol
from .transcript import DebateResult, Event

__all__ = ["Debate", "DebateRun", "EventCallback", "RoleModel", "debate_config", "with_budget_usd"]


def with_budget_usd(overrides: Mapping[str, Any] | None, budget_usd: float | None) -> dict[str, Any]:
    """``overrides`` with ``budget.max_usd`` set (the ``budget_usd=`` of every door); None: unchanged."""
    out = dict(overrides or {})
    if budget_usd is not None:
        budget = out.get("budget")
        out["budget"] = {**(budget if isinstance(budget, Mapping) else {}), "max_usd": budget_usd}
    return out


RoleModel: TypeAlias = "ModelLike | Sequence[ModelLike]"
"""A persona's model, or for a deciding role several, tried in turn (judge failover)."""


_SPEC_START = re.compile(r"^\s*(?!https?:)[A-Za-z][\w.-]*(:|\s*$)")  # provider:... or a bare provider


def _choices(spec: Any) -> list[Any]:
    """A role's models in order: a list as given, ``"A,B"`` split where a new spec begins.

    A comma inside one spec's options (``endpoints=URL,URL``) does not start a spec, so it stays.
    """
    if isinstance(spec, str) and "," in spec:
        parts: list[str] = []
        for part in spec.split(","):
            if parts and not _SPEC_START.match(part):
                parts[-1] += "," + part
            else:
                parts.append(part)
        return [p.strip() for p in parts if p.strip()]
    if isinstance(spec, list | tuple):
        return list(spec)
    return [spec]


def _spec(spec: Any) -> str | None:
    if isinstance(spec, list | tuple):
        return ",".join(str(_spec(s)) for s in spec)
    if spec is None or isinstance(spec, str):
        return spec
    if isinstance(spec, Model):
        return spec.name
    ident = getattr(spec, "model_name", None) or getattr(spec, "model", None)  # a LangChain chat model
    return f"langchain:{ident if isinstance(ident, str) else type(spec).__name__}"


def debate_config(
    debate: Debate,
    topic: str,
    *,
    model: str | None,
    role_models: Mapping[str, str],
    context: Any = None,
    initial_answer: str | None = None,
    debate_mode: bool = True,
) -> dict[str, Any]:
    """Everything needed to re-run a debate: the resolved protocol, the model specs and endpoints, inputs.

    ``moot run --from RUN_ID`` rebuilds the debate from exactly this.
    """
    models = {}
    if debate_mode:  # a skipped debate resolves no model, so neither does its record
        models = {key: model_info(debate.model_for(key)) for key in debate.protocol.personas}
    return {
        "topic": topic,
        "context": context,
        "initial_answer": initial_answer,
        "debate_mode": debate_mode,
        "model": model,
        "role_models": dict(role_models),
        "models": models,
        "protocol": debate.protocol.model_dump(mode="json"),
    }


class Debate:
    """A configured debate, runnable many times (and concurrently).

    Args:
        protocol: a Protocol, a preset name, a YAML path or a dict.
        model: the default model: a ``provider:model`` spec, a Model, or None for ``local``.
        role_models: per-persona models (multi-model routing), e.g. ``{"judge": "openai:gpt-4o"}``;
            a persona's own ``model`` field is used when it has no entry here. A role may name
            several, a list or ``"A,B"``: when the first fails after its retries the next one
            plays (judge failover for a deciding role: docs/judging.md).
        judge_blind: show the deciding steps the candidates as ``Speaker A``, ``Speaker B``...
            (``judging.blind``; None keeps the protocol's).
        judge_shuffle: show them in a seeded random order per deciding call (``judging.shuffle``).
        judge_audit: ask each deciding call again reversed (and blind), reporting the flip rates
            in ``result.metrics["judge_audit"]`` (``judging.audit``).
        judge_swap_robust: a decision that changes with the order becomes undecided
            (``judging.swap_robust``).
        overrides: protocol fields to override (``rounds``, ``timeout``...). A ``timeout`` given
            here is explicit and used as is; otherwise the deadline is sized to the models
            (:mod:`moot.deadline`).
        store: record every run (:meth:`run`, :meth:`stream`, :meth:`run_sync`,
            ``start().execute()``, a skipped run as ``skipped``) in a run store, as ``moot run``
            does, so ``moot runs`` and ``moot view`` show it: a store file, an open
            :class:`~moot.runs.RunStore`, or True for ``$MOOT_STORE`` / ``./.moot/runs.db``.
            None (the default) records nothing. The engine never opens it: it is passed to the
            run's observers (:mod:`moot.observe`; the recorder is attached by :mod:`moot.app`).
            A debate run inside another recorded run (ABSA, arbitration, a bench) is recorded
            as part of that run, not on its own.
        cache: answer each model request from a response cache when it holds the reply
            (:mod:`moot.models.cache`): a cache file, a
            :class:`~moot.models.cache.ResponseCache`, or True for ``$MOOT_CACHE`` /
            ``./.moot/cache.db``. None (the default) sends every request.
        budget_usd: stop before a call could make the debate cost more than this many US dollars
            (each request reserves its most before it starts; :mod:`moot.budget`); the result
            falls back with ``budget: ...`` and the best answer so far. Same as the protocol's
            ``budget: {max_usd: X}``. Needs a price for every model (:mod:`moot.models.pricing`).

    Raises:
        ConfigError: invalid protocol, a prompt file that does not exist, or ``role_models``
            names an unknown persona.
    """

    def __init__(
        self,
        protocol: Protocol | str | Path | dict[str, Any] = "answer",
        *,
        model: ModelLike | None = None,
        role_models: Mapping[str, RoleModel] | None = None,
        overrides: dict[str, Any] | None = None,
        store: Any = None,
        cache: str | Path | ResponseCache | bool | None = None,
        budget_usd: float | None = None,
        judge_blind: bool | None = None,
        judge_shuffle: bool | None = None,
        judge_audit: bool | None = None,
        judge_swap_robust: bool | None = None,
    ) -> None:
        if budget_usd is not None:
            overrides = with_budget_usd(overrides, budget_usd)
        self.protocol = load_protocol(protocol, overrides)
        given = given_options(judge_blind, judge_shuffle, judge_audit, judge_swap_robust)
        if given:
            judging = self.protocol.judging.model_copy(update=given)
            self.protocol = self.protocol.model_copy(update={"judging": judging})
        self.cache = open_cache(cache)
        self.store: Any = store
        """The ``store=`` this debate records into, as given (None: not recorded)."""
        self._explicit_timeout = bool(overrides) and "timeout" in (overrides or {})
        # A missing prompt file is a configuration error: fail now, not in the middle of a run.
        for step in (self.protocol.moderator, self.protocol.judge):
            if step is not None:
                load_prompt(step.prompt)
        load_prompt(self.protocol.speaker_prompt)
        self._default_spec = model
        self._models: dict[str, Model] = {}
        self._failover: dict[str, list[Model]] = {}
        self._role_specs: dict[str, Any] = {}
        for key, spec in (role_models or {}).items():
            if key not in self.protocol.personas:
                known = ", ".join(self.protocol.personas)
                raise ConfigError(f"role model given for unknown persona {key!r}; known: {known}", key=key)
            self._role_specs[key] = spec
        for key, persona in self.protocol.personas.items():
            if key not in self._role_specs and persona.model:
                self._role_specs[key] = persona.model

    @property
    def model_spec(self) -> str | None:
        """The default model's spec name (``model=``), None when it was not given."""
        return _spec(self._default_spec)

    @property
    def observe_options(self) -> dict[str, Any]:
        """The options this debate's runs pass to their observers (:func:`moot.observe.open_run`)."""
        return {"store": self.store}

    def run_start(
        self,
        topic: str,
        *,
        context: Any = None,
        initial_answer: str | None = None,
        debate_mode: bool = True,
    ) -> RunStart:
        """What a run of this debate on ``topic`` is, for its observers (kind ``run``).

        Its config is :func:`debate_config`'s, so ``moot run --from ID`` re-runs a stored run.
        """
        model = _spec(self._default_spec)
        roles = {k: str(_spec(v)) for k, v in self._role_specs.items()}
        config = debate_config(
            self,
            topic,
            model=model,
            role_models=roles,
            context=context,
            initial_answer=initial_answer,
            debate_mode=debate_mode,
        )
        return RunStart(kind="run", title=topic, model=model or default_model_spec(), config=config)

    def endpoint_stats(self) -> list[dict[str, object]]:
        """The endpoints of the models resolved so far (:func:`moot.models.base.endpoint_stats`)."""
        return endpoint_stats(self._models.values())

    def model_for(self, key: str) -> Model:
        """The model that plays persona ``key`` (resolved and cached on first use; the first of several)."""
        return self.models_for(key)[0]

    def models_for(self, key: str) -> list[Model]:
        """Every model persona ``key`` may be played by, in failover order (one for a speaker)."""
        models = self._failover.get(key)
        if models is None:
            specs = _choices(self._role_specs.get(key, self._default_spec))
            models = [with_cache(resolve_model(spec), self.cache) for spec in specs]
            self._failover[key] = models
            self._models[key] = models[0]
        return models

    async def timeout_s(self) -> float | None:
        """The budget in seconds of one run (None: none), sized by :mod:`moot.deadline`.

        Asks every participant's model for its expected speed, which loads a local model.
        A run given a :class:`~moot.deadline.Deadline` ends at the earlier of the two.
        """
        speeds = []
        if not self._explicit_timeout:
            models = {id(m): m for m in (self.model_for(k) for k in self.protocol.personas)}
            speeds = [await m.expected_speed() for m in models.values()]
        return run_timeout_s(self.protocol, speeds, explicit=self._explicit_timeout)

    async def aclose(self) -> None:
        """Close what the resolved models hold for the running event loop (``run_sync`` does this).

        Recorded runs are committed when they end (the last of a store's runs in flight commits).
        """
        every = [m for models in self._failover.values() for m in models]
        for model in {id(m): m for m in every}.values():
            await model.aclose()

    async def run(
        self,
        topic: str,
        *,
        context: Any = None,
        initial_answer: str | None = None,
        debate_mode: bool = True,
        on_event: EventCallback | None = None,
        deadline: Deadline | None = None,
        decision_key: DecisionKey | None = None,
    ) -> DebateResult:
        """Run the debate and return its result; never raises for run-time failures.

        A backend failure, or an unexpected exception inside a backend, becomes a failed
        turn in the result (``error``, ``error_kind``, raw text). What is not a run-time
        failure reaches the caller, after every turn in flight is cancelled and awaited:
        a usage error, or an exception raised by ``on_event``.

        Args:
            topic: the question, claim or sentence.
            context: shared context (dict, list, pydantic model or text), shown as JSON.
            initial_answer: the caller's answer to fall back on (seed 000); without it the
                fallback is the best answer the debate produced so far.
            debate_mode: False skips the debate and returns ``initial_answer`` unchanged
                (so does a protocol with ``enabled: false``).
            on_event: called with every Event.
            deadline: the caller's deadline (e.g. a pipeline's): the run ends at the earlier of
                it and its own budget (:meth:`timeout_s`), and falls back there.
            decision_key: reads a deciding step's decisive value from its answer, for the swap
                audit's "same decision" (a bench passes its task's parser; :mod:`moot.judging`).

        Raises:
            UsageError: empty topic, or a model spec that cannot be resolved.
            Exception: whatever ``on_event`` raised.
        """
        if not debate_mode or not self.protocol.enabled:
            return await self.start(
                topic, initial_answer=initial_answer, on_event=on_event, resolve=False
            ).skip()
        run = self.start(
            topic, context=context, initial_answer=initial_answer, on_event=on_event, deadline=deadline
        )
        run.decision_key = decision_key
        return await run.execute()

    def start(
        self,
        topic: str,
        *,
        context: Any = None,
        initial_answer: str | None = None,
        on_event: EventCallback | None = None,
        resolve: bool = True,
        deadline: Deadline | None = None,
    ) -> DebateRun:
        """Prepare one run without calling any model, for orchestrators that drive the steps.

        ``await debate.start(topic).execute()`` is ``await debate.run(topic)``, recorded the same
        way: the run's observers are attached by :meth:`DebateRun.begin` (or :meth:`DebateRun.skip`)
        and told its end by :meth:`DebateRun.finish`.

        Args:
            topic: the question, claim or sentence.
            context: shared context.
            initial_answer: the fallback answer.
            on_event: event callback.
            resolve: resolve every participant's model now, so unknown providers and
                missing keys fail before any call (False for a run that will be skipped).
            deadline: the caller's deadline, as for :meth:`run`.

        Raises:
            UsageError: empty topic, or a model spec that cannot be resolved.
        """
        if not topic or not topic.strip():
            raise UsageError("the topic is empty")
        if resolve:
            for key in self.protocol.personas:
                self.model_for(key)
        return DebateRun(self, topic.strip(), context, initial_answer, on_event, deadline=deadline)

    def run_sync(self, topic: str, **kwargs: Any) -> DebateResult:
        """Blocking wrapper around :meth:`run` (same arguments)."""

        async def main() -> DebateResult:
            try:
                return await self.run(topic, **kwargs)
            finally:
                await self.aclose()  # connection pools must not outlive this event loop

        return aio.run(main())

    async def stream(self, topic: str, **kwargs: Any) -> AsyncIterator[Event]:
        """Run the debate, yielding events as they happen; the last is ``debate_completed``.

        Leaving the loop early (``break``, or closing the iterator) cancels the run and
        awaits it, so no task is left behind.
        """
        queue: asyncio.Queue[Event | None] = asyncio.Queue()

        async def push(event: Event) -> None:
            await queue.put(event)

        async def runner() -> None:
            try:
                await self.run(topic, on_event=push, **kwargs)
            finally:
                await queue.put(None)

        task = asyncio.create_task(runner())
        try:
            while (event := await queue.get()) is not None:
                yield event
            await task  # re-raise a usage error from run()
        finally:
            if not task.done():  # the consumer stopped early: stop the run and wait for it to unwind
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
