"""``moot run``: one debate shown live, a batch with ``--input``, or its prompts with ``--dry-run``."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, TextIO

import typer
from rich.console import Console
from rich.panel import Panel
from rich.table import Table

import moot.cli._exit as _exit

from ..app import store_spec
from ..app.recorder import recorded_ids, resolve_store
from ..app.rerun import recorded_debate, recorded_endpoints, stored_run, trusted_edit
from ..debate_run import unreachable_error
from ..engine import Debate, with_budget_usd
from ..errors import UsageError
from ..estimate import estimate_debate
from ..judging import audit_line
from ..models import Model, default_model_spec
from ..models.pricing import cost_text
from ..models.testing import ReplayModel
from ..observe import annotate
from ..protocol import read_overrides
from ..transcript import DebateResult, Event, Turn
from ._cache_options import CacheExpiryOption, CacheFileOption, CacheOption, apply_cache_options
from ._console import endpoint_line, make_console, print_endpoints
from ._io import (
    AllowOutsideOption,
    allow_outside,
    check_output_file,
    check_text,
    read_json,
    read_text,
    staged_output,
)
from ._judge_options import (
    JudgeAuditOption,
    JudgeBlindOption,
    JudgeShuffleOption,
    JudgeSwapRobustOption,
    judging_options,
)
from ._model_options import ModelConcurrencyOption, apply_model_concurrency
from ._safe import clean, markup, safe_json
from ._store_options import NoStoreOption, StoreOption, TrustEditedOption
from .dry_run import first_round_calls, format_calls
from .run_batch import read_topics, run_batch

__all__ = ["LiveView", "load_context", "parse_role_models", "print_summary", "register"]

_STANCE_STYLE = {"pro": "green", "con": "red", "neutral": "cyan", None: "white"}

DEMO_NOTICE = (
    "note: the embedded SmolLM2-135M demo model shows the mechanics of a debate, not reasoning "
    "quality; for a real model use --model openai:NAME with OPENAI_BASE_URL, or set MOOT_MODEL"
)
"""Shown once, dimmed, when a debate runs on the bundled demo model."""


def uses_demo_model(debate: Debate) -> bool:
    """Whether any participant of ``debate`` is played by the bundled demo model (resolves them)."""
    return any(getattr(debate.model_for(key), "embedded", False) for key in debate.protocol.personas)


def no_answer_reason(result: DebateResult) -> str | None:
    """Why ``result`` is not a debate's answer (None when it is): nothing, or only the fallback.

    A skipped debate (``--no-debate-mode``) asked for the initial answer, so it counts as answered.
    """
    if result.skipped:
        return None
    if result.final_answer is None:
        return "the debate produced no answer" + (f" ({result.fallback})" if result.fallback else "")
    if result.fallback:
        return f"the answer is a fallback, not a debate's: {result.fallback}"
    return None


def load_context(path: Path | None) -> Any:
    """Read ``--context``: JSON files become data, anything else is passed as text.

    Raises:
        UsageError: the file is missing, not UTF-8, or (``.json``) not valid JSON.
    """
    if path is None:
        return None
    if path.suffix.lower() == ".json":
        return read_json(path, "context file")
    return read_text(path, "context file")


def parse_role_models(items: list[str] | None) -> dict[str, str]:
    """``["judge=openai:gpt-4o", ...]`` -> ``{"judge": "openai:gpt-4o"}``.

    Raises:
        UsageError: an item is not ``KEY=SPEC``.
    """
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, spec = item.partition("=")
        if not sep or not key.strip() or not spec.strip():
            raise UsageError(f"--role-model expects KEY=SPEC, got {item!r}")
        out[key.strip()] = spec.strip()
    return out


def _turn_panel(turn: Turn) -> Panel:
    title = f"[bold]{markup(turn.speaker)}[/]" + (f" ({turn.stance})" if turn.stance else "")
    title += f" · round {turn.round}" + (f" · {turn.phase}" if turn.phase != "turn" else "")
    if not turn.ok:
        return Panel(f"[red]failed:[/] {markup(turn.error or '')}", title=title, border_style="red")
    content = turn.content or {}
    lines = []
    text = turn.text
    if text:
        lines.append(markup(text))
    for key in ("planning", "reflection"):
        if content.get(key):
            lines.insert(0, f"[dim]{key}:[/] {markup(str(content[key]))}")
    for key in ("key_points", "supporting_evidence", "citations", "key_agreements", "key_disagreements"):
        items = [str(x) for x in content.get(key) or [] if str(x).strip()]
        if items:
            lines.append(f"[dim]{key}:[/] " + markup("; ".join(items)))
    if "proposed_edits" in content:
        for edit in content["proposed_edits"]:
            lines.append(markup(json.dumps(edit, ensure_ascii=False)))
    if not lines:
        lines.append(markup(json.dumps(content, ensure_ascii=False)))
    extras = []
    for key in ("confidence", "leaning", "winner", "resolution", "sentence_polarity"):
        if content.get(key) is not None:
            extras.append(f"{key}={markup(content[key])}")
    subtitle = (
        " ".join(extras) + f" · {turn.latency_ms / 1000:.1f}s" + (" · repaired" if turn.repaired else "")
    )
    style = _STANCE_STYLE.get(turn.stance, "white") if turn.phase == "turn" else "magenta"
    return Panel("\n".join(lines), title=title, subtitle=subtitle, border_style=style)


class LiveView:
    """Prints events readably as they arrive."""

    def __init__(
        self,
        console: Console,
        out: TextIO | None,
        notice: str | None = None,
        endpoints: Callable[[], list[dict[str, Any]]] | None = None,
    ) -> None:
        self.console = console
        self.out = out
        self.notice = notice
        self.endpoints = endpoints
        """Reads the model endpoints' counters (requests in flight, limit, 429s) for the round's rule."""

    def __call__(self, event: Event) -> None:
        """Write ``event`` to the events file (if any) and print it."""
        if self.out is not None:
            self.out.write(event.model_dump_json() + "\n")
            self.out.flush()
        c = self.console
        if event.kind == "debate_started":
            c.rule(f"[bold]debate[/] {markup(event.message or '')}")
            if self.notice:  # once per command, however many debates it runs
                c.print(self.notice, style="dim", markup=False, emoji=False, soft_wrap=True)
                self.notice = None
        elif event.kind == "turn_started":
            c.print(f"[dim]… {markup(event.speaker or '')} is thinking (round {event.round})[/]")
        elif event.kind in ("turn_completed", "judge_completed") and event.turn is not None:
            c.print(_turn_panel(event.turn))
        elif event.kind == "round_completed":
            stats = self.endpoints() if self.endpoints is not None else []
            line = f" · {endpoint_line(stats)}" if stats else ""
            c.rule(f"[dim]end of round {event.round}{line}[/]")
        elif event.kind == "retry":
            c.print(f"[yellow]{markup(event.message or '')}[/]")


def _forget(store: Any, ids: list[str]) -> None:
    """Delete the runs ``ids`` the command recorded into ``store`` (a ``store=`` spec; None: none)."""
    if store is None or store is False or not ids:
        return
    opened = resolve_store(store)
    for run_id in ids:
        opened.delete(run_id)


def print_summary(console: Console, result: DebateResult) -> None:
    """The end of ``moot run``'s output: the decision, the answer and the costs (``runs show`` too)."""
    table = Table(show_header=False, box=None)
    if result.decision is not None:
        d = result.decision
        table.add_row("decision", f"{markup(d.label)} ({d.strategy}, confidence {d.confidence})")
        for warning in d.warnings:  # a decision made on missing information says so
            table.add_row("[yellow]warning[/]", f"[yellow]{markup(warning)}[/]")
    table.add_row("final answer", markup(result.final_answer or "(none)"))
    if result.fallback:
        table.add_row("fallback", f"[yellow]{markup(result.fallback)}[/]")
    if result.stopped_early:
        table.add_row("stopped early", "yes")
    for turn in result.turns(include_judge=True):  # who ruled, when another had to (judge failover)
        j = turn.judging
        if j is not None and j.failed_models:
            failed = "; ".join(f"{f.model}: {f.error}" for f in j.failed_models)
            table.add_row(f"{turn.speaker} ruled by", markup(f"{j.ruled_by or '(none)'} (failed: {failed})"))
    audit = result.metrics.get("judge_audit")
    if audit is not None:
        table.add_row("judge audit", markup(audit_line(audit)))
    shared = result.judge_shares_model_with
    speakers = {t.speaker for t in result.turns() if t.phase == "turn"}
    if shared and set(shared) != speakers:  # mixed models: the judge's own family is among them
        table.add_row("judge's model", markup("also speaks for " + ", ".join(shared)))
    u = result.usage
    # Requests sent beyond the answered calls (retries, unanswered) are what a server log shows too.
    sent = f" ({u.attempts} requests sent)" if u.attempts != u.calls else ""
    sent += f" · {u.cached} replies from the cache" if u.cached else ""
    cancelled = f" · {result.cancelled_turns} cancelled" if result.cancelled_turns else ""
    table.add_row(
        "usage",
        f"{u.calls} calls{sent} · {u.prompt_tokens} prompt + {u.completion_tokens} completion tokens"
        f" · {result.timings.wall_ms / 1000:.1f}s wall · {result.failed_turns} failed turns{cancelled}",
    )
    table.add_row("cost", markup(cost_text(u)))
    history = result.metrics.get("history")
    if isinstance(history, dict):  # how the history was shortened to fit (moot.history)
        said = f"{history.get('strategy')}: {history.get('turns_left_out', 0)} earlier turns left out"
        said += f" over {history.get('calls', 0)} calls"
        if history.get("summaries"):
            said += f" · {history['summaries']} round summaries"
        table.add_row("history", markup(said))
    console.print(Panel(table, title=f"[bold]{markup(result.protocol)}[/] result", border_style="bold"))


def _overrides(protocol: str | None, config: Path | None, **fields: Any) -> dict[str, Any]:
    # --config alone is a whole protocol; with --protocol it overrides that preset (seed shapes too).
    out: dict[str, Any] = read_overrides(config) if protocol and config else {}
    judging = fields.pop("judging", None)
    names = {"rounds": "rounds", "max_tokens": "max_tokens_per_turn", "timeout": "timeout"}
    out |= {names[k]: v for k, v in fields.items() if v is not None}
    if judging:  # merged into the protocol's judging: options (docs/judging.md)
        out["judging"] = {**(out.get("judging") or {}), **judging}
    return out


def _replay_debate(
    debate: Debate,
    spec: str | Path | dict[str, Any],
    model: str | None,
    replayed: dict[str, Any] | None,
    store: Path | None,
    given_roles: dict[str, str],
    overrides: dict[str, Any],
) -> Debate:
    """``debate`` with each persona replaying the recorded run (unchanged when not replaying)."""
    if replayed is None:
        return debate
    replayers = _replayers(replayed["from_run"], store, debate, given_roles, replayed["until_round"])
    return Debate(spec, model=model, role_models=replayers, overrides=overrides)


def _replayers(
    run_id: str,
    store: Path | None,
    players: Debate,
    given_roles: dict[str, str],
    until_round: int | None,
) -> dict[str, str | Model]:
    """Each persona's model for a replay of ``run_id``: its recorded replies, then live ones.

    With ``until_round`` every persona replays up to that round and continues with its own
    model; without, a persona the user gave a model (``--role-model``) plays live and the rest
    replay the record in full.
    """
    record = stored_run(run_id, store, trust_edited=True)  # checked (and trusted or not) by --from already
    out: dict[str, str | Model] = {}
    for key in players.protocol.personas:
        live = players.model_for(key)
        if until_round is None and key in given_roles:
            out[key] = live
            continue
        out[key] = ReplayModel.from_result(
            record.result, live=live if until_round is not None else None, until_round=until_round
        )
    return out


def _batch(
    debate: Debate,
    input_file: Path,
    output: Path,
    *,
    concurrency: int,
    model: str | None,
    role_models: dict[str, str],
    context: Path | None,
    initial_answer: str | None,
    debate_mode: bool,
    store: Path | None,
    use_store: bool,
) -> int:
    """``moot run --input``: the CLI's --context and --initial-answer apply where a line has none."""
    shared_context = load_context(context)
    items = [
        replace(
            item,
            context=shared_context if item.context is None else item.context,
            initial_answer=item.initial_answer or initial_answer,
        )
        for item in read_topics(input_file)
    ]
    console = make_console(stderr=True)
    if debate_mode and uses_demo_model(debate):
        console.print(DEMO_NOTICE, style="dim", markup=False, emoji=False, soft_wrap=True)

    debate.store = store_spec(store, enabled=use_store)  # each debate recorded as a run of its own
    return run_batch(debate, items, output, concurrency=concurrency, console=console, debate_mode=debate_mode)


def _dry_run(debate: Debate, topic: str, context: Any, players: dict[str, str], *, as_json: bool) -> None:
    """Round 1's prompts, then the whole debate's calls, tokens and cost at most.

    With ``--json``: one object, ``{"calls": [round 1's calls], "estimate": {...} or null,
    "estimate_error": null or why}``.
    """
    planned = first_round_calls(debate, topic, context, players)
    try:  # priced from the specs: no model is resolved, loaded or called
        estimate, error = estimate_debate(debate, topic, context, players), None
    except UsageError as exc:
        estimate, error = None, str(exc)
    if as_json:
        whole = {
            "calls": [c.as_json() for c in planned],
            "estimate": estimate.as_json() if estimate is not None else None,
            "estimate_error": error,
        }
        typer.echo(safe_json(json.dumps(whole, ensure_ascii=False, indent=2)))
        return
    typer.echo(clean(format_calls(planned)))
    said = estimate.lines() if estimate is not None else [f"no estimate: {error}"]
    typer.echo("\n" + clean("\n".join(said)))


def _players(debate: Debate, model: str | None, roles: dict[str, str]) -> dict[str, str]:
    """Who plays each persona, as specs, without resolving (so without calling or loading) a model."""
    default = model or default_model_spec()
    return {key: roles.get(key) or p.model or default for key, p in debate.protocol.personas.items()}


def _batch_clash(
    topic: str | None,
    input_file: Path | None,
    output: Path | None,
    *,
    as_json: bool,
    out: Path | None,
    from_run: str | None,
    dry_run: bool = False,
) -> None:
    """Reject batch options given without the rest, or with single-debate ones.

    Raises:
        UsageError: naming the clash.
    """
    problem = None
    if input_file is None:
        problem = "--output and --concurrency are for a batch: give --input TOPICS.jsonl too"
    elif output is None:
        problem = "--input needs --output RESULTS.jsonl (one result per line)"
    elif topic is not None:
        problem = "give either a TOPIC or --input, not both"
    single = (("--json", as_json), ("--out", out is not None), ("--from", from_run), ("--dry-run", dry_run))
    for flag, given in single:
        if given and problem is None:
            problem = f"{flag} is for a single debate; a batch writes its results to --output"
    if problem is not None:
        raise UsageError(problem)


def _replaying(from_run: str | None, replay: bool, until_round: int | None) -> dict[str, Any] | None:
    """What a replay replays (recorded in the new run's config), or None when not replaying.

    Raises:
        UsageError: --replay or --replay-until without --from.
    """
    if not replay and until_round is None:
        return None
    if not from_run:
        raise UsageError("--replay and --replay-until replay a recorded run: give --from RUN_ID")
    return {"from_run": from_run, "until_round": until_round}


def _check_args(topic: str | None, initial_answer: str | None, out: Path | None) -> None:
    """Arguments that cannot work fail before any model loads or runs."""
    for value, what in ((topic, "the topic"), (initial_answer, "--initial-answer")):
        if value is not None:
            check_text(value, what)
    if out is not None:
        check_output_file(out, "--out file")


def register(app: typer.Typer) -> None:
    """Add ``run`` to ``app``."""

    @app.command()
    def run(
        topic: Annotated[
            str | None, typer.Argument(help="The question, claim or sentence to debate.", show_default=False)
        ] = None,
        context: Annotated[Path | None, typer.Option(help="Context file: JSON data or plain text.")] = None,
        protocol: Annotated[str | None, typer.Option(help="Preset name (see `moot protocols`).")] = None,
        config: Annotated[
            Path | None, typer.Option(help="Protocol YAML file; with --protocol, overrides for that preset.")
        ] = None,
        model: Annotated[
            str | None, typer.Option(help="Default model spec, e.g. openai:gpt-4o-mini.")
        ] = None,
        role_model: Annotated[
            list[str] | None,
            typer.Option(
                help="KEY=SPEC: a model for one persona (repeatable); a deciding role may name several, "
                "KEY=A,B: the next rules when one fails (judge failover)."
            ),
        ] = None,
        rounds: Annotated[int | None, typer.Option(min=1, help="Override the number of rounds.")] = None,
        max_tokens: Annotated[
            int | None, typer.Option(min=1, help="Override the per-turn token cap.")
        ] = None,
        timeout: Annotated[
            float | None, typer.Option(min=0.1, help="Override the overall timeout (s).")
        ] = None,
        budget_usd: Annotated[
            float | None,
            typer.Option(
                "--budget-usd",
                min=0.000001,
                help="Stop each debate before a call could make it cost more than this (US dollars); "
                "it falls back with 'budget' and exits 1. Needs a price for every model (?price=IN/OUT).",
            ),
        ] = None,
        initial_answer: Annotated[str | None, typer.Option(help="Answer to fall back on.")] = None,
        debate_mode: Annotated[
            bool, typer.Option(help="--no-debate-mode returns the initial answer.")
        ] = True,
        as_json: Annotated[bool, typer.Option("--json", help="Print only the DebateResult as JSON.")] = False,
        out: Annotated[Path | None, typer.Option(help="Write the event stream as JSON lines.")] = None,
        from_run: Annotated[
            str | None,
            typer.Option("--from", help="Re-run the configuration recorded as RUN_ID (options override it)."),
        ] = None,
        store: StoreOption = None,
        no_store: NoStoreOption = False,
        input_file: Annotated[
            Path | None,
            typer.Option(
                "--input", help="Batch: JSONL file, one {topic, context, initial_answer, id} per line."
            ),
        ] = None,
        output: Annotated[
            Path | None, typer.Option(help="Batch: JSONL file of results (items already in it are skipped).")
        ] = None,
        concurrency: Annotated[
            int | None, typer.Option(min=1, max=1000, help="Batch: debates in flight at once [default: 1].")
        ] = None,
        dry_run: Annotated[
            bool, typer.Option("--dry-run", help="Print the prompts round 1 would send; call no model.")
        ] = False,
        allow_outside_paths: AllowOutsideOption = False,
        cache: CacheOption = False,
        cache_file: CacheFileOption = None,
        cache_expiry: CacheExpiryOption = None,
        model_concurrency: ModelConcurrencyOption = None,
        replay: Annotated[
            bool,
            typer.Option(
                "--replay",
                help="With --from: answer every request with the run's recorded reply (no request is "
                "sent); a reply the record lacks fails its turn, naming it. A persona given --role-model "
                "plays live.",
            ),
        ] = False,
        replay_until: Annotated[
            int | None,
            typer.Option(
                "--replay-until",
                min=1,
                help="With --from: replay the recorded replies up to this round, then continue live "
                "(with --model / --role-model, or the recorded models).",
            ),
        ] = None,
        trust_edited: TrustEditedOption = False,
        judge_blind: JudgeBlindOption = False,
        judge_shuffle: JudgeShuffleOption = False,
        judge_audit: JudgeAuditOption = False,
        judge_swap_robust: JudgeSwapRobustOption = False,
    ) -> int:
        """Run one debate and show it live (or print the result as JSON), or a batch with --input.

        Exit code: 0 complete, 1 fell back or had failed calls, 2 usage error.
        """
        apply_cache_options(cache, cache_file, cache_expiry)
        apply_model_concurrency(model_concurrency)
        allow_outside(allow_outside_paths)
        _check_args(topic, initial_answer, out)
        judging = judging_options(judge_blind, judge_shuffle, judge_audit, judge_swap_robust)
        _replaying(from_run, replay, replay_until)
        if input_file is not None or output is not None or concurrency is not None:
            _batch_clash(
                topic, input_file, output, as_json=as_json, out=out, from_run=from_run, dry_run=dry_run
            )
            assert input_file is not None and output is not None
            roles = parse_role_models(role_model)
            overrides = _overrides(
                protocol, config, rounds=rounds, max_tokens=max_tokens, timeout=timeout, judging=judging
            )
            overrides = with_budget_usd(overrides, budget_usd)
            return _batch(
                Debate(protocol or config or "answer", model=model, role_models=roles, overrides=overrides),
                input_file,
                output,
                concurrency=concurrency or 1,
                model=model,
                role_models=roles,
                context=context,
                initial_answer=initial_answer,
                debate_mode=debate_mode,
                store=store,
                use_store=not no_store,
            )
        recorded = recorded_debate(from_run, store, trust_edited=trust_edited) if from_run else {}
        overrides = with_budget_usd(
            _overrides(
                protocol, config, rounds=rounds, max_tokens=max_tokens, timeout=timeout, judging=judging
            ),
            budget_usd,
        )
        spec: str | Path | dict[str, Any] = protocol or (config if config is not None else "answer")
        if recorded and protocol is None and config is None:
            spec = recorded["protocol"]
        topic = topic if topic is not None else recorded.get("topic")
        if topic is None:
            raise UsageError("give a TOPIC (or --from RUN_ID to re-run a recorded debate)")
        given_roles = parse_role_models(role_model)
        endpoints = recorded_endpoints(recorded) if model is None else {}
        model = model or recorded.get("model")
        roles = endpoints | dict(recorded.get("role_models") or {}) | given_roles
        debate = Debate(spec, model=model, role_models=roles, overrides=overrides)
        replayed = _replaying(from_run, replay, replay_until)
        debate = _replay_debate(debate, spec, model, replayed, store, given_roles, overrides)
        ctx = load_context(context) if context is not None else recorded.get("context")
        if initial_answer is None:
            initial_answer = recorded.get("initial_answer")
        if dry_run:
            _dry_run(debate, topic, ctx, _players(debate, model, roles), as_json=as_json)
            return 0
        extra: dict[str, Any] = {}  # what the record adds to the debate's own config
        if from_run:
            extra["from_run"] = from_run
            extra |= trusted_edit(from_run)  # an edited record replayed under --trust-edited says so
        if replayed is not None:
            extra["replay"] = replayed
        console = make_console(stderr=as_json)
        notice = DEMO_NOTICE if debate_mode and uses_demo_model(debate) else None
        with ExitStack() as stack:
            # The events file takes its name only once the run succeeded: no partial file on failure.
            sink = stack.enter_context(staged_output(out, "--out file")) if out is not None else None
            live = LiveView(console, sink, notice, debate.endpoint_stats)
            if as_json:  # keep stdout clean: only the result goes there
                live.console = make_console(stderr=True, quiet=True)
            # Recorded by the debate's observers (the store's recorder sees each event first).
            debate.store = store_spec(store, enabled=not no_store)
            with (
                annotate(config=extra or None),
                recorded_ids() as ids,
            ):
                result = debate.run_sync(
                    topic,
                    context=ctx,
                    initial_answer=initial_answer,
                    debate_mode=debate_mode,
                    on_event=live,
                )
            unreachable = unreachable_error(result)
            if unreachable and initial_answer is None:  # with one, the result falls back to it (exit 1)
                # Exit 2 leaves nothing written: the run the store recorded as failed goes too.
                _forget(debate.store, ids)
                raise UsageError(f"cannot reach the model endpoint: {unreachable}")
        if as_json:
            typer.echo(safe_json(result.model_dump_json()))
        else:
            print_summary(console, result)
            print_endpoints(console, debate.endpoint_stats())
            if ids:  # how to find it again
                short = ids[0][:8]
                console.print(f"[dim]recorded as run {short}: moot runs show {short} · moot view[/]")
        reason = no_answer_reason(result)
        if reason is not None:  # one line, also under --json (stderr), so a script's log says why
            make_console(stderr=True).print(
                f"moot: {clean(reason)}", style="yellow", markup=False, soft_wrap=True
            )
        return _exit.for_debate(result)
