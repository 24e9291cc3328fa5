"""``moot runs``: list, show, export, delete and compare the runs in the store.

::

    moot runs list [--kind K] [--status S] [--model M] [--search WORDS] [--limit N] [--offset N] [--json]
    moot runs show ID [--json]          # the same rendering `moot run` prints live
    moot runs export ID [--format json|jsonl]
    moot runs rm ID [--yes]
    moot runs compare A B [--json]
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
from typing import Annotated, Any, get_args

import typer
from rich.console import Console
from rich.table import Table

from ..app.compare import BenchComparison, as_json, compare_runs
from ..app.records import list_row, read_store, runs_page
from ..errors import UsageError
from ..judging import audit_line
from ..models.pricing import cost_text
from ..runs import RunRecord, RunStatus, RunStore, load_result
from ._console import make_console, print_table
from ._safe import clean, markup, safe_json
from ._store_options import StoreOption

__all__ = ["register", "runs_app"]

runs_app = typer.Typer(
    help="List, show, export, delete and compare recorded runs.", no_args_is_help=True, add_completion=False
)

RUN_KINDS = ("run", "absa", "absa-eval", "arbitrate", "bench")
"""The kinds of run the CLI records (``RunRecord.kind``)."""
RUN_STATUSES: tuple[str, ...] = get_args(RunStatus)

KindOption = Annotated[str | None, typer.Option("--kind", help="run, absa, absa-eval, arbitrate or bench.")]


def _known(value: str | None, option: str, known: tuple[str, ...]) -> None:
    """Reject a filter value no run can have (an empty table would look like "no runs").

    Raises:
        UsageError: naming the known values.
    """
    if value is not None and value not in known:
        raise UsageError(f"unknown {option} {value!r}; known: {', '.join(known)}")


def _open(store: Any) -> RunStore:
    return read_store(store)


def _console() -> Console:
    # Piped output keeps whole ids and titles instead of the 80-column default's ellipses, unless
    # COLUMNS says how wide the reader is (rich reads it, as every other command's console does).
    console = make_console()
    if console.is_terminal or os.environ.get("COLUMNS", "").isdigit():
        return console
    return make_console(width=200)


def _when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")


def _wall(record: RunRecord) -> str:
    return "-" if record.wall_s is None else f"{record.wall_s:.1f}s"


@runs_app.command("list")
def list_cmd(
    kind: KindOption = None,
    status: Annotated[
        str | None, typer.Option(help="running, complete, fell_back, skipped, failed or interrupted.")
    ] = None,
    model: Annotated[str | None, typer.Option(help="Model spec contains this text.")] = None,
    search: Annotated[
        str | None,
        typer.Option(help="Runs holding every word of this in their title, turns, prompts or items."),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most N runs.")] = 50,
    offset: Annotated[int, typer.Option(min=0, help="Skip the first N runs (the next page).")] = 0,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help='One JSON object, as /api/runs answers: {"total", "offset", "limit", "runs"}.'
        ),
    ] = False,
    store: StoreOption = None,
) -> None:
    """Runs, newest first: id, kind, title, model, status, calls, tokens, cost, wall time; 50 at a time."""
    _known(kind, "--kind", RUN_KINDS)
    _known(status, "--status", RUN_STATUSES)
    filters: dict[str, Any] = {"kind": kind, "status": status, "model": model, "search": search}
    with _open(store) as opened:
        runs = opened.list(**filters, limit=limit, offset=offset)
        total = opened.count(**filters)
        rows = [list_row(opened, r) for r in runs]  # a running run's usage: what is stored so far
    if as_json:
        page = runs_page(rows, total=total, offset=offset, limit=limit)
        typer.echo(safe_json(json.dumps(page, ensure_ascii=False)))
        return
    table = Table(
        "id", "started", "kind", "title", "model", "status", "calls", "tokens", "cost", "wall", "score"
    )
    for r in runs:
        title = r.title if len(r.title) <= 48 else r.title[:47] + "…"
        table.add_row(
            r.id[:8],
            _when(r.started_at),
            r.kind,
            markup(title),
            markup(r.model),
            r.status if r.damage is None else f"[red]{r.status} · damaged[/]",
            str(r.usage.calls),
            str(r.usage.total_tokens),
            "?" if r.usage.cost_usd is None else f"${r.usage.cost_usd:.5f}",
            _wall(r),
            "-" if r.score is None else f"{r.score:.3f}",
        )
    console = _console()
    print_table(console, table, drop=("score", "wall", "cost", "tokens", "started", "kind"))
    console.print(_showing(offset, len(runs), total, limit), markup=False, highlight=False)
    for r in runs:  # what is damaged, named (the rest of the list is as stored)
        if r.damage is not None:
            console.print(clean(r.damage), style="red", markup=False, highlight=False, soft_wrap=True)


def _showing(offset: int, shown: int, total: int, limit: int) -> str:
    """``showing 50 of 3,000 (1-50; next: --offset 50)``: where this page sits among the matches."""
    if not shown:
        return f"showing 0 of {total:,}" + (f" (--offset {offset} is past the end)" if total else "")
    line = f"showing {shown:,} of {total:,}"
    if shown < total:
        line += f" ({offset + 1:,}-{offset + shown:,}"
        line += f"; next: --offset {offset + shown}" if offset + shown < total else ""
        line += f"; --limit {limit} per page)"
    return line


def _show_debate(opened: RunStore, record: RunRecord, console: Console) -> None:
    from ..transcript import Event
    from .run import LiveView, print_summary

    live = LiveView(console, None)
    events = [
        Event.model_validate({"kind": stored.kind, **stored.data})
        for stored in opened.events(record.id)
        if stored.kind != "debate_completed"  # its result is the summary below
    ]
    # "… X is thinking" is news while a run goes on: shown only for a turn still in flight.
    done = {(e.speaker, e.round) for e in events if e.kind in ("turn_completed", "judge_completed")}
    for event in events:
        in_flight = record.status == "running" and (event.speaker, event.round) not in done
        if event.kind != "turn_started" or in_flight:
            live(event)
    result = load_result(opened, record.id)
    if result is not None:
        print_summary(console, result)


def _show_bench(opened: RunStore, record: RunRecord, console: Console) -> None:
    from ..app.records import bench_run
    from ..bench.report import RICH_TABLE_DROP, build_report, rich_table

    report = build_report(bench_run(opened, record.id))
    print_table(console, rich_table(report), drop=RICH_TABLE_DROP)
    audits = report.judge_audit or (record.summary or {}).get("judge_audit") or {}
    for method, audit in audits.items():  # the swap audit per method (docs/judging.md)
        console.print(markup(f"judge audit {method}: {audit_line(audit)}"))


def _show_absa_partial(opened: RunStore, record: RunRecord, console: Console) -> None:
    """An ``absa`` run with no result (running or killed): each completed step and debate turn."""
    from ..absa import StageEvent
    from ..transcript import Event
    from .run import LiveView

    live = LiveView(console, None)
    for stored in opened.events(record.id):
        if stored.kind in ("step_started", "step_completed", "stage_output"):
            step = StageEvent.model_validate(stored.data).step
            if step is not None:
                console.print(
                    clean(step.line()), markup=False, style=None if step.ok else "red", soft_wrap=True
                )
        elif stored.kind != "debate_completed":
            live(Event.model_validate({"kind": stored.kind, **stored.data}))
    console.print(f"[yellow]no final result ({record.status})[/]")


def _show_absa(opened: RunStore, record: RunRecord, console: Console) -> None:
    from .absa import print_absa_result

    result = load_result(opened, record.id)
    if result is None and not record.config.get("batch"):
        _show_absa_partial(opened, record, console)
        return
    for res in result if isinstance(result, list) else [result] if result is not None else []:
        if isinstance(result, list):
            console.rule(markup(res.sentence))
        print_absa_result(res, console)


def _show_other(opened: RunStore, record: RunRecord, console: Console) -> None:
    result = load_result(opened, record.id)
    if result is None:
        return
    if record.kind == "arbitrate":
        from .arbitrate import print_arbitration

        print_arbitration(result, console)
    elif record.kind == "absa-eval":
        from ..absa import format_table

        print_table(console, format_table(result, title=f"ABSA evaluation · {record.title}"))


def _header(record: RunRecord, console: Console) -> None:
    console.print(
        f"[bold]{record.kind}[/] run {record.id} · {record.status} · {markup(record.model)} · "
        f"started {_when(record.started_at)} · wall {_wall(record)} · moot {record.moot_version}"
    )
    if record.error:
        console.print(f"[yellow]{markup(record.error)}[/]")
    if record.integrity == "edited":
        console.print(f"[yellow]edited after it was recorded: {markup(', '.join(record.edited))}[/]")
    edited = record.config.get("edited_record")
    if isinstance(edited, dict):  # --from an edited record under --trust-edited
        console.print(f"[yellow]re-ran an edited record of run {markup(str(edited.get('run', ''))[:8])}[/]")
    console.print(f"cost {markup(cost_text(record.usage))}", highlight=False)
    replay, source = record.config.get("replay"), record.config.get("from_run")
    if isinstance(replay, dict):  # moot run/absa --from ID --replay; moot bench --replay DIR|ID
        until = replay.get("until_round")
        then = f" up to round {until}, then live" if until else ""
        console.print(
            f"[dim]replay of run {markup(str(replay.get('from_run') or replay.get('from')))}{then}[/]"
        )
    elif source:
        console.print(f"[dim]re-run of run {markup(str(source))}[/]")


@runs_app.command("show")
def show_cmd(
    run_id: Annotated[str, typer.Argument(metavar="ID", help="A run id or a unique prefix.")],
    as_json: Annotated[bool, typer.Option("--json", help="The run record with its result as JSON.")] = False,
    store: StoreOption = None,
) -> None:
    """Show a run as its command printed it live, from the store."""
    with _open(store) as opened:
        record = opened.get(run_id)
        if record.damage is not None:
            raise UsageError(
                f"{record.damage}: moot runs list shows its other fields; moot runs rm deletes it"
            )
        if as_json:
            data = record.model_dump(mode="json") | {"wall_s": record.wall_s}
            if record.kind in ("bench", "absa-eval") or record.config.get("batch"):
                data["items"] = [i.model_dump(mode="json") for i in opened.iter_items(record.id)]
            typer.echo(safe_json(json.dumps(data, ensure_ascii=False)))
            return
        console = _console()
        _header(record, console)
        show = {"run": _show_debate, "bench": _show_bench, "absa": _show_absa}.get(record.kind, _show_other)
        show(opened, record, console)


@runs_app.command("export")
def export_cmd(
    run_id: Annotated[str, typer.Argument(metavar="ID", help="A run id or a unique prefix.")],
    fmt: Annotated[
        str, typer.Option("--format", help="json: one object; jsonl: the run, then events, then items.")
    ] = "json",
    store: StoreOption = None,
) -> None:
    """Print everything recorded for a run: the record, its events and its items."""
    if fmt not in ("json", "jsonl"):
        raise UsageError(f"--format must be json or jsonl, not {fmt!r}")
    with _open(store) as opened:
        record = opened.get(run_id)
        if record.damage is not None:
            raise UsageError(
                f"{record.damage}: moot runs list shows its other fields; moot runs rm deletes it"
            )
        run = record.model_dump(mode="json")
        events = [e.model_dump(mode="json") for e in opened.events(record.id)]
        items = [i.model_dump(mode="json") for i in opened.iter_items(record.id)]
    if fmt == "json":
        typer.echo(safe_json(json.dumps({"run": run, "events": events, "items": items}, ensure_ascii=False)))
        return
    typer.echo(safe_json(json.dumps({"type": "run", **run}, ensure_ascii=False)))
    for e in events:
        typer.echo(safe_json(json.dumps({"type": "event", **e}, ensure_ascii=False)))
    for i in items:
        typer.echo(safe_json(json.dumps({"type": "item", **i}, ensure_ascii=False)))


def _stdin_is_terminal() -> bool:
    return sys.stdin is not None and sys.stdin.isatty()


@runs_app.command("rm")
def rm_cmd(
    run_id: Annotated[str, typer.Argument(metavar="ID", help="A run id or a unique prefix.")],
    yes: Annotated[
        bool, typer.Option("--yes", help="Delete without asking (needed without a terminal).")
    ] = False,
    store: StoreOption = None,
) -> None:
    """Delete a run with its events and items, after asking (``--yes``: without asking)."""
    with read_store(store) as opened:
        record = opened.get(run_id)
        what = f"run {record.id[:8]} ({record.kind}, {record.status}: {clean(record.title)[:60]})"
        if not yes:
            if not _stdin_is_terminal():
                raise UsageError(
                    f"moot runs rm would delete {what}: pass --yes to delete it without a terminal"
                )
            if not typer.confirm(f"delete {what}?", default=False):
                typer.echo(f"kept {what}")
                raise typer.Exit(1)
        full = opened.delete(record.id)
    typer.echo(f"deleted run {full}")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


@runs_app.command("compare")
def compare_cmd(
    a: Annotated[str, typer.Argument(metavar="A", help="First run id (or prefix).")],
    b: Annotated[str, typer.Argument(metavar="B", help="Second run id (or prefix).")],
    as_json_: Annotated[bool, typer.Option("--json", help="The comparison as JSON.")] = False,
    store: StoreOption = None,
) -> None:
    """Two bench runs (accuracy per method, paired McNemar) or two debates, side by side."""
    with _open(store) as opened:
        cmp = compare_runs(opened, a, b)
    if as_json_:
        typer.echo(safe_json(json.dumps(as_json(cmp), ensure_ascii=False)))
        return
    console = _console()
    title = f"A = {cmp.a.id[:8]} · B = {cmp.b.id[:8]}"
    if cmp.differ:
        _side_by_side(console, cmp.differ, f"settings that differ ({cmp.same} the same)")
    else:
        console.print(f"every setting the same ({cmp.same})", highlight=False)
    if not isinstance(cmp, BenchComparison):
        _side_by_side(console, cmp.rows, title)
        differ = sum(1 for _, x, y in cmp.turns if x is None or y is None or x["text"] != y["text"])
        console.print(f"{differ} of {len(cmp.turns)} turns differ (moot view shows them side by side)")
        return
    _side_by_side(console, cmp.settings, f"{title} · task {cmp.a.config.get('task')}")
    table = Table(
        "method",
        "A",
        "B",
        "B − A",
        "shared",
        "B − A shared",
        "only A right",
        "only B right",
        "McNemar p",
        title="accuracy per method; McNemar on the items both runs finished",
    )
    for m in cmp.methods:
        t = m.test
        tail = ["-"] * 5
        if t is not None:
            p_value = f"{t.p_value:.3g} ({t.test})"
            tail = [str(t.n), _pts(m.shared_diff), str(t.only_a), str(t.only_b), p_value]
        a_cell = f"{_pct(m.a_accuracy)} (n={m.a_n})" if m.a_n else "-"
        b_cell = f"{_pct(m.b_accuracy)} (n={m.b_n})" if m.b_n else "-"
        table.add_row(markup(m.method), a_cell, b_cell, _pts(m.diff), *tail)
    print_table(console, table, drop=("only A right", "only B right", "B − A shared", "shared"))
    for m in cmp.methods:  # the discordant items, to open with `moot view` or `moot runs export`
        for who, found in (("A", m.only_a_items), ("B", m.only_b_items)):
            if found:
                shown = ", ".join(found[:20]) + (f" … ({len(found)} in all)" if len(found) > 20 else "")
                console.print(f"{markup(m.method)}: only {who} right on {markup(shown)}", highlight=False)


def _pts(diff: float | None) -> str:
    return "-" if diff is None else f"{100 * diff:+.1f} pts"


def _side_by_side(console: Console, rows: list[tuple[str, str, str]], title: str) -> None:
    """``(field, A, B)`` rows; the fields where the runs differ are marked."""
    table = Table("", "A", "B", title=title)
    for name, x, y in rows:
        table.add_row(name, markup(x), markup(y), style=None if x == y else "bold")
    print_table(console, table)


def register(app: typer.Typer) -> None:
    """Add ``runs`` to ``app``."""
    app.add_typer(runs_app, name="runs")
