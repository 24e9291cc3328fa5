"""``moot absa-eval``: aspect-tuple P/R/F1 and sentence-label accuracy on labelled data.

Runs the ABSA pipeline (and its ablations, or the configs named by ``--configs``) over a
labelled dataset: moot JSONL, SemEval XML, or the sentences shipped with moot (``builtin``).
Writes ``predictions.jsonl`` (one line a sentence and config) and ``metrics.json`` with ``--out``.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, TextIO

import typer
from rich.console import Console
from rich.markup import escape

import moot.cli._exit as _exit

from ..absa import (
    FinalResult,
    ablations,
    evaluate,
    format_report,
    format_table,
    load_config,
)
from ..absa.config import AbsaConfig
from ..absa.dataset import ConflictRule, Dataset, read_dataset
from ..absa.evaluate import EvalScores, prediction
from ..app import store_spec
from ..errors import UsageError
from ..models import resolve_model, run_with_model
from ..observe import annotate
from ._cache_options import CacheExpiryOption, CacheFileOption, CacheOption, apply_cache_options
from ._console import make_console, print_table, progress_bar
from ._io import (
    MAX_CONCURRENCY,
    AllowOutsideOption,
    allow_outside,
    check_output_dir,
)
from ._model_options import ModelConcurrencyOption, apply_model_concurrency
from ._safe import clean, markup, safe_json
from ._store_options import NoStoreOption, StoreOption
from .absa import say_timed_out

__all__ = ["BUILTIN_DATA", "absa_eval_cmd", "register"]


def register(app: typer.Typer) -> None:
    """Add ``absa-eval`` to ``app``."""
    app.command("absa-eval")(absa_eval_cmd)


def _eval_configs(base: AbsaConfig, names: str | None, with_ablations: bool) -> dict[str, AbsaConfig]:
    """The configs ``absa-eval`` runs.

    ``--configs`` names (ablations of ``base``, shipped names or YAML files), else ``base`` and,
    with ``--ablations``, its two ablations.
    """
    pool = ablations(base)
    if names is None:
        return pool if with_ablations else {base.name: base}
    out: dict[str, AbsaConfig] = {}
    for name in (n.strip() for n in names.split(",")):
        if name:
            chosen = pool[name] if name in pool else load_config(name)
            out[chosen.name] = chosen
    if not out:
        raise UsageError("--configs names no config; e.g. --configs default")
    return out


def _open_predictions(out: Path | None) -> TextIO | None:
    """``OUT/predictions.jsonl`` opened for writing (lines are flushed as sentences finish)."""
    if out is None:
        return None
    try:
        out.mkdir(parents=True, exist_ok=True)
        return (out / "predictions.jsonl").open("w", encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write to --out {out}: {exc.strerror or exc}") from None


def _drop_empty_predictions(out: Path, created: bool) -> None:
    """Tidy ``out`` after a run that failed, leaving no empty files behind.

    ``predictions.jsonl`` goes if no sentence reached it (finished sentences' lines are kept),
    and ``out`` too if this run made it and it is now empty.
    """
    path = out / "predictions.jsonl"
    with contextlib.suppress(OSError):
        if path.stat().st_size == 0:
            path.unlink()
            if created:
                out.rmdir()  # fails, and is left, if anything else is in it


class _ProgressLines:
    """Progress for a log or a pipe: a plain line per config every ``every`` seconds, and at its end."""

    def __init__(self, console: Console, totals: dict[str, int], every: float = 10.0) -> None:
        self.console, self.totals, self.every = console, totals, every
        self.counts = dict.fromkeys(totals, 0)
        self.started = self.last = time.monotonic()

    def __call__(self, name: str) -> None:
        self.counts[name] += 1
        now = time.monotonic()
        if self.counts[name] == self.totals[name] or now - self.last >= self.every:
            self.last = now
            done, total = self.counts[name], self.totals[name]
            elapsed = now - self.started
            self.console.print(
                f"absa-eval: {name} {done}/{total} sentences, {elapsed:.0f} s", highlight=False
            )


@contextlib.contextmanager
def _eval_progress(console: Console, configs: dict[str, Any], n: int) -> Iterator[Callable[[str], None]]:
    """``advance(config name)``: a live bar on a terminal, periodic lines otherwise."""
    if not console.is_terminal:
        yield _ProgressLines(console, dict.fromkeys(configs, n))
        return
    with progress_bar(console) as progress:
        tasks = {name: progress.add_task(name, total=n) for name in configs}
        yield lambda name: progress.advance(tasks[name])


BUILTIN_DATA = "builtin"
"""``absa-eval``'s name for the labelled sentences shipped in the package."""


def _eval_data(data: str, limit: int | None, exclude_conflict: bool, console: Console) -> Dataset:
    """Read ``absa-eval``'s data and say on stderr what was left out."""
    conflict: ConflictRule = "exclude" if exclude_conflict else "keep"
    if data == BUILTIN_DATA:  # shipped inside the package: found outside a source checkout too
        dataset = read_dataset(None, limit=limit, conflict=conflict)
    elif not Path(data.removeprefix("semeval:")).is_file():
        raise UsageError(f"dataset not found: {data} (builtin names the dataset shipped with moot)")
    else:
        dataset = read_dataset(data, limit=limit, conflict=conflict)
    if not dataset.items:
        raise UsageError(f"{data} holds no items")
    for note in dataset.rejected:
        console.print(f"rejected {escape(note)}", highlight=False)
    if dataset.excluded_conflict:
        console.print(f"excluded {dataset.excluded_conflict} aspects labelled conflict", highlight=False)
    return dataset


def _write_metrics(out: Path, data: str, dataset: Dataset, payload: dict[str, Any]) -> None:
    meta = {
        "data": data,
        "sentences": len(dataset.items),
        "rejected": dataset.rejected,
        "excluded_conflict": dataset.excluded_conflict,
    }
    text = json.dumps({"run": meta, "configs": payload}, ensure_ascii=False, indent=2) + "\n"
    (out / "metrics.json").write_text(text, encoding="utf-8")


def _print_scores(scores: dict[str, EvalScores], title: str, report: bool) -> None:
    print_table(make_console(), format_table(scores, title=title))
    if report:
        for name, s in scores.items():
            if s.metrics is not None:
                typer.echo(clean(f"\n== {name} ==\n{format_report(s.metrics)}"))


def absa_eval_cmd(
    data: Annotated[
        str,
        typer.Argument(
            help="Labelled data: moot JSONL, SemEval XML (FILE.xml or semeval:FILE), or builtin: "
            "the 112 labelled sentences shipped with moot (the default)."
        ),
    ] = "builtin",
    config: Annotated[str | None, typer.Option(help="Config YAML or shipped name (the full system).")] = None,
    model: Annotated[str | None, typer.Option(help="Model spec, e.g. local or openai:gpt-4o-mini.")] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="Only the first N sentences.")] = None,
    concurrency: Annotated[
        int, typer.Option(min=1, max=MAX_CONCURRENCY, help="Sentences in flight at once.")
    ] = 1,
    with_ablations: Annotated[
        bool,
        typer.Option("--ablations/--no-ablations", help="Also run abl_no_debate_override and abl_no_debate."),
    ] = True,
    configs_opt: Annotated[
        str | None,
        typer.Option(
            "--configs",
            help="Comma-separated configs to run (names of --config's ablations, shipped names or "
            "YAML files); e.g. --configs default runs one. Overrides --ablations.",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Directory for metrics.json and predictions.jsonl (one line a sentence)."),
    ] = None,
    exclude_conflict: Annotated[
        bool, typer.Option("--exclude-conflict", help="Leave out aspects labelled conflict (counted).")
    ] = False,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout",
            min=0.1,
            help="Seconds for the whole evaluation; unfinished sentences are scored failed (exit 1). "
            "Each sentence also ends at its default deadline (see moot absa --timeout).",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the scores as JSON.")] = False,
    report: Annotated[bool, typer.Option(help="Print each config's debate metrics report.")] = False,
    store: StoreOption = None,
    no_store: NoStoreOption = False,
    allow_outside_paths: AllowOutsideOption = False,
    cache: CacheOption = False,
    cache_file: CacheFileOption = None,
    cache_expiry: CacheExpiryOption = None,
    model_concurrency: ModelConcurrencyOption = None,
) -> None:
    """Aspect-tuple P/R/F1 and sentence-label accuracy, ablations side by side."""
    apply_cache_options(cache, cache_file, cache_expiry)
    apply_model_concurrency(model_concurrency)
    allow_outside(allow_outside_paths)
    console = make_console(stderr=True)
    if out is not None:
        check_output_dir(out, "--out")
    dataset = _eval_data(data, limit, exclude_conflict, console)
    items = dataset.items
    cfg = load_config(config)
    configs = _eval_configs(cfg, configs_opt, with_ablations)
    backend = resolve_model(model)  # an unknown provider fails here, before any progress output
    created = out is not None and not out.exists()
    predictions = _open_predictions(out)
    cut: list[str] = []  # the deadline of each sentence run one cut off
    first_error: list[str] = []  # shown when sentences fail: why, once
    recorded = {"data": data, "limit": limit, "model": model, "exclude_conflict": exclude_conflict}
    try:
        with (
            annotate(title=data, config=recorded),  # evaluate(store=...) records the run
            _eval_progress(console, configs, len(items)) as advance,
        ):

            def done(name: str, i: int, res: FinalResult) -> None:
                if "deadline" in res.errors:
                    cut.append(res.errors["deadline"])
                if res.errors and not first_error:
                    stage, error = next(iter(res.errors.items()))
                    first_error.append(f"{stage}: {error}")
                if predictions is not None:
                    line = prediction(name, items[i], res)
                    predictions.write(json.dumps(line, ensure_ascii=False) + "\n")
                    predictions.flush()
                advance(name)

            scores = run_with_model(
                backend,
                lambda m: evaluate(
                    items,
                    configs,
                    model=m,
                    concurrency=concurrency,
                    on_result=done,
                    timeout_s=timeout,
                    store=store_spec(store, enabled=not no_store),
                ),
            )
            payload = {
                name: {
                    **s.model_dump(mode="json", exclude={"metrics"}),
                    "accuracy": s.accuracy,
                    "majority_accuracy": s.majority_accuracy,
                    "precision": s.precision,
                    "recall": s.recall,
                    "f1": s.f1,
                    "metrics": s.metrics.model_dump(mode="json") if s.metrics else None,
                }
                for name, s in scores.items()
            }
            code = _exit.DEGRADED if cut else _exit.for_eval(scores.values())
    except BaseException:
        if predictions is not None and out is not None:
            predictions.close()
            _drop_empty_predictions(out, created)
        raise
    finally:
        if predictions is not None:
            predictions.close()
    if out is not None:
        _write_metrics(out, data, dataset, payload)
    if as_json:
        typer.echo(safe_json(json.dumps(payload, ensure_ascii=False, indent=2)))
    else:
        _print_scores(scores, f"ABSA evaluation · {Path(data).name} · {len(items)} sentences", report)
    if out is not None:
        console.print(f"metrics: {out / 'metrics.json'}  predictions: {out / 'predictions.jsonl'}")
    say_timed_out(cut, timeout, noun="sentence runs", outcome="scored failed")
    failed = sum(s.failed for s in scores.values())
    if failed:
        total = sum(s.n for s in scores.values())
        why = f"; first: {markup(first_error[0])}" if first_error else ""
        console.print(
            f"[yellow]degraded:[/] {failed} of {total} sentence runs failed and were scored wrong{why}"
        )
    if code != _exit.COMPLETE:
        raise typer.Exit(code)
