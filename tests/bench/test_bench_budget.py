"""``moot bench --budget-usd``: no unit starts that could pass it; the rest is left for --resume."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from bench_helpers import oracle, untimed

from moot.bench.runner import BenchConfig, run_bench
from moot.cli import main
from moot.errors import UsageError
from moot.models import FunctionModel
from moot.models.pricing import Price

METHODS = ["single", "vote:3", "society:3:2"]


def right(item: int, agent: int, round_: int) -> str:
    return "right" if (item + agent + round_) % 3 else "wrong"


def _priced() -> FunctionModel:
    model = oracle(right)
    model.price = Price(1.0, 2.0)  # a test double with a price: its words are billed as tokens
    return model


def test_a_budget_leaves_the_rest_for_resume_which_completes_identically(tmp_path: Path) -> None:
    config = BenchConfig(task="arithmetic", methods=METHODS, n=12, concurrency=4)
    clean = asyncio.run(run_bench(config, model=_priced(), out=tmp_path / "clean"))
    total = sum(r.cost_usd or 0 for r in clean.records)
    assert clean.complete and total > 0 and all(r.cost_source == "price=" for r in clean.records)

    budget = total / 2
    out = tmp_path / "run"
    cut = asyncio.run(run_bench(config.model_copy(update={"budget_usd": budget}), model=_priced(), out=out))
    spent = sum(r.cost_usd or 0 for r in cut.records)
    assert 0 < spent <= budget
    assert cut.budget_left > 0 and not cut.complete
    assert cut.budget_left == 36 - len(cut.records)

    more = config.model_copy(update={"budget_usd": total})
    resumed = asyncio.run(run_bench(more, model=_priced(), out=out, resume=True))
    assert resumed.complete and resumed.budget_left == 0
    assert sorted(untimed(r) for r in resumed.records) == sorted(untimed(r) for r in clean.records)


def test_a_budget_needs_the_models_price(tmp_path: Path) -> None:
    config = BenchConfig(
        task="arithmetic", methods=["single"], n=2, model="openai:unlisted-9b", budget_usd=1.0
    )
    with pytest.raises(UsageError, match="needs the model's price"):
        asyncio.run(run_bench(config, model=_priced(), out=tmp_path / "x"))


def test_dry_run_prints_each_methods_cost_at_most(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "--task", "arithmetic", "--methods", "single,society:3:2", "--n", "10"]
    argv += ["--model", "openai:gpt-4o-mini", "--dry-run", "--out", str(tmp_path / "o"), "--no-plots"]
    assert main(argv) in (0, None)
    out = capsys.readouterr().out
    assert "estimate on openai:gpt-4o-mini (at most" in out
    assert "single: 10 calls" in out and "society:3:2: 60 calls" in out and "total: $" in out
    assert not (tmp_path / "o").exists()  # nothing run, nothing written


def test_matched_by_cost_gives_the_vote_the_debates_money(tmp_path: Path) -> None:
    from moot.bench.summary import comparisons

    config = BenchConfig(
        task="arithmetic",
        methods=["single", "society:3:2"],
        n=4,
        model="openai:gpt-4o-mini",  # priced from its spec; the oracle answers
        matched=True,
        matched_by="cost",
    )
    run = asyncio.run(run_bench(config, model=oracle(right), out=tmp_path / "m"))
    names = [s.name for s in run.specs]
    votes = [s for s in run.specs if s.matches == "society:3:2"]
    assert len(votes) == 1 and votes[0].agents > 6  # histories make a debate's 6 calls dearer than 6 samples
    assert run.config.matched_votes == {"society:3:2": votes[0].agents} and votes[0].name in names
    assert ("society:3:2", votes[0].name) in {(t.a, t.b) for t in comparisons(run.specs, run.records)}
    by_calls = asyncio.run(
        run_bench(config.model_copy(update={"matched_by": "calls"}), model=oracle(right), out=tmp_path / "c")
    )
    assert "vote:6" in [s.name for s in by_calls.specs]
