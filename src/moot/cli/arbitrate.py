"""``moot arbitrate REPORTS.json``: seed 004's contradiction debate from the command line."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

import moot.cli._exit as _exit

from ..app import store_spec
from ..arbitration import DEFAULT_TIMEOUT, SOURCE_AUTHORITY, AgentReport, ArbitrationResult, arbitrate_sync
from ..errors import UsageError
from ..judging import audit_line
from ..models.pricing import cost_text
from ..observe import annotate
from ._cache_options import CacheExpiryOption, CacheFileOption, CacheOption, apply_cache_options
from ._console import make_console, print_table
from ._io import MAX_CONCURRENCY, read_json
from ._judge_options import (
    JudgeAuditOption,
    JudgeBlindOption,
    JudgeShuffleOption,
    JudgeSwapRobustOption,
    judging_options,
)
from ._model_options import ModelConcurrencyOption, apply_model_concurrency
from ._safe import markup, safe_json
from ._store_options import NoStoreOption, StoreOption

__all__ = ["load_reports", "print_arbitration", "register"]


def load_reports(path: Path) -> list[AgentReport]:
    """Read agent reports: a JSON list, or an object with a ``reports`` list.

    Raises:
        UsageError: missing, empty or not UTF-8 file, invalid JSON, or reports that do not validate.
    """
    data: Any = read_json(path, "reports file")
    if isinstance(data, dict):
        data = data.get("reports")
    if not isinstance(data, list):
        raise UsageError(f"{path} must hold a list of reports or {{'reports': [...]}}")
    try:
        return [AgentReport.model_validate(r) for r in data]
    except ValueError as exc:
        first = str(exc).splitlines()
        raise UsageError(f"invalid report in {path}: {' '.join(first[:3])}") from None


def print_arbitration(result: ArbitrationResult, out: Console) -> None:
    """The contradictions, rulings and consensus as tables and text (``moot runs show`` reuses it)."""
    table = Table(title=f"{result.contradictions_found} contradictions · status {result.status}")
    for col in ("metric", "agents", "kind", "severity", "resolution", "confidence"):
        table.add_column(col)
    rulings = {r.contradiction_id: r for r in result.rulings}
    for c in result.contradictions:
        d = rulings[c.id].decision
        # Agent names and metrics come from the reports, resolutions and errors from a model or server.
        table.add_row(
            markup(c.metric_name),
            markup(f"{c.agent1.agent}={c.agent1.value} vs {c.agent2.agent}={c.agent2.value}"),
            markup(c.kind),
            markup(c.severity),
            markup(d.resolution) if d else f"[red]failed[/] {markup(rulings[c.id].error or '')}",
            f"{d.confidence:.2f}" if d else "-",
        )
    print_table(out, table, drop=("kind", "severity"))
    out.print(markup(result.consensus_narrative or "(no contradictions: nothing to arbitrate)"))
    u = result.usage
    out.print(
        f"resolved {result.resolved} · flagged {result.flagged_for_review} · {u.calls} calls · "
        f"{u.total_tokens} tokens · {cost_text(u)} · {result.latency_ms / 1000:.1f}s"
    )
    if result.judge_audit is not None:
        out.print(markup(f"judge audit: {audit_line(result.judge_audit)}"))


def register(app: typer.Typer) -> None:
    """Add ``arbitrate`` to ``app``."""

    @app.command("arbitrate")
    def arbitrate_cmd(
        reports: Annotated[Path, typer.Argument(help="JSON file with the agents' reports.")],
        model: Annotated[
            str | None,
            typer.Option(help="Arbitrator model spec; A,B: the next rules when one fails (judge failover)."),
        ] = None,
        concurrency: Annotated[
            int, typer.Option(min=1, max=MAX_CONCURRENCY, help="Arbitration calls in flight at once.")
        ] = 4,
        as_json: Annotated[bool, typer.Option("--json", help="Print only the result as JSON.")] = False,
        source_authority: Annotated[
            str,
            typer.Option(help="Sources, most authoritative first, comma-separated; others rank after."),
        ] = ",".join(SOURCE_AUTHORITY),
        timeout: Annotated[
            float, typer.Option(min=0.1, help="Seconds for the whole arbitration; unfinished: flagged.")
        ] = DEFAULT_TIMEOUT,
        store: StoreOption = None,
        no_store: NoStoreOption = False,
        cache: CacheOption = False,
        cache_file: CacheFileOption = None,
        cache_expiry: CacheExpiryOption = None,
        model_concurrency: ModelConcurrencyOption = None,
        budget_usd: Annotated[
            float | None,
            typer.Option(
                "--budget-usd",
                min=0.000001,
                help="US dollars each contradiction's arbitration may cost (one that could pass it is "
                "flagged for review). Needs the model's price.",
            ),
        ] = None,
        judge_blind: JudgeBlindOption = False,
        judge_shuffle: JudgeShuffleOption = False,
        judge_audit: JudgeAuditOption = False,
        judge_swap_robust: JudgeSwapRobustOption = False,
    ) -> int:
        """Detect contradictions between agent reports and arbitrate them into a consensus.

        Exit code: 0 complete, 1 a contradiction has no ruling (failed call), 2 usage error.
        """
        apply_cache_options(cache, cache_file, cache_expiry)
        apply_model_concurrency(model_concurrency)
        parsed = load_reports(reports)
        console = make_console(stderr=True, quiet=as_json)

        def progress(
            stage: str, status: str, data: dict[str, Any] | None = None, latency: float | None = None
        ) -> None:
            if status == "progress" and data:
                console.print(f"[dim]arbitrated {data['done']}/{data['total']}[/]")
            elif status == "complete" and data is not None:
                console.print(f"[bold]{markup(stage)} complete[/]: {markup(data)}")

        with annotate(title=str(reports)):  # recorded by arbitrate(store=...) as one run
            result = arbitrate_sync(
                parsed,
                model=model,
                concurrency=concurrency,
                on_progress=progress,
                source_authority=[s.strip() for s in source_authority.split(",") if s.strip()],
                timeout_s=timeout,
                store=store_spec(store, enabled=not no_store),
                budget_usd=budget_usd,
                **{
                    f"judge_{k}": v
                    for k, v in judging_options(
                        judge_blind, judge_shuffle, judge_audit, judge_swap_robust
                    ).items()
                },
            )
        if as_json:
            typer.echo(safe_json(result.model_dump_json()))
            return _exit.for_arbitration(result)
        out = make_console()
        print_arbitration(result, out)
        return _exit.for_arbitration(result)
