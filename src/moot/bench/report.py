"""Write a benchmark's ``report.md`` and PNG plots, and build the terminal table.

The plots need matplotlib (extra ``moot[bench]``), imported only when a plot
is drawn, with the ``Agg`` backend (no display needed).
"""

from __future__ import annotations

import datetime as _dt
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import moot.redact as redact

from ..errors import MissingDependencyError
from .methods import MethodSpec
from .records import ItemRecord
from .runner import BenchConfig, BenchRun
from .stats import EXACT_THRESHOLD, McNemar
from .summary import (
    MethodSummary,
    RoundSummary,
    comparisons,
    judge_audit,
    round_summaries,
    same_samples_hint,
    self_preference,
    summarize,
)
from .tasks import Item

__all__ = [
    "REPORT_FILE",
    "ROUNDS_PLOT",
    "TOKENS_PLOT",
    "Report",
    "build_report",
    "command_line",
    "ensure_plotting",
    "fallback_hint",
    "history_option",
    "render_markdown",
    "rich_table",
    "write_plots",
    "write_report",
]

REPORT_FILE = "report.md"
TOKENS_PLOT = "accuracy_vs_tokens.png"
ROUNDS_PLOT = "accuracy_by_round.png"


@dataclass
class Report:
    """Everything a report shows, computed once from a run's records."""

    config: BenchConfig
    specs: list[MethodSpec]
    n_items: int
    methods: list[MethodSummary]
    rounds: dict[str, list[RoundSummary]]
    tests: list[McNemar]
    failures: int = 0
    complete: bool = True
    model_name: str = ""
    baselines: list[tuple[str, float]] = field(default_factory=list)
    """(name, accuracy) of answers that need no model, on the same items: the majority class, chance."""
    baseline_note: str | None = None
    """Why a baseline is missing (:data:`NO_MAJORITY` when every gold answer is unique), or None."""
    data_notes: tuple[str, ...] = ()
    """What reading the data left out, and why."""
    timed_out: bool = False
    """The last invocation ended at its ``--timeout``."""
    judge_audit: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The swap audit per method (:func:`moot.bench.summary.judge_audit`), when it ran."""
    self_preference: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per method, the judge's win rate for speakers sharing its model (mixed-model runs only)."""


NO_MAJORITY = "no majority baseline: every gold answer is unique"
"""Said where the majority-class row would be when no gold answer repeats (always giving one of
them scores 1/n, a figure of the sample size, not of the task)."""


def majority_class(items: Sequence[Item]) -> tuple[str, int] | None:
    """The most common gold answer of ``items`` and its count; None when no gold answer repeats.

    Ties go to the first in sorted order, so the report (items in their seeded order) and the
    viewer (items in the order their units finished) name the same answer.
    """
    counts = Counter(i.gold for i in items)
    top = max(counts.values(), default=0)
    if top < 2:
        return None
    return min(label for label, count in counts.items() if count == top), top


def baselines(items: Sequence[Item]) -> list[tuple[str, float]]:
    """The majority-class rate of ``items`` and, for multiple choice, the chance rate.

    The majority class is the most common gold answer (:func:`majority_class`); always
    answering it scores this rate, so a method has to beat it to show it read anything. When
    every gold answer is unique there is none (:func:`baseline_note` says so).
    """
    if not items:
        return []
    top = majority_class(items)
    out = [] if top is None else [(f"always `{top[0]}` (majority class)", top[1] / len(items))]
    if all(i.letters for i in items):
        out.append(("chance (a random option)", sum(1 / len(i.letters) for i in items) / len(items)))
    return out


def baseline_note(items: Sequence[Item]) -> str | None:
    """:data:`NO_MAJORITY` when ``items`` have no majority class, else None."""
    return NO_MAJORITY if items and majority_class(items) is None else None


def build_report(run: BenchRun) -> Report:
    """Summaries, per-round figures, paired tests and baselines for a run."""
    by_method: dict[str, list[ItemRecord]] = {s.name: [] for s in run.specs}
    for rec in run.records:
        by_method.setdefault(rec.method, []).append(rec)
    return Report(
        # The model spec as shown: a credential in its URL is masked in the report, table and plots.
        config=run.config.model_copy(update={"model": redact.text(run.config.model)}),
        specs=run.specs,
        n_items=len(run.items),
        methods=[summarize(s.name, by_method[s.name]) for s in run.specs],
        rounds={s.name: round_summaries(s.name, by_method[s.name]) for s in run.specs},
        tests=comparisons(run.specs, run.records),
        failures=len(run.failures),
        complete=run.complete,
        model_name=run.model_name,
        baselines=baselines(run.items),
        baseline_note=baseline_note(run.items),
        data_notes=run.data_notes,
        timed_out=run.timed_out,
        judge_audit=(
            {s.name: judge_audit(by_method[s.name]) for s in run.specs}
            if run.config.judging.get("audit") or run.config.judging.get("swap_robust")
            else {}
        ),
        self_preference={
            s.name: pref for s in run.specs if (pref := self_preference(by_method[s.name])) is not None
        },
    )


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _p(p: float) -> str:
    return f"{p:.3g}" if p >= 0.001 else "<0.001"


def _num(x: float, digits: int = 1) -> str:
    return f"{x:,.{digits}f}"


def command_line(config: BenchConfig, n_items: int | None = None) -> str:
    """The ``moot bench`` command that reproduces a configuration.

    Args:
        config: the run's configuration.
        n_items: the number of items the run had, written as ``--n`` (a task's items are a
            prefix of its seeded order, so ``--n 20`` gives the same 20 items a ``--n 100`` on
            a 20-item file gave); None writes the ``--n`` asked for.
    """
    parts = [
        "moot bench",
        f"--task {config.task}",
        f"--methods {','.join(config.methods)}",
        f"--model {config.model}",
    ]
    n = config.n if n_items is None else n_items
    if n is not None:
        parts.append(f"--n {n}")
    parts.append(f"--seed {config.seed}")
    if config.matched:
        parts.append("--matched")
    if config.temperature is not None:
        parts.append(f"--temperature {config.temperature:g}")
    if config.max_tokens is not None:
        parts.append(f"--max-tokens {config.max_tokens}")
    for name, seconds in config.deadlines.items():
        parts.append(f"--deadline {seconds:g}" if name == "*" else f"--deadline {name}={seconds:g}")
    for option, on in config.judging.items():
        if on:
            parts.append(f"--judge-{option.replace('_', '-')}")
    if config.history is not None:
        parts.append(f"--history {history_option(config)}")
    return " ".join(parts)


def history_option(config: BenchConfig) -> str:
    """The ``--history`` value of a configuration (``window:N``), or ``none``."""
    h = config.history
    return "none" if h is None else f"{h.strategy}:{h.max_tokens}"


def _history_line(config: BenchConfig) -> str:
    """What bounded each prompt's history, for the report's header."""
    if config.history is None:
        return (
            "- history: none set (`--history`): a society prompt that would pass the model's known window "
            "is shortened by the window strategy, with a warning"
        )
    option = history_option(config)
    if config.history.strategy == "summarize":
        return (
            f"- history: `--history {option}`: each preset has it as its protocol's `history` (rounds "
            "before the latest summarized, the summaries' calls counted); single and vote have no history"
        )
    return (
        f"- history: `--history {option}`: each society prompt carries at most "
        f"{config.history.max_tokens} tokens of exchanges (the latest always whole); each preset "
        "has it as its protocol's `history`; single and vote have no history"
    )


def _share(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def judge_audit_lines(audit: dict[str, dict[str, Any]]) -> list[str]:
    """The swap audit's table (docs/judging.md), one row per method."""
    if not audit:
        return []
    lines = [
        "## Judge audit (swap audit of the deciding steps)",
        "",
        "| method | decisions | n (both orders) | position flip rate | 95% CI | first-slot share | "
        "identity flip rate | extra calls |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for method, a in audit.items():
        if not a["decisions"]:
            lines.append(f"| {method} | 0 (no deciding step: decided by rule) | | | | | | 0 |")
            continue
        ci = a["position_flip_ci95"]
        interval = f"[{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "n/a"
        lines.append(
            f"| {method} | {a['decisions']} | {a['n']} | {_share(a['position_flip_rate'])} | {interval} | "
            f"{_share(a['first_slot_share'])} (of {a['first_slot_n']}) | "
            f"{_share(a['identity_flip_rate'])} (of {a['identity_n']}) | {a['extra_calls']} |"
        )
    lines += [
        "",
        "A position flip: the decision changed when only the candidates' order changed (reversed, or "
        "rotated for 3+). Identity flip: it changed when their names were hidden. The same decision is "
        "the answer the task scores (a moderator: its leaning). Extra calls are the audit's, never in "
        "the method's calls or tokens above.",
        "",
    ]
    return lines


def self_preference_lines(prefs: dict[str, dict[str, Any]]) -> list[str]:
    """The judge's win rate for speakers sharing its model, per method (mixed-model runs only)."""
    if not prefs:
        return []
    lines = ["## Self-preference (judge's own model among the speakers)", ""]
    for method, p in prefs.items():
        low, high = p["own_ci95"]
        lines.append(
            f"- {method}: sided with its own model's speakers in {p['own_win_rate']:.2f} of {p['n']} "
            f"decisions (95% CI [{low:.2f}, {high:.2f}]), with the others in {p['other_win_rate']:.2f}"
        )
    return [*lines, ""]


def fallback_hint(methods: Sequence[MethodSummary], config: BenchConfig) -> str | None:
    """What to say when units fell back: how many, why, and how to lift the deadline (None: none)."""
    fell = [m for m in methods if m.fell_back]
    if not fell:
        return None
    counts = ", ".join(f"{m.method} {m.fell_back}" for m in fell)
    timed = [m.method for m in fell if any(r.startswith("timeout") for r, _ in m.fallbacks)]
    text = f"{sum(m.fell_back for m in fell)} units fell back and are not scored ({counts})"
    if timed:
        lifts = " ".join(f"--deadline {name}={_lifted(config, name)}" for name in timed)
        text += (
            f"; a preset runs under its production deadline: lift it and run them again with "
            f"`--resume OUT {lifts}`"
        )
    return text


def _lifted(config: BenchConfig, name: str) -> str:
    """A suggested deadline: ten times the one that cut the units (60 s if unknown)."""
    current = config.deadlines.get(name, config.deadlines.get("*"))
    if current is None:
        from ..protocol import load_protocol

        current = load_protocol(name).timeout
    return f"{10 * current:g}" if current else "60"


def _rate(m: MethodSummary, x: float) -> str:
    """A per-item rate, or n/a for a method with no scored unit (every one fell back)."""
    return _pct(x) if m.n else "n/a"


def _interval(m: MethodSummary) -> str:
    return f"[{_pct(m.ci_low)}, {_pct(m.ci_high)}]" if m.n else ""


def usd(value: float | None) -> str:
    """US dollars to the cent's thousandth (``$0.00123``), ``unknown`` for None."""
    return "unknown" if value is None else f"${value:.5f}"


def _cost(m: MethodSummary) -> str:
    """Mean cost per item with its interval: what accuracy was bought with (unknown: unpriced)."""
    per_item = m.cost_per_item
    if per_item is None or not m.n:
        return "unknown" if m.n else "n/a"
    ci = f" [{usd(m.cost_ci[0])}, {usd(m.cost_ci[1])}]" if m.cost_ci is not None else ""
    return usd(per_item) + ci


def _reasons(m: MethodSummary) -> str:
    shown = "; ".join(f"{count}× {reason}" for reason, count in m.fallbacks[:3])
    more = len(m.fallbacks) - 3
    return shown + (f"; {more} other reasons" if more > 0 else "")


def _results_table(report: Report) -> list[str]:
    lines = [
        "| method | n | accuracy | 95% CI | round-0 vote | parse failures | lenient accuracy | calls/item "
        "| prompt tok/item | completion tok/item | wall s/item | acc % per 1k tok | USD/item [95% CI] "
        "| fell back (not scored) |",
        "|---|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for m in report.methods:
        per_1k = m.accuracy_per_1k_tokens
        lines.append(
            f"| `{m.method}` | {m.n} | {_rate(m, m.accuracy)} | {_interval(m)} "
            f"| {_rate(m, m.round0_accuracy)} | {m.parse_failures} ({_rate(m, m.parse_failure_rate)}) "
            f"| {_rate(m, m.lenient_accuracy)} | {_num(m.per_item(m.calls), 2)} "
            f"| {_num(m.per_item(m.prompt_tokens))} | {_num(m.per_item(m.completion_tokens))} "
            f"| {_num(m.per_item(m.wall_s), 2)} "
            f"| {'n/a' if per_1k is None else _num(per_1k, 2)} | {_cost(m)} | {m.fell_back} |"
        )
    for name, rate in report.baselines:
        lines.append(
            f"| baseline: {name} | {report.n_items} | {_pct(rate)} | | | | | 0 | 0 | 0 | 0 | | 0 | |"
        )
    if report.baseline_note:
        lines.append(f"| {report.baseline_note} | {report.n_items} | | | | | | | | | | | | |")
    return lines


def _extras(report: Report) -> list[str]:
    lines = []
    for m in report.methods:
        bits = []
        if m.fell_back:
            bits.append(f"{m.fell_back} units fell back, not scored ({_reasons(m)})")
        if m.calls_saved:
            share = m.calls_saved / m.nominal_calls if m.nominal_calls else 0.0
            bits.append(f"{m.stopped_early} items stopped early, {m.calls_saved} calls saved ({_pct(share)})")
        if m.cached:
            bits.append(
                f"{m.cached} replies served from the response cache ({m.calls} calls served by the model)"
            )
        if m.replies:
            bits.append(
                f"{_pct(m.replies_in_format / m.replies)} of replies used the requested answer format"
            )
        if m.parse_failures:
            bits.append(
                f"a lenient parser would read {m.lenient_parsed} of the {m.parse_failures} unparsed finals"
            )
        if m.history_shortened:
            what = "exchanges" if m.method.startswith("society:") else "turns"
            bits.append(
                f"{m.history_shortened} calls had their history shortened ({m.history_left_out} earlier "
                f"{what} left out)"
            )
        if m.replies_truncated:
            bits.append(f"{m.replies_truncated} replies cut at max_tokens")
        if m.replies_blank:
            bits.append(
                f"{m.replies_blank} of {m.replies} replies were blank (no text), scored as parse failures"
            )
        if m.notes:
            bits.append(f"{m.notes} items carry a note, see results.jsonl")
        if bits:
            lines.append(f"- `{m.method}`: " + "; ".join(bits) + ".")
    return lines


def _tests_table(tests: Sequence[McNemar]) -> list[str]:
    if not tests:
        return ["No pairs to test (add `single`, or use `--matched` for debates)."]
    lines = [
        "| method A | method B | paired items | both right | only A right | only B right "
        "| Δ accuracy | p | test |",
        "|---|---|--:|--:|--:|--:|--:|--:|---|",
    ]
    for t in tests:
        lines.append(
            f"| `{t.a}` | `{t.b}` | {t.n} | {t.both} | {t.only_a} | {t.only_b} | {100 * t.diff:+.1f} pp "
            f"| {_p(t.p_value)} | {t.test} |"
        )
    return lines


def _rounds_tables(report: Report) -> list[str]:
    lines: list[str] = []
    for name, rounds in report.rounds.items():
        if len(rounds) < 2:
            continue
        lines += [
            f"### `{name}`",
            "",
            "| round | items that ran it | vote accuracy | agent accuracy | agent parse failures "
            "| right→wrong | wrong→right |",
            "|--:|--:|--:|--:|--:|--:|--:|",
        ]
        for r in rounds:
            flips = ("–", "–") if r.round == 0 else (str(r.right_to_wrong), str(r.wrong_to_right))
            lines.append(
                f"| {r.round} | {r.items_ran} | {_pct(r.vote_accuracy)} | {_pct(r.agent_accuracy)} "
                f"| {r.parse_failures} | {flips[0]} | {flips[1]} |"
            )
        lines.append("")
    return lines or ["No multi-round methods in this run.", ""]


def render_markdown(report: Report, *, plots: Sequence[str] = ()) -> str:
    """The text of ``report.md``."""
    c = report.config
    status = "complete" if report.complete else "INCOMPLETE: some item/method units are missing"
    if report.failures:
        status += f"; {report.failures} units failed in the last invocation (`--resume` retries them)"
    if report.timed_out:
        status += "; the last invocation stopped at its `--timeout` (`--resume` continues)"
    hint = fallback_hint(report.methods, c)
    if hint:
        status += f"; FELL BACK: {hint}"
    model = f"`{c.model}`" + (f" (`{report.model_name}`)" if report.model_name not in ("", c.model) else "")
    lines = [
        f"# moot bench: `{c.task}`",
        "",
        f"- model: {model}; items: {report.n_items} (seed {c.seed}); temperature: "
        f"{'backend default' if c.temperature is None else f'{c.temperature:g}'}; max tokens per call: "
        f"{'backend default' if c.max_tokens is None else c.max_tokens}",
        _history_line(c),
        f"- status: {status}",
        f"- written: {_dt.datetime.now(_dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- reproduce: `{command_line(c, report.n_items)}`",
        *[f"- data: {note}" for note in report.data_notes],
        *[f"- same samples: {same}" for same in [same_samples_hint(report.methods, c.temperature)] if same],
        "",
        "## Results",
        "",
        *_results_table(report),
        "",
        *_extras(report),
        "",
        "## Paired tests (McNemar)",
        "",
        *_tests_table(report.tests),
        "",
        "## Rounds and flips",
        "",
        *_rounds_tables(report),
        *judge_audit_lines(report.judge_audit),
        *self_preference_lines(report.self_preference),
    ]
    if plots:
        lines += ["## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    lines += [
        "## How to read this",
        "",
        "- A reply whose answer cannot be parsed is a **wrong** answer, never a correct or random one; "
        "parse failures are also counted on their own. Parsing rules: `moot.bench.parsers`. A reply cut at "
        "the token cap without an explicit final statement is a parse failure.",
        "- Lenient accuracy reads every reply with a lenient parser (last number, last standalone letter, "
        "last label word) and is never used for scoring: its gap to accuracy is what answer format costs.",
        "- 95% intervals are Wilson score intervals. McNemar tests pair the same items: exact two-sided "
        f"binomial below {EXACT_THRESHOLD} discordant pairs, chi-square with continuity correction above.",
        "- Baseline rows need no model: always giving the most common gold answer of these items (the "
        "majority class; none when every gold answer is unique), and for multiple choice a random option. "
        "A method must beat them to show it read the question.",
        "- Round-0 vote: the plurality of the first round's answers. For a debate, compare it with the final "
        "accuracy: the difference is what the debate rounds added. Flips count each agent's change between "
        "consecutive rounds (right→wrong: talked out of a right answer).",
        "- Ties in a vote go to the tied answer given first in agent order; parse failures do not vote.",
        "- A matched vote (`--matched`) has as many calls as the debate's nominal call count.",
        "- A preset runs under its production deadline (`answer`: 10 s on a remote backend) unless "
        "`--deadline [PRESET=]SECONDS` sets another. A unit whose debate fell back (deadline, budget, "
        "failed turn) is counted under *fell back* and left out of every other figure: its answer is "
        "the fallback's, not the method's, so it is never scored, never a parse failure and its unmade "
        "calls are not *saved*; `--resume` runs it again.",
        "- wall s/item is each unit's elapsed time, including waits at the model's concurrency gate; "
        "compare methods at `--concurrency 1` for clean latencies.",
        "",
    ]
    return "\n".join(lines)


def ensure_plotting() -> None:
    """Check that matplotlib is importable.

    Raises:
        MissingDependencyError: it is not (extra ``bench``).
    """
    _pyplot()


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise MissingDependencyError(
            "matplotlib", "bench", "needed for the report's plots; or pass --no-plots to skip them"
        ) from err
    return plt


def _baseline_lines(ax: Any, report: Report) -> None:
    """Draw each baseline as a labelled horizontal line."""
    for (name, rate), style in zip(report.baselines, (":", "-."), strict=False):
        ax.axhline(100 * rate, color="grey", ls=style, lw=1, label=f"baseline: {name.replace('`', '')}")


def _plot_tokens(plt: Any, report: Report, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for m in report.methods:
        if not m.n:
            continue
        acc = 100 * m.accuracy
        yerr = [[acc - 100 * m.ci_low], [100 * m.ci_high - acc]]
        ax.errorbar([m.tokens_per_item], [acc], yerr=yerr, fmt="o", capsize=4, label=m.method)
        ax.annotate(m.method, (m.tokens_per_item, acc), textcoords="offset points", xytext=(6, 4), fontsize=8)
    _baseline_lines(ax, report)
    ax.set_xlabel("tokens per item (prompt + completion)")
    ax.set_ylabel("accuracy (%), 95% Wilson interval")
    ax.set_title(f"{report.config.task}: accuracy vs tokens (n={report.n_items})")
    ax.set_ylim(0, 100)
    ax.margins(x=0.2)
    ax.grid(alpha=0.3)
    if report.baselines:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _plot_rounds(plt: Any, report: Report, path: Path) -> bool:
    multi = {k: v for k, v in report.rounds.items() if len(v) >= 2}
    if not multi:
        return False
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    width = 0.8 / (2 * len(multi))
    for index, (name, rounds) in enumerate(multi.items()):
        xs = [r.round for r in rounds]
        line = left.plot(xs, [100 * r.vote_accuracy for r in rounds], marker="o", label=f"{name} vote")[0]
        left.plot(
            xs,
            [100 * r.agent_accuracy for r in rounds],
            ls="--",
            color=line.get_color(),
            label=f"{name} agents",
        )
        later = rounds[1:]
        base = [r.round - 0.4 + width * (2 * index + 0.5) for r in later]
        right.bar(
            base,
            [r.wrong_to_right for r in later],
            width,
            color=line.get_color(),
            label=f"{name} wrong→right",
        )
        right.bar(
            [b + width for b in base],
            [-r.right_to_wrong for r in later],
            width,
            color=line.get_color(),
            alpha=0.45,
            label=f"{name} right→wrong",
        )
    _baseline_lines(left, report)
    left.set_xlabel("round")
    left.set_ylabel("accuracy (%)")
    left.set_ylim(0, 100)
    left.set_title("accuracy by round")
    left.legend(fontsize=7)
    later_rounds = sorted({r.round for rounds in multi.values() for r in rounds[1:]})
    peak = max(
        [1] + [max(r.wrong_to_right, r.right_to_wrong) for rounds in multi.values() for r in rounds[1:]]
    )
    right.set_xticks(later_rounds)
    right.set_xlim(min(later_rounds) - 0.6, max(later_rounds) + 0.6)
    right.set_ylim(-1.15 * peak, 1.15 * peak)
    right.yaxis.get_major_locator().set_params(integer=True)
    right.axhline(0, color="black", lw=0.8)
    right.set_xlabel("round (flips from the previous round)")
    right.set_ylabel("agent answers flipped (right→wrong below 0)")
    right.set_title("flips")
    right.legend(fontsize=7)
    left.xaxis.get_major_locator().set_params(integer=True)
    for ax in (left, right):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def write_plots(report: Report, out: str | Path) -> list[str]:
    """Draw the PNG plots into ``out``; returns the file names written.

    Raises:
        MissingDependencyError: matplotlib is missing (extra ``bench``).
    """
    plt = _pyplot()
    out = Path(out)
    written = []
    if any(m.n for m in report.methods):
        _plot_tokens(plt, report, out / TOKENS_PLOT)
        written.append(TOKENS_PLOT)
    if _plot_rounds(plt, report, out / ROUNDS_PLOT):
        written.append(ROUNDS_PLOT)
    return written


def write_report(run: BenchRun, out: str | Path, *, plots: bool = True) -> Report:
    """Write ``report.md`` (and the plots unless ``plots`` is False) into ``out``.

    Raises:
        MissingDependencyError: plots were asked for and matplotlib is missing.
    """
    report = build_report(run)
    out = Path(out)
    names = write_plots(report, out) if plots else []
    (out / REPORT_FILE).write_text(render_markdown(report, plots=names), encoding="utf-8")
    return report


RICH_TABLE_DROP = ("s/item", "lenient", "tokens", "round-0", "n")
"""Columns of :func:`rich_table` a narrow terminal may leave out, least important first.

report.md keeps them all."""


def rich_table(report: Report) -> Any:
    """The results as a ``rich.table.Table`` for the terminal."""
    from rich.table import Table

    table = Table(title=f"moot bench {report.config.task} · {report.config.model} · n={report.n_items}")
    # The fell-back count matters when a unit fell back; a column of zeros would only push the
    # accuracy out of a narrow terminal (report.md keeps it either way).
    fell_back = any(m.fell_back for m in report.methods)
    headers = (
        "method",
        "n",
        *(("fell back",) if fell_back else ()),
        "accuracy [95% CI]",
        "round-0",
        "parse fail",
        "lenient",
        "calls",
        "tokens",
        "s/item",
    )
    for header in headers:
        table.add_column(header, justify="left" if header == "method" else "right", no_wrap=True)
    for m in report.methods:
        table.add_row(
            m.method,
            str(m.n),
            *((str(m.fell_back),) if fell_back else ()),
            f"{_rate(m, m.accuracy)} {_interval(m)}",
            _rate(m, m.round0_accuracy),
            f"{m.parse_failures} ({_rate(m, m.parse_failure_rate)})",
            _rate(m, m.lenient_accuracy),
            _num(m.per_item(m.calls), 2),
            _num(m.tokens_per_item, 0),
            _num(m.per_item(m.wall_s), 2) if not math.isnan(m.wall_s) else "n/a",
        )
    for name, rate in report.baselines:
        blank = ("",) if fell_back else ()
        table.add_row(
            f"baseline: {name.replace('`', '')}", str(report.n_items), *blank, _pct(rate), *[""] * 6
        )
    if report.baseline_note:
        table.add_row(report.baseline_note, str(report.n_items), *([""] * (len(headers) - 2)))
    return table
