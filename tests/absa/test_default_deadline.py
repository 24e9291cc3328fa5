"""Every ABSA run has a deadline: without ``timeout_s`` / ``--timeout`` a sentence gets a default one,
sized by :mod:`moot.deadline` for its config and model, and a model that never answers cannot hold it.

The hung-server tests shrink the mechanism's remote budget (``DEFAULT_TIMEOUT_S``, read when a run
starts) instead of waiting minutes; the sizing itself is checked at its real values.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import moot.deadline
from fault_server import Fate, FaultServer
from moot import models
from moot.absa import load_config, run_absa, run_absa_batch
from moot.absa.pipeline import DEADLINE_ERROR, default_timeout_s
from moot.cli import main
from moot.deadline import DEFAULT_TIMEOUT_S, calls_estimate, local_estimate
from moot.models.testing import FunctionModel
from moot.protocol import load_protocol

pytestmark = pytest.mark.integration

SENTENCE = "The pasta was great but the service was slow."
SHRUNK = 0.4
"""DEFAULT_TIMEOUT_S in the hung-server tests: a default config's sentence then has 2 x 0.4 s."""


@pytest.fixture
def hung(monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultServer]:
    """A real OpenAI-compatible server that reads every request and never answers."""
    with FaultServer(lambda n, body, headers: Fate("hang")) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setattr(moot.deadline, "DEFAULT_TIMEOUT_S", SHRUNK)
        yield server
    models._CACHE.pop("openai:hung", None)  # resolved against this server: must not outlive it


def test_the_default_is_the_stage_calls_budget_plus_the_debates() -> None:
    remote = FunctionModel(lambda request: {})
    default, no_debate = load_config("default"), load_config("abl_no_debate")
    assert default.stage_calls() == [512] * 5
    # Remote: 300 s for the stage calls, and the debate's own budget (the panel sets none: 300 s).
    assert asyncio.run(default_timeout_s(default, remote)) == 2 * DEFAULT_TIMEOUT_S == 600
    assert asyncio.run(default_timeout_s(no_debate, remote)) == DEFAULT_TIMEOUT_S
    # A declared speed: the estimate of the stage calls, and the debate's estimate at that speed.
    slow = FunctionModel(lambda request: {})
    slow.tokens_per_second = 40.0
    expected = calls_estimate([512] * 5, 40.0) + local_estimate(load_protocol("panel"), 40.0)
    assert asyncio.run(default_timeout_s(default, slow)) == pytest.approx(expected)
    assert asyncio.run(default_timeout_s(no_debate, slow)) == pytest.approx(calls_estimate([512] * 5, 40.0))


def test_run_absa_without_a_timeout_ends_against_a_server_that_never_answers(hung: FaultServer) -> None:
    bound = 2 * SHRUNK  # the stage calls' budget plus the debate's, as documented
    started = time.perf_counter()
    result = asyncio.run(run_absa(SENTENCE, model="openai:hung"))
    elapsed = time.perf_counter() - started
    assert bound <= elapsed < bound + 2.0, elapsed  # cut at the default, not before, not minutes later
    assert hung.requests >= 1  # it really asked, and waited
    assert result.failed
    assert result.errors["deadline"] == (
        "not finished within the default deadline of 0.8 s (--timeout S sets another)"
    )


def test_an_explicit_timeout_still_wins_and_says_so(hung: FaultServer) -> None:
    started = time.perf_counter()
    result = asyncio.run(run_absa(SENTENCE, model="openai:hung", timeout_s=0.2))
    assert time.perf_counter() - started < 0.2 + 1.5
    assert result.errors["deadline"] == DEADLINE_ERROR


def test_moot_absa_without_timeout_exits_1_and_says_the_default_cut_it(
    hung: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.perf_counter()
    assert main(["absa", SENTENCE, "--model", "openai:hung", "--json", "--no-store"]) == 1
    assert time.perf_counter() - started < 2 * SHRUNK + 2.0
    captured = capsys.readouterr()
    assert "deadline" in json.loads(captured.out)["errors"]
    assert (
        "timeout: 1 sentences unfinished within the default deadline of 0.8 s (--timeout S sets another); "
        "recorded as failed" in captured.err
    )


def test_a_batch_keeps_its_shared_deadline_and_each_sentence_its_default(
    hung: FaultServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sentences = [SENTENCE, "Nice place.", "Lovely staff."]
    # No --timeout: each sentence ends at its own default (one at a time: about 3 x 0.8 s).
    started = time.perf_counter()
    results = asyncio.run(run_absa_batch(sentences, model="openai:hung", config="abl_no_debate"))
    assert time.perf_counter() - started < 3 * SHRUNK + 2.0
    assert [r.errors["deadline"] for r in results] == [
        "not finished within the default deadline of 0.4 s (--timeout S sets another)"
    ] * 3
    # A batch --timeout shorter than a sentence's default: one deadline for the batch, as before.
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text("".join(json.dumps(s) + "\n" for s in sentences), encoding="utf-8")
    argv = ["absa", "--input", str(inp), "--output", str(out), "--model", "openai:hung", "--no-store"]
    started = time.perf_counter()
    assert main([*argv, "--timeout", "0.3", "--concurrency", "1"]) == 1
    assert time.perf_counter() - started < 0.3 + 2.0
    lines = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert [x["errors"]["deadline"] for x in lines] == [DEADLINE_ERROR] * 3
    assert "timeout: 3 sentences unfinished after --timeout 0.3 s" in capsys.readouterr().err
