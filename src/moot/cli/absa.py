"""``moot absa``: the ABSA debate pipeline from the command line.

``moot absa-eval`` lives in :mod:`moot.cli.absa_eval`.

::

    moot absa "The pasta was great but the service was slow." [--config FILE] [--model SPEC] [--json]
    moot absa --input sentences.jsonl --output results.jsonl [--concurrency N] [--report]
              [--ray ADDRESS [--ray-workers N]] [--timeout S]
    moot absa --from RUN_ID [--replay] [--config FILE] [--output results.jsonl]
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TextIO

import typer
from rich.console import Console
from rich.table import Table

import moot.aio as aio
import moot.cli._exit as _exit

from ..absa import (
    FinalResult,
    compute_metrics,
    format_report,
    load_config,
    run_absa,
)
from ..absa.config import AbsaConfig
from ..absa.pipeline import DEADLINE_ERROR
from ..absa.schemas import TraceStep
from ..app import store_spec
from ..app.absa import absa_batch
from ..app.ray import ray_options
from ..app.rerun import RecordedAbsa, recorded_absa, trusted_edit
from ..errors import UsageError
from ..jsontext import check_unique_ids
from ..models import Model, run_with_model
from ..models.testing import ReplayModel
from ..observe import annotate
from ._cache_options import CacheExpiryOption, CacheFileOption, CacheOption, apply_cache_options
from ._console import ProgressLines, endpoint_line, make_console, print_endpoints, print_table, progress_bar
from ._io import (
    MAX_CONCURRENCY,
    AllowOutsideOption,
    allow_outside,
    check_output_file,
    check_text,
    read_jsonl,
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
from ._ray_options import RayOption, RayWorkersOption
from ._safe import clean, markup, safe_json
from ._store_options import NoStoreOption, StoreOption, TrustEditedOption

if TYPE_CHECKING:  # pragma: no cover - moot.scale is imported only with --ray
    from ..scale import RayOptions

__all__ = ["print_absa_result", "read_inputs", "register", "say_timed_out"]

logger = logging.getLogger(__name__)


def read_inputs(path: Path) -> list[tuple[str, str]]:
    """Read ``(id, sentence)`` pairs from a JSONL file.

    Each line is an object with ``sentence`` (or ``text``) and an optional ``id``,
    or a bare JSON string. Blank lines are skipped.

    Ids must be unique: each names the sentence's result (its unit in the run store, its line
    of ``--output``), so a second one would take the first's place.

    Raises:
        UsageError: missing file, not UTF-8, a line without a sentence or with an ``id`` that is
            not a string or an integer (its number is named; ``null`` is no id), or an id on
            more than one line (each named, with its line numbers).
    """
    out: list[tuple[str, str]] = []
    lines: list[int] = []
    for number, data in read_jsonl(path, "input file"):
        if isinstance(data, str):
            sentence, ident = data, str(number)
        elif isinstance(data, dict):
            sentence = data.get("sentence") or data.get("text") or ""
            given = data.get("id")
            if given is not None and (isinstance(given, bool) or not isinstance(given, str | int)):
                raise UsageError(f"{path} line {number}: 'id' must be a string or an integer")
            ident = str(number if given is None else given)
        else:
            sentence, ident = "", str(number)
        if not isinstance(sentence, str) or not sentence.strip():
            raise UsageError(f"{path} line {number}: no 'sentence' (or 'text') string")
        out.append((ident, sentence))
        lines.append(number)
    if not out:
        raise UsageError(f"{path} holds no sentences")
    check_unique_ids((ident for ident, _ in out), path, places=lines)
    return out


def print_absa_result(res: FinalResult, console: Console) -> None:
    """One ABSA result as ``moot absa`` prints it (``moot runs show`` replays it)."""
    mod = res.moderator
    console.print(f"[bold]{markup(res.label)}[/] (confidence {res.confidence:.2f})  mode={res.mode}")
    if res.aspects:
        table = Table("aspect", "polarity", "confidence", "span")
        for a in res.aspects:
            span = f"{a['start']}:{a['end']}" if a.get("start") is not None else ""
            table.add_row(markup(a["aspect"]), markup(a["polarity"]), f"{a['confidence']:.2f}", span)
        print_table(console, table, drop=("span", "confidence"))
    else:
        console.print("[dim]no aspects[/]")
    if mod is not None:
        console.print(
            f"rules {' '.join(mod.applied_rules) or '-'} · stage {mod.selected_stage}"
            f" · {markup(mod.rationale)}"
        )
    stats = res.override_stats
    console.print(
        f"override: applied {stats.applied}, low signal {stats.skipped_low_signal}, "
        f"conflict {stats.skipped_conflict}, already confident {stats.skipped_already_confident}"
        + (
            f"; patch applied {stats.patch_applied}, skipped {stats.patch_skipped}"
            if res.mode == "patch"
            else ""
        )
    )
    trace = " → ".join(f"{s.name}{'✗' if not s.ok else ''}{'(skip)' if s.skipped else ''}" for s in res.trace)
    console.print(f"[dim]{trace} · {res.usage.calls} calls, {res.usage.total_tokens} tokens[/]")
    for name, err in res.errors.items():
        console.print(f"[red]failed[/] {markup(name)}: {markup(err[:200])}")


async def _batch(
    items: list[tuple[str, str]],
    out: TextIO,
    model: str | Model | None,
    config: Any,
    concurrency: int,
    console: Console,
    store: Any,
    ray: RayOptions | None = None,
    timeout: float | None = None,
) -> tuple[list[FinalResult], list[dict[str, Any]]]:
    """Run the batch, here or on Ray workers; the results in input order and the per-worker counts."""
    lines = ProgressLines(console, "absa", "sentences")
    lines.start(len(items))
    # In a log or a pipe a live bar shows nothing until the end: plain lines there instead.
    with progress_bar(console) if console.is_terminal else contextlib.nullcontext(None) as progress:
        task = progress.add_task("absa", total=len(items)) if progress is not None else None

        def write(i: int, res: FinalResult) -> None:
            # One line per finished sentence, flushed at once, so an interrupted batch keeps its work.
            out.write(
                json.dumps({"id": items[i][0], **res.model_dump(mode="json")}, ensure_ascii=False) + "\n"
            )
            out.flush()
            if res.errors:  # a batch shows no trace: a failed step is said as it happens
                step, error = next(iter(res.errors.items()))
                more = f" (and {len(res.errors) - 1} more)" if len(res.errors) > 1 else ""
                key = json.dumps(items[i][0], ensure_ascii=False)
                logger.warning("sentence %s: %s failed: %s%s", key, step, error, more)
            if progress is not None and task is not None:
                stats = model.endpoint_stats() if isinstance(model, Model) else []
                line = f"absa  {endpoint_line(stats)}" if stats else "absa"
                progress.update(task, advance=1, description=line)
            else:
                lines.advance()

        return await absa_batch(
            [s for _, s in items],
            [key for key, _ in items],
            model=model,
            config=config,
            concurrency=concurrency,
            on_result=write,
            timeout_s=timeout,
            ray=ray,
            store=store,
        )


def say_timed_out(
    reasons: Iterable[str],
    timeout: float | None,
    *,
    noun: str = "sentences",
    outcome: str = "recorded as failed with a deadline error",
) -> None:
    """Say on stderr how many sentence runs a deadline cut off, by deadline.

    ``reasons``: the cut results' ``errors["deadline"]``; each is ``--timeout`` or the sentence's
    default deadline (named with its seconds).
    """
    for reason, count in Counter(reasons).items():
        said = (
            f"after --timeout {timeout:g} s"
            if reason == DEADLINE_ERROR and timeout is not None
            else markup(reason.removeprefix("not finished "))
        )
        make_console(stderr=True).print(
            f"[yellow]timeout:[/] {count} {noun} unfinished {said}; {outcome}",
            highlight=False,
            soft_wrap=True,
        )


def _timed_out(results: list[FinalResult], timeout: float | None) -> None:
    """:func:`say_timed_out` of the results a deadline cut off (marked failed, the deadline named)."""
    say_timed_out((r.errors["deadline"] for r in results if "deadline" in r.errors), timeout)


def _one_sentence(
    text: str, runner: str | Model | None, cfg: Any, timeout: float | None, spec: Any
) -> FinalResult:
    """``moot absa SENTENCE``: the steps as they run (and the endpoints' counters), then the result."""
    used: list[Model] = []
    with _StageProgress(make_console(stderr=True)) as progress:

        def one(m: Model) -> Awaitable[FinalResult]:
            progress.endpoints = m.endpoint_stats
            used.append(m)
            return run_absa(text, model=m, config=cfg, on_progress=progress, timeout_s=timeout, store=spec)

        res = run_with_model(runner, one)
    print_endpoints(make_console(stderr=True), used[0].endpoint_stats() if used else [])
    return res


def _local_batch(
    items: list[tuple[str, str]],
    out: TextIO,
    runner: str | Model | None,
    cfg: Any,
    concurrency: int,
    console: Console,
    spec: Any,
    timeout: float | None,
) -> list[FinalResult]:
    """``moot absa --input`` in this process; each endpoint's limit range and 429s said at the end."""
    used: list[Model] = []

    def batch(m: Model) -> Awaitable[tuple[list[FinalResult], list[dict[str, Any]]]]:
        used.append(m)
        return _batch(items, out, m, cfg, concurrency, console, spec, timeout=timeout)

    results, _ = run_with_model(runner, batch)
    print_endpoints(console, used[0].endpoint_stats() if used else [])
    return results


class _StageProgress:
    """``moot absa`` on one sentence: the running step (a spinner on a terminal), a line as each ends.

    Used as the pipeline's ``on_progress``; printed on stderr, so ``--json`` output stays clean.
    """

    def __init__(self, console: Console) -> None:
        self.console = console
        self.status = console.status("starting", spinner="dots")
        self.endpoints: Callable[[], list[dict[str, Any]]] | None = None
        """Reads the model endpoints' counters (requests in flight, limit, 429s) for the status."""

    def __enter__(self) -> _StageProgress:
        self.status.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.status.stop()

    def __call__(self, name: str, step: TraceStep | None) -> None:
        if step is None:
            stats = self.endpoints() if self.endpoints is not None else []
            self.status.update(f"{name} …  {endpoint_line(stats)}" if stats else f"{name} …")
            return
        self.console.print(clean(step.line()), markup=False, style=None if step.ok else "red", soft_wrap=True)


def _rerun(
    from_run: str | None,
    replay: bool,
    store: Path | None,
    *,
    sentence: str | None,
    input_file: Path | None,
    model: str | None,
    ray_address: str | None,
    trust_edited: bool = False,
) -> tuple[RecordedAbsa | None, ReplayModel | None]:
    """``--from RUN_ID`` (and ``--replay``): the recorded run, and the model of its replies.

    Raises:
        UsageError: --replay without --from, --from with a sentence or --input, --replay with
            --model or --ray, or a run that cannot be re-run (named).
    """
    if from_run is None:
        if replay:
            raise UsageError("--replay replays a recorded run: give --from RUN_ID")
        return None, None
    if sentence is not None or input_file is not None:
        raise UsageError("--from re-runs the recorded sentences: give no SENTENCE or --input with it")
    recorded = recorded_absa(from_run, store, trust_edited=trust_edited)
    if not replay:
        if recorded.model == "replay" and model is None:  # a replay of replies from several models
            raise UsageError(f"run {recorded.id[:8]} was a replay: give --model to run it live")
        return recorded, None
    if model is not None:
        raise UsageError("--replay answers every request from the record: it takes no --model")
    if ray_address is not None:
        raise UsageError("--replay answers from this process's copy of the record: it cannot run on --ray")
    if recorded.results is None:
        raise UsageError(f"run {recorded.id[:8]} stored no result: there are no replies to replay")
    return recorded, ReplayModel.from_absa(recorded.results)


def _said_missing(replayer: ReplayModel | None) -> None:
    """After a replay: say on stderr what the record did not hold (each named; nothing was sent)."""
    if replayer is None:
        return
    console = make_console(stderr=True)
    console.print(
        f"replay: {replayer.replayed} replies from the record, 0 requests sent", style="dim", highlight=False
    )
    for who in replayer.missing:
        where = "" if who.get("item") is None else f" {who['item']}"
        console.print(
            f"replay: no recorded reply for {clean(str(who['speaker']))} "
            f"({who['phase']}, round {who['round']}) of sentence{where}: {clean(str(who.get('sentence')))!r}",
            style="yellow",
            markup=False,
            soft_wrap=True,
        )


def _with_budget(cfg: AbsaConfig, budget_usd: float | None) -> AbsaConfig:
    """``cfg`` with ``--budget-usd`` (validated again, so the debate's protocol carries it)."""
    if budget_usd is None:
        return cfg
    return AbsaConfig.model_validate(cfg.model_dump() | {"budget_usd": budget_usd})


def register(app: typer.Typer) -> None:
    """Add ``absa`` to ``app`` (``absa-eval`` lives in :mod:`moot.cli.absa_eval`)."""

    @app.command("absa")
    def absa_cmd(
        sentence: Annotated[str | None, typer.Argument(help="The sentence to analyse.")] = None,
        config: Annotated[
            str | None,
            typer.Option(help="Config YAML, or a shipped name (default, abl_no_debate, patch...)."),
        ] = None,
        model: Annotated[
            str | None, typer.Option(help="Model spec, e.g. local or openai:gpt-4o-mini.")
        ] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print the full result as JSON.")] = False,
        input_file: Annotated[
            Path | None, typer.Option("--input", help="Batch: JSONL file of sentences.")
        ] = None,
        output: Annotated[Path | None, typer.Option(help="Batch: JSONL file to write results to.")] = None,
        concurrency: Annotated[
            int, typer.Option(min=1, max=MAX_CONCURRENCY, help="Batch: sentences in flight at once.")
        ] = 1,
        report: Annotated[
            bool, typer.Option(help="Batch: print the debate metrics report at the end.")
        ] = False,
        ray_address: RayOption = None,
        ray_workers: RayWorkersOption = None,
        store: StoreOption = None,
        no_store: NoStoreOption = False,
        allow_outside_paths: AllowOutsideOption = False,
        timeout: Annotated[
            float | None,
            typer.Option(
                "--timeout",
                min=0.1,
                help="Seconds for the sentence (or the whole batch); what is unfinished then is "
                "recorded as failed with a deadline error (exit 1). Without it each sentence has "
                "a default deadline sized for the config and model: on a remote model 300 s for "
                "its stage calls plus the debate's budget (600 s with a shipped debate config); on "
                "local an estimate of every call at its measured speed.",
            ),
        ] = None,
        cache: CacheOption = False,
        cache_file: CacheFileOption = None,
        cache_expiry: CacheExpiryOption = None,
        model_concurrency: ModelConcurrencyOption = None,
        from_run: Annotated[
            str | None,
            typer.Option(
                "--from",
                help="Re-run a stored ABSA run (its id or a unique prefix): its sentence, or its "
                "batch's sentences (then give --output), with its config and model; "
                "--config and --model given win.",
            ),
        ] = None,
        replay: Annotated[
            bool,
            typer.Option(
                "--replay",
                help="With --from: answer each request with the reply the run recorded (0 requests); "
                "a reply it never recorded fails its stage, named (exit 1), never sent.",
            ),
        ] = False,
        trust_edited: TrustEditedOption = False,
        budget_usd: Annotated[
            float | None,
            typer.Option(
                "--budget-usd",
                min=0.000001,
                help="US dollars each sentence's debate may cost; past it the debate falls back "
                "(budget, exit 1). Needs the model's price.",
            ),
        ] = None,
        judge_blind: JudgeBlindOption = False,
        judge_shuffle: JudgeShuffleOption = False,
        judge_audit: JudgeAuditOption = False,
        judge_swap_robust: JudgeSwapRobustOption = False,
    ) -> int:
        """Aspect-based sentiment of one sentence, or of a JSONL batch, through the debate pipeline.

        Exit code: 0 complete, 1 a sentence had failed calls or hit --timeout, 2 usage error.
        """
        apply_cache_options(cache, cache_file, cache_expiry, ray_address=ray_address)
        apply_model_concurrency(model_concurrency)
        allow_outside(allow_outside_paths)
        if sentence is not None:
            check_text(sentence, "the sentence")
        if output is not None:  # before any model loads or runs
            check_output_file(output, "--output file")
        recorded, replayer = _rerun(
            from_run,
            replay,
            store,
            sentence=sentence,
            input_file=input_file,
            model=model,
            ray_address=ray_address,
            trust_edited=trust_edited,
        )
        cfg = _with_budget(
            load_config(config if config is not None or recorded is None else recorded.config), budget_usd
        )
        cfg = cfg.with_judging(judging_options(judge_blind, judge_shuffle, judge_audit, judge_swap_robust))
        runner: str | Model | None = model
        extra: dict[str, Any] = {}  # what the record adds: the run this one re-runs or replays
        if recorded is not None:
            live = (recorded.model or "").removeprefix("replay:") or None  # a replay's: the model replayed
            runner = replayer if replayer is not None else model or live
            extra["from_run"] = recorded.id
            extra |= trusted_edit(recorded.id)  # an edited record used under --trust-edited says so
            if replay:
                extra["replay"] = {"from_run": recorded.id}
            if not recorded.batch:
                sentence = recorded.sentences[0][1]
        spec = store_spec(store, enabled=not no_store)  # the pipeline records itself
        if input_file is None and (recorded is None or not recorded.batch):
            if sentence is None or not sentence.strip():
                raise UsageError("give a SENTENCE, or --input FILE.jsonl --output FILE.jsonl")
            with annotate(config=extra or None):
                res = _one_sentence(sentence, runner, cfg, timeout, spec)
            if as_json:
                typer.echo(safe_json(res.model_dump_json(indent=2)))
            else:
                print_absa_result(res, make_console())
            _timed_out([res], timeout)
            _said_missing(replayer)
            return _exit.for_absa([res])
        if sentence is not None:
            raise UsageError("give either a SENTENCE or --input, not both")
        if output is None:
            raise UsageError(
                "--input needs --output FILE.jsonl"
                if recorded is None
                else "--from a batch needs --output FILE.jsonl"
            )
        if recorded is not None:
            items, source = recorded.sentences, f"run {recorded.id[:8]}"
        else:
            assert input_file is not None
            items, source = read_inputs(input_file), str(input_file)
        ray = ray_options(ray_address, ray_workers, concurrency)
        console = make_console(stderr=True)
        where = {"input": source, "output": str(output)} | extra
        with (
            annotate(title=source, config=where),
            # Results go to a hidden file renamed at the end: a batch that fails at the start leaves
            # nothing, an interrupted one keeps the sentences it finished.
            staged_output(output, "--output file", keep_partial=True) as out,
        ):
            if ray is None:
                results = _local_batch(items, out, runner, cfg, concurrency, console, spec, timeout)
            else:  # the model is built on each worker, never loaded here
                assert not isinstance(runner, Model)
                results, _ = aio.run(
                    _batch(items, out, runner, cfg, concurrency, console, spec, ray, timeout=timeout)
                )
            failed = sum(r.failed for r in results)
        console.print(f"wrote {len(results)} results to {output} ({failed} with failed calls)")
        _said_missing(replayer)
        _timed_out(results, timeout)
        if report:
            typer.echo(clean(format_report(compute_metrics(results))))
        return _exit.for_absa(results)
