"""``moot absa`` and ``moot absa-eval``: the ABSA debate pipeline from the command line.

::

    moot absa "The pasta was great but the service was slow." [--config FILE] [--model SPEC] [--json]
    moot absa --input sentences.jsonl --output results.jsonl [--concurrency N] [--report]
    moot absa-eval DATA.jsonl [--config FILE] [--model SPEC] [--limit N] [--no-ablations]
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TextIO

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..absa import (
    FinalResult,
    GoldItem,
    ablations,
    compute_metrics,
    evaluate,
    format_report,
    format_table,
    load_config,
    load_dataset,
    run_absa,
    run_absa_batch,
)
from ..errors import UsageError
from ..models import Model, Usage, run_with_model
from ..runs import Recording, recording
from . import _exit
from ._store_options import NoStoreOption, StoreOption

__all__ = ["read_inputs", "register"]


def read_inputs(path: Path) -> list[tuple[str, str]]:
    """Read ``(id, sentence)`` pairs from a JSONL file.

    Each line is an object with ``sentence`` (or ``text``) and an optional ``id``,
    or a bare JSON string. Blank lines are skipped.

    Raises:
        UsageError: missing file, or a line without a sentence (its number is named).
    """
    if not path.is_file():
        raise UsageError(f"input file not found: {path}")
    out: list[tuple[str, str]] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            data: Any = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path} line {number}: not valid JSON: {exc.msg}") from None
        if isinstance(data, str):
            sentence, ident = data, str(number)
        elif isinstance(data, dict):
            sentence = data.get("sentence") or data.get("text") or ""
            ident = str(data.get("id", number))
        else:
            sentence, ident = "", str(number)
        if not isinstance(sentence, str) or not sentence.strip():
            raise UsageError(f"{path} line {number}: no 'sentence' (or 'text') string")
        out.append((ident, sentence))
    if not out:
        raise UsageError(f"{path} holds no sentences")
    return out


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )


def _print_result(res: FinalResult, console: Console) -> None:
    mod = res.moderator
    console.print(f"[bold]{res.label}[/] (confidence {res.confidence:.2f})  mode={res.mode}")
    if res.aspects:
        table = Table("aspect", "polarity", "confidence", "span")
        for a in res.aspects:
            span = f"{a['start']}:{a['end']}" if a.get("start") is not None else ""
            table.add_row(str(a["aspect"]), str(a["polarity"]), f"{a['confidence']:.2f}", span)
        console.print(table)
    else:
        console.print("[dim]no aspects[/]")
    if mod is not None:
        console.print(
            f"rules {' '.join(mod.applied_rules) or '-'} · stage {mod.selected_stage} · {mod.rationale}"
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
        console.print(f"[red]failed[/] {name}: {err[:200]}")


async def _batch(
    items: list[tuple[str, str]],
    out: TextIO,
    model: str | Model | None,
    config: Any,
    concurrency: int,
    console: Console,
    rec: Recording,
) -> list[FinalResult]:
    with _progress(console) as progress:
        task = progress.add_task("absa", total=len(items))

        def write(i: int, res: FinalResult) -> None:
            # One line per finished sentence, flushed at once, so an interrupted batch keeps its work.
            out.write(
                json.dumps({"id": items[i][0], **res.model_dump(mode="json")}, ensure_ascii=False) + "\n"
            )
            out.flush()
            rec.item(items[i][0], {"index": i, "result": res.model_dump(mode="json")})
            progress.advance(task)

        return await run_absa_batch(
            [s for _, s in items], model=model, config=config, concurrency=concurrency, on_result=write
        )


def _eval_recorder(
    rec: Recording, items: list[GoldItem], advance: Callable[[str], None]
) -> Callable[[str, int, FinalResult], None]:
    """``absa-eval``'s per-result callback: store the sentence (with its gold item), then advance."""

    def done(name: str, i: int, res: FinalResult) -> None:
        gold = items[i]
        data = {"gold": gold.model_dump(mode="json"), "result": res.model_dump(mode="json")}
        rec.item(gold.id, data, part=name, correct=None if res.failed else res.label == gold.label)
        advance(name)

    return done


def register(app: typer.Typer) -> None:
    """Add ``absa`` and ``absa-eval`` to ``app``."""

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
        concurrency: Annotated[int, typer.Option(min=1, help="Batch: sentences in flight at once.")] = 1,
        report: Annotated[
            bool, typer.Option(help="Batch: print the debate metrics report at the end.")
        ] = False,
        store: StoreOption = None,
        no_store: NoStoreOption = False,
    ) -> int:
        """Aspect-based sentiment of one sentence, or of a JSONL batch, through the debate pipeline.

        Exit code: 0 complete, 1 a sentence had failed calls, 2 usage error.
        """
        cfg = load_config(config)
        recorded = {"config": cfg.model_dump(mode="json"), "model": model}
        if input_file is None:
            if sentence is None or not sentence.strip():
                raise UsageError("give a SENTENCE, or --input FILE.jsonl --output FILE.jsonl")
            with recording(
                "absa",
                title=sentence,
                model=model or "local",
                config=recorded | {"sentence": sentence},
                store=store,
                enabled=not no_store,
            ) as rec:
                res = run_with_model(model, lambda m: run_absa(sentence, model=m, config=cfg))
                rec.finish(res, status="fell_back" if res.failed else "complete")
            if as_json:
                typer.echo(res.model_dump_json(indent=2))
            else:
                _print_result(res, Console())
            return _exit.for_absa([res])
        if sentence is not None:
            raise UsageError("give either a SENTENCE or --input, not both")
        if output is None:
            raise UsageError("--input needs --output FILE.jsonl")
        items = read_inputs(input_file)
        console = Console(stderr=True)
        batch = {"batch": True, "input": str(input_file), "output": str(output), "concurrency": concurrency}
        with (
            recording(
                "absa",
                title=str(input_file),
                model=model or "local",
                config=recorded | batch,
                store=store,
                enabled=not no_store,
            ) as rec,
            output.open("w", encoding="utf-8") as out,
        ):
            results = run_with_model(model, lambda m: _batch(items, out, m, cfg, concurrency, console, rec))
            usage = sum((r.usage for r in results), Usage())
            failed = sum(r.failed for r in results)
            summary = {"sentences": len(results), "failed": failed}
            rec.finish(usage=usage, summary=summary, status="fell_back" if failed else "complete")
        console.print(f"wrote {len(results)} results to {output} ({failed} with failed calls)")
        if report:
            typer.echo(format_report(compute_metrics(results)))
        return _exit.for_absa(results)

    @app.command("absa-eval")
    def absa_eval_cmd(
        data: Annotated[Path, typer.Argument(help="Labelled JSONL (see moot/data/absa_sentences.jsonl).")],
        config: Annotated[
            str | None, typer.Option(help="Config YAML or shipped name (the full system).")
        ] = None,
        model: Annotated[
            str | None, typer.Option(help="Model spec, e.g. local or openai:gpt-4o-mini.")
        ] = None,
        limit: Annotated[int | None, typer.Option(min=1, help="Only the first N sentences.")] = None,
        concurrency: Annotated[int, typer.Option(min=1, help="Sentences in flight at once.")] = 1,
        with_ablations: Annotated[
            bool,
            typer.Option(
                "--ablations/--no-ablations", help="Also run abl_no_debate_override and abl_no_debate."
            ),
        ] = True,
        as_json: Annotated[bool, typer.Option("--json", help="Print the scores as JSON.")] = False,
        report: Annotated[bool, typer.Option(help="Print each config's debate metrics report.")] = False,
        store: StoreOption = None,
        no_store: NoStoreOption = False,
    ) -> None:
        """Aspect-tuple P/R/F1 and sentence-label accuracy, ablations side by side."""
        if not data.is_file():
            raise UsageError(f"dataset not found: {data}")
        items = load_dataset(data, limit=limit)
        if not items:
            raise UsageError(f"{data} holds no items")
        cfg = load_config(config)
        configs = ablations(cfg) if with_ablations else {cfg.name: cfg}
        console = Console(stderr=True)
        recorded = {
            "data": str(data),
            "limit": limit,
            "model": model,
            "concurrency": concurrency,
            "configs": {name: c.model_dump(mode="json") for name, c in configs.items()},
        }
        with (
            recording(
                "absa-eval",
                title=str(data),
                model=model or "local",
                config=recorded,
                store=store,
                enabled=not no_store,
            ) as rec,
            _progress(console) as progress,
        ):
            tasks = {name: progress.add_task(name, total=len(items)) for name in configs}

            done = _eval_recorder(rec, items, lambda name: progress.advance(tasks[name]))
            scores = run_with_model(
                model,
                lambda m: evaluate(items, configs, model=m, concurrency=concurrency, on_result=done),
            )
            payload = {
                name: {
                    **s.model_dump(mode="json", exclude={"metrics"}),
                    "accuracy": s.accuracy,
                    "precision": s.precision,
                    "recall": s.recall,
                    "f1": s.f1,
                    "metrics": s.metrics.model_dump(mode="json") if s.metrics else None,
                }
                for name, s in scores.items()
            }
            rec.finish(
                {name: s.model_dump(mode="json") for name, s in scores.items()},
                usage=Usage(calls=sum(s.calls for s in scores.values())),
                summary={name: p["f1"] for name, p in payload.items()},
                score=max((p["f1"] for p in payload.values()), default=None),
            )
        if as_json:
            typer.echo(json.dumps(payload, ensure_ascii=False, indent=2))
            return
        Console().print(format_table(scores, title=f"ABSA evaluation · {data.name} · {len(items)} sentences"))
        if report:
            for name, s in scores.items():
                if s.metrics is not None:
                    typer.echo(f"\n== {name} ==\n{format_report(s.metrics)}")
