"""``moot bench``: does debate beat a vote at the same cost? Measure it honestly."""

from __future__ import annotations

import contextlib
import hashlib
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

import moot.aio as aio
import moot.cli._exit as _exit

from ..app import store_spec
from ..app.bench import (
    RECORDED_OPTIONS,
    find_resume,
    merge_resume,
)
from ..app.ray import ray_options
from ..app.recorder import recorded_ids, resolve_store
from ..bench.records import ItemRecord
from ..bench.report import (
    REPORT_FILE,
    RICH_TABLE_DROP,
    ensure_plotting,
    fallback_hint,
    rich_table,
    write_report,
)
from ..bench.runner import (
    MAX_ITEMS,
    RESULTS_FILE,
    RUN_FILE,
    BenchConfig,
    BenchRun,
    RunObserver,
    check_deadlines,
    check_history,
    expand_methods,
    load_records,
    match_by_cost,
    parse_history,
    read_run_file,
    run_bench,
)
from ..bench.summary import blank_hint
from ..bench.tasks import make_task
from ..errors import ResourceError, UsageError
from ..judging import audit_line
from ..models import run_with_model
from ..models.testing import ReplayModel
from ..observe import annotate
from ..protocol import MAX_TOKENS_PER_CALL
from ._cache_options import CacheExpiryOption, CacheFileOption, CacheOption, apply_cache_options
from ._console import ProgressLines, endpoint_line, make_console, print_endpoints, print_table
from ._io import MAX_CONCURRENCY, check_output_dir
from ._judge_options import (
    JudgeAuditOption,
    JudgeBlindOption,
    JudgeShuffleOption,
    JudgeSwapRobustOption,
    judging_options,
)
from ._model_options import ModelConcurrencyOption, apply_model_concurrency
from ._ray_options import RayOption, RayWorkersOption
from ._safe import clean, markup
from ._store_options import NoStoreOption, StoreOption

__all__ = ["default_out", "register"]


def _matched_by(value: str) -> str:
    if value not in ("calls", "cost"):
        raise UsageError(f"--matched-by must be calls or cost, not {value!r}")
    return value


def _print_estimate(config: BenchConfig, task: Any, items: list[Any]) -> None:
    """``--dry-run``: each method's calls, tokens and cost at most, priced from the model spec."""
    from ..bench.costs import estimate_methods, format_estimate
    from ..models.pricing import spec_pricing

    specs = expand_methods(config.methods, config.matched, config.matched_votes)
    costs = estimate_methods(specs, task, items, config.model, config.max_tokens, config.history)
    typer.echo(clean(format_estimate(costs, config.model, spec_pricing(config.model)[0].note)))


def default_out(task: str, model: str, seed: int, methods: list[str], n: int | None, matched: bool) -> Path:
    """``bench-out/TASK-MODEL-METHODS-nN-sSEED``: another bench gets a folder of its own.

    ``METHODS`` joins the method specs with ``+`` (``-matched`` when asked); a list longer
    than 40 characters keeps its start and adds a short hash of the whole list. ``n`` is
    ``nall`` for every item of a data file. ``--resume`` finds the folder from the run's
    record, so a resume with a larger ``--n`` continues in the same place.
    """

    def slug(text: str) -> str:
        return re.sub(r"[^A-Za-z0-9._+-]+", "_", text).strip("_") or "x"

    kind, _, rest = task.partition(":")
    name = kind + (f"-{Path(rest).stem}" if rest else "")
    listed = slug("+".join(methods)) + ("-matched" if matched else "")
    if len(listed) > 40:
        digest = hashlib.sha256(listed.encode()).hexdigest()[:8]
        listed = f"{listed[:31].rstrip('+_-')}-{digest}"
    return Path("bench-out") / f"{slug(name)}-{slug(model)}-{listed}-n{n or 'all'}-s{seed}"


def _methods(text: str, early_stop: bool, debate_if_disagree: bool) -> list[str]:
    if early_stop and debate_if_disagree:
        raise UsageError("--early-stop and --debate-if-disagree exclude each other; pick one")
    option = "early_stop" if early_stop else "debate_if_disagree" if debate_if_disagree else ""
    out = []
    for part in text.split(","):
        part = part.strip()
        if option and part.startswith("society:") and part.count(":") == 2:
            part = f"{part}:{option}"
        if part:
            out.append(part)
    return out


def parse_deadlines(values: list[str]) -> dict[str, float]:
    """``--deadline [PRESET=]SECONDS`` (repeatable, or comma-separated) as ``{preset or "*": s}``.

    Raises:
        UsageError: not seconds, or not positive.
    """
    out: dict[str, float] = {}
    for value in values:
        for part in value.split(","):
            name, _, text = part.strip().rpartition("=")
            try:
                seconds = float(text)
            except ValueError:
                seconds = float("nan")
            if not seconds > 0 or seconds == float("inf"):
                raise UsageError(
                    f"--deadline {part.strip()!r}: use SECONDS or PRESET=SECONDS (positive seconds)"
                )
            out[name.strip() or "*"] = seconds
    return out


class _ProgressObserver(RunObserver):
    """A live bar on a terminal; a plain line every 10 s or 5% of the units in a log or a pipe."""

    def __init__(
        self,
        progress: Progress | None,
        console: Console,
        endpoints: Callable[[], list[dict[str, Any]]] | None = None,
    ) -> None:
        self.progress = progress
        self.console = console
        self.endpoints = endpoints
        self.task: TaskID | None = None
        self.lines = ProgressLines(console, "bench", "units") if progress is None else None
        self._shown = 0.0

    def started(self, total: int, done: int) -> None:
        if self.progress is not None:
            self.task = self.progress.add_task("items x methods", total=total, completed=done)
        elif self.lines is not None:
            self.lines.start(total, done)

    def finished_unit(self, record: ItemRecord) -> None:
        if self.progress is not None and self.task is not None:
            self.progress.advance(self.task)
            now = time.monotonic()
            if self.endpoints is not None and now - self._shown >= 0.5:  # a few redraws a second at most
                self._shown = now
                line = endpoint_line(self.endpoints())
                self.progress.update(self.task, description=f"items x methods  {line}")
        elif self.lines is not None:
            self.lines.advance()

    def failed_unit(self, item_id: str, method: str, error: str) -> None:
        self.console.print(f"[yellow]failed[/] {markup(item_id)} {markup(method)}: {markup(error)}")


_METHOD_FLAGS = ("methods", "early_stop", "debate_if_disagree")


def _given(ctx: typer.Context, name: str) -> bool:
    # typer may vendor its own click: compare the source by name, not by enum identity.
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _report_only(out: Path, trust_edited: bool = False) -> BenchRun:
    meta = out / RUN_FILE
    if not meta.is_file():
        raise UsageError(f"no {RUN_FILE} in {out}: nothing to report")
    data = read_run_file(meta)
    config = BenchConfig.model_validate({k: v for k, v in data.items() if k in BenchConfig.model_fields})
    specs = expand_methods(config.methods, config.matched, config.matched_votes)
    task = make_task(config.task, exclude_conflict=config.exclude_conflict)
    items = task.items(config.n, config.seed)
    by_key = {(r.item_id, r.method): r for r in load_records(out / RESULTS_FILE, trust_edited=trust_edited)}
    records = [by_key[(i.id, s.name)] for i in items for s in specs if (i.id, s.name) in by_key]
    run = BenchRun(
        config=config,
        specs=specs,
        items=items,
        records=records,
        resumed=len(records),
        data_notes=task.data_notes,
    )
    run.model_name = str(data.get("model_name", ""))
    return run


def _check_model(model: str, *, dry_run: bool) -> None:
    """A spec moot cannot read is one usage error before the store is opened.

    A missing key is not one for a dry run, which spends nothing; a real run says so here.
    """
    from ..errors import MissingCredentialsError
    from ..models import resolve_model

    try:
        resolve_model(model)
    except MissingCredentialsError:
        if not dry_run:
            raise


def bench(
    ctx: typer.Context,
    task: Annotated[
        str,
        typer.Option(
            "--task",
            help="arithmetic | gsm8k:FILE.jsonl | mcq:FILE.jsonl|.csv | absa[:FILE.jsonl|.xml] "
            "| semeval:FILE.xml",
        ),
    ] = "arithmetic",
    methods: Annotated[
        str,
        typer.Option(
            "--methods",
            help="Comma-separated: single, vote:K, society:N:T[:early_stop|:debate_if_disagree], a preset.",
        ),
    ] = "single,vote:3,society:3:2",
    model: Annotated[str, typer.Option("--model", help="Model spec, e.g. local or openai:MODEL.")] = "local",
    n: Annotated[
        int, typer.Option("--n", min=0, max=MAX_ITEMS, help="Items (0: every item of a data file).")
    ] = 100,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Seed of the item sample and the calls.")] = 0,
    concurrency: Annotated[
        int, typer.Option("--concurrency", min=1, max=MAX_CONCURRENCY, help="Item x method units in flight.")
    ] = 4,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Output directory (default bench-out/TASK-MODEL-METHODS-nN-sSEED)."),
    ] = None,
    resume: Annotated[
        str | None,
        typer.Option(
            "--resume",
            metavar="DIR|RUN_ID",
            help="Continue a run (its --out folder or its run id) with its recorded settings.",
        ),
    ] = None,
    trust_edited: Annotated[
        bool,
        typer.Option(
            "--trust-edited",
            help="With --resume, --replay or --report-only: use result lines edited after they were "
            "recorded (each line carries its sha256; an edited one is refused otherwise).",
        ),
    ] = False,
    replay: Annotated[
        str | None,
        typer.Option(
            "--replay",
            metavar="DIR|RUN_ID",
            help="Re-run a recorded bench from its recorded replies (no request): its settings, the "
            "--methods you give; a sample it never recorded fails its unit, naming it.",
        ),
    ] = None,
    matched: Annotated[
        bool, typer.Option("--matched", help="Add a vote with as many calls as each debate method.")
    ] = False,
    matched_by: Annotated[
        str,
        typer.Option(
            "--matched-by",
            help="With --matched: calls (as many calls) or cost (as much money, from the model's price: "
            "histories make a debate's calls dearer than a vote's).",
        ),
    ] = "calls",
    early_stop: Annotated[
        bool, typer.Option("--early-stop", help="Societies stop once all agents agree after a round.")
    ] = False,
    debate_if_disagree: Annotated[
        bool, typer.Option("--debate-if-disagree", help="Societies debate only if round 0 is not unanimous.")
    ] = False,
    temperature: Annotated[
        float | None, typer.Option("--temperature", help="Sampling temperature (default: the backend's).")
    ] = None,
    max_tokens: Annotated[
        int, typer.Option("--max-tokens", min=1, max=MAX_TOKENS_PER_CALL, help="Generation cap per call.")
    ] = 256,
    model_concurrency: ModelConcurrencyOption = None,
    max_errors: Annotated[
        int, typer.Option("--max-errors", min=1, help="Stop after this many failed units in a row.")
    ] = 10,
    budget_usd: Annotated[
        float | None,
        typer.Option(
            "--budget-usd",
            min=0.000001,
            help="US dollars this invocation may spend: units that could pass it are not started and "
            "are left for --resume (which may give a new budget). Needs the model's price.",
        ),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Print the calls, tokens and cost at most of the run; call no model."),
    ] = False,
    exclude_conflict: Annotated[
        bool,
        typer.Option(
            "--exclude-conflict", help="ABSA: leave out aspects labelled conflict (default: a class)."
        ),
    ] = False,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout",
            min=0.1,
            help="Seconds this invocation may run; unfinished units are left for --resume (exit 1).",
        ),
    ] = None,
    deadline: Annotated[
        list[str] | None,
        typer.Option(
            "--deadline",
            metavar="[PRESET=]SECONDS",
            help="Seconds each unit of a preset may take (default: the preset's production deadline, "
            "e.g. answer: 10 s); repeatable. Units that fall back are not scored (exit 1).",
        ),
    ] = None,
    no_plots: Annotated[
        bool, typer.Option("--no-plots", help="Skip the PNG plots (no matplotlib needed).")
    ] = False,
    report_only: Annotated[
        bool, typer.Option("--report-only", help="Rewrite the report of --out from its results; no calls.")
    ] = False,
    ray_address: RayOption = None,
    ray_workers: RayWorkersOption = None,
    store: StoreOption = None,
    no_store: NoStoreOption = False,
    cache: CacheOption = False,
    cache_file: CacheFileOption = None,
    cache_expiry: CacheExpiryOption = None,
    judge_blind: JudgeBlindOption = False,
    judge_shuffle: JudgeShuffleOption = False,
    judge_audit: JudgeAuditOption = False,
    judge_swap_robust: JudgeSwapRobustOption = False,
    history: Annotated[
        str | None,
        typer.Option(
            "--history",
            metavar="window:N|summarize:N",
            help="Tokens of history each prompt may carry: a society agent keeps the question and its "
            "latest exchanges that fit N (the prompt says how many were left out); a preset gets it as "
            "its protocol's history. summarize:N is for presets only. single and vote:K have no history. "
            "Default: only the model's known window bounds a prompt.",
        ),
    ] = None,
) -> None:
    """Benchmark methods on a task: accuracy with intervals, cost, flips and paired tests.

    A preset runs under its production deadline (as ``moot run`` would) unless --deadline
    sets another; a unit whose debate fell back is counted, never scored.

    Exit codes: 0 complete; 1 incomplete (failed units, --timeout), units fell back, or every
    reply of a method was blank;
    2 usage error (bad option or data, --out in use); 130 Ctrl-C or SIGTERM.
    """
    apply_cache_options(cache, cache_file, cache_expiry, ray_address=ray_address)
    apply_model_concurrency(model_concurrency)
    console = make_console(stderr=True)
    given = {f: _given(ctx, f) for f in RECORDED_OPTIONS}
    given["methods"] = any(_given(ctx, f) for f in _METHOD_FLAGS)
    fields: dict[str, Any] = {
        "task": task,
        "methods": _methods(methods, early_stop, debate_if_disagree),
        "model": model,
        "n": n or None,
        "seed": seed,
        "temperature": temperature,
        "max_tokens": max_tokens,
        "matched": matched,
        "matched_by": _matched_by(matched_by),
        "max_errors": max_errors,
        "exclude_conflict": exclude_conflict,
    }
    deadlines = parse_deadlines(deadline or [])
    history_spec = parse_history(history) if history is not None else None
    spec = store_spec(store, enabled=not no_store and not report_only)
    if model is not None and ray_address is None:  # (with --ray the workers build the model)
        _check_model(model, dry_run=dry_run)
    target = resolve_store(spec) if spec is not None else None  # the store the run records into
    resumed = find_resume(resume, target) if resume is not None else None
    if resumed is not None:
        if out is not None and out.resolve() != resumed.out.resolve():
            raise UsageError(f"--resume: --out {out} contradicts the recorded run (out {resumed.out})")
        fields = merge_resume(resumed, {k: v for k, v in fields.items() if given.get(k)})
        out = resumed.out
        load_records(out / RESULTS_FILE, trust_edited=trust_edited)  # an edited line: refused before any work
    if deadlines or resumed is None:  # a resume may lift the recorded deadlines
        fields["deadlines"] = deadlines
    judging = judging_options(judge_blind, judge_shuffle, judge_audit, judge_swap_robust)
    if judging or resumed is None:  # a resume keeps the recorded options unless given
        fields["judging"] = judging
    if history_spec is not None or resumed is None:  # a resume keeps the recorded history unless given
        fields["history"] = history_spec
    given["history"] = history_spec is not None  # a --replay keeps the recorded one unless given
    fields, out, replayed = _replay(replay, resumed, target, fields, given, out, trust_edited)
    out_dir = out or default_out(
        fields["task"], fields["model"], fields["seed"], fields["methods"], fields["n"], fields["matched"]
    )
    check_output_dir(out_dir, "--out")
    if not no_plots:
        ensure_plotting()
    if report_only:
        run = _report_only(out_dir, trust_edited)
    else:
        if resumed is None or _given(ctx, "concurrency") or "concurrency" not in fields:
            fields["concurrency"] = concurrency  # a resume keeps the recorded one unless given
        config = BenchConfig.model_validate(fields | {"budget_usd": budget_usd})  # a resume's own budget
        # Bad methods or data fail here, as one line, not inside the progress display.
        bench_task = make_task(config.task, exclude_conflict=config.exclude_conflict)
        bench_items = bench_task.items(config.n, config.seed)
        config = match_by_cost(config, bench_task)
        specs = expand_methods(config.methods, config.matched, config.matched_votes)
        check_deadlines(config.deadlines, specs)
        check_history(config.history, specs)
        if dry_run:
            _print_estimate(config, bench_task, bench_items)
            return
        ray = ray_options(ray_address, ray_workers, config.concurrency)
        if ray is None:  # with --ray the model is built on each worker, never loaded here
            from ..models import resolve_model

            backend = resolve_model(config.model) if replayed is None else replayed
        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
        )
        continues = resumed.run_id if resumed is not None else None
        if replayed is not None and ray is not None:
            raise UsageError("--replay answers from this process's record of the run: it cannot run on --ray")
        with (
            annotate(config={"replay": {"from": replay}} if replay is not None else None),
            recorded_ids() as ids,  # the run records itself (store=), once out is checked and locked
            (
                Progress(*columns, console=console, transient=False)
                if console.is_terminal
                else contextlib.nullcontext(None)
            ) as progress,
        ):
            observer = _ProgressObserver(progress, console, backend.endpoint_stats if ray is None else None)
            # `timeout` and schedulers send SIGTERM: stop like Ctrl-C, with the resume hint.
            previous = signal.signal(signal.SIGTERM, _interrupt)
            try:
                if ray is not None:
                    from ..scale import run_bench_ray

                    run = aio.run(
                        run_bench_ray(
                            config,
                            out=out_dir,
                            ray=ray,
                            resume=resumed is not None,
                            observer=observer,
                            timeout_s=timeout,
                            model_concurrency=model_concurrency,
                            store=target,
                            continues=continues,
                            trust_edited=trust_edited,
                        )
                    )
                else:
                    # run_with_model closes the backend's loop-bound clients, on Ctrl-C too.
                    run = run_with_model(
                        backend,
                        lambda m: run_bench(
                            config,
                            model=m,
                            out=out_dir,
                            resume=resumed is not None,
                            observer=observer,
                            timeout_s=timeout,
                            store=target,
                            continues=continues,
                            trust_edited=trust_edited,
                        ),
                    )
            except KeyboardInterrupt:
                console.print(
                    f"interrupted: finished items are saved in {out_dir / RESULTS_FILE}; "
                    f"continue with: moot bench --resume {ids[0][:8] if ids else out_dir}"
                )
                raise typer.Exit(_exit.INTERRUPTED) from None
            finally:
                signal.signal(signal.SIGTERM, previous)
    _finish(run, out_dir, console, plots=not no_plots, timeout=timeout)


def _finish(run: BenchRun, out_dir: Path, console: Console, *, plots: bool, timeout: float | None) -> None:
    """Write the report, print the table and what is left to do; exit 1 unless every unit is scored."""
    try:
        report = write_report(run, out_dir, plots=plots)
    except OSError as err:  # every unit is in results.jsonl: only the report is missing
        raise ResourceError(
            f"cannot write the report in {out_dir}: {err.strerror or err}; the {len(run.records)} units are "
            f"in {out_dir / RESULTS_FILE}: free space and run moot bench --report-only --out {out_dir}",
            path=str(err.filename or out_dir),
        ) from None
    print_table(make_console(), rich_table(report), drop=RICH_TABLE_DROP)
    for method, a in report.judge_audit.items():  # the swap audit, one line per method
        console.print(markup(f"judge audit {method}: {audit_line(a)}"))
    console.print(f"report: {out_dir / REPORT_FILE}  results: {out_dir / RESULTS_FILE}")
    print_endpoints(console, run.endpoints)
    if run.retried:
        console.print(f"retried {run.retried} failed unit attempts in this invocation")
    if run.timed_out and timeout is not None:
        console.print(f"[yellow]timeout:[/] stopped after --timeout {timeout:g} s")
    if run.budget_left:
        console.print(
            f"[yellow]budget:[/] --budget-usd {run.config.budget_usd:g} reached: {run.budget_left} units "
            f"not started; continue with --resume {markup(str(out_dir))} (and a new --budget-usd)"
        )
    if run.stopped:
        last = f"; the last: {markup(run.failures[-1][2])}" if run.failures else ""
        console.print(
            f"[yellow]stopped:[/] {run.config.max_errors} units failed in a row (--max-errors "
            f"{run.config.max_errors}), so no new units were started{last}"
        )
    hint = fallback_hint(report.methods, run.config)
    if hint:
        console.print(f"[yellow]fell back:[/] {markup(hint.replace('OUT', str(out_dir)))}")
    for m in report.methods:
        if m.replies_blank and m.replies_blank < m.replies:
            console.print(
                f"[yellow]blank:[/] {markup(m.method)}: {m.replies_blank} of {m.replies} replies were blank "
                "(no text), scored as parse failures"
            )
    nothing = blank_hint(report.methods)
    if nothing:
        console.print(f"[red]no text:[/] {markup(nothing)}")
    if not run.complete:
        missing = len(run.items) * len(run.specs) - len(run.records)
        console.print(
            f"[yellow]incomplete:[/] {missing} item/method units missing; continue with --resume {out_dir}"
        )
    if not run.complete or hint or nothing:
        raise typer.Exit(_exit.DEGRADED)


def _replay(
    replay: str | None,
    resumed: Any,
    store: Any,
    fields: dict[str, Any],
    given: dict[str, bool],
    out: Path | None,
    trust_edited: bool = False,
) -> tuple[dict[str, Any], Path | None, ReplayModel | None]:
    """``--replay DIR|RUN_ID``: the recorded settings (the options given win) and the model of its replies.

    Raises:
        UsageError: with --resume, an --out that is the recorded run's own folder, or no results.
    """
    if replay is None:
        return fields, out, None
    if resumed is not None:
        raise UsageError("--replay runs a recorded bench again into a new folder: it cannot --resume one")
    found = find_resume(replay, store, flag="--replay")
    merged = dict(found.config) | {k: v for k, v in fields.items() if given.get(k)}
    if out is None:
        out = default_out(
            merged["task"], merged["model"], merged["seed"], merged["methods"], merged.get("n"), False
        ).with_name(f"{found.out.name}-replay")
    if out.resolve() == found.out.resolve():
        raise UsageError(f"--replay: --out {out} is the recorded run's own folder; give another")
    results = found.out / RESULTS_FILE
    if not results.is_file():
        raise UsageError(f"--replay {replay}: no {RESULTS_FILE} in {found.out}, so no replies to replay")
    return merged, out, ReplayModel.from_bench(load_records(results, trust_edited=trust_edited))


def register(app: typer.Typer) -> None:
    """Add the ``bench`` command to the ``moot`` app."""
    app.command("bench")(bench)
