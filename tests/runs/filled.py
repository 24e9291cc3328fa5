"""A store filled by real CLI runs of every kind, on scripted models (shared by the runs and view tests)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from moot.cli import main
from moot.models import FunctionModel, ModelRequest
from moot.models.testing import ScriptedModel
from moot.runs import RunStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from bench_helpers import oracle  # noqa: E402

XSS = "<script>alert('x')</script>"


def debate_reply(req: ModelRequest) -> dict[str, Any]:
    meta = req.metadata
    if meta["phase"] == "judge":
        return {"final_answer": "Tests first, then the fix.", "citations": ["doc-1"]}
    if meta["speaker"] == "critical" and meta["round"] == 1:
        return {"answer": f"I disagree: zugzwang {XSS}", "citations": ["doc-2"], "confidence": 0.4}
    return {"answer": f"{meta['speaker']} argues round {meta['round']}", "citations": [], "confidence": 0.8}


def broken_reply(req: ModelRequest) -> Any:
    if req.metadata["speaker"] == "critical":
        return "this is not JSON at all"
    return debate_reply(req)


def _arb_ruling() -> dict[str, Any]:
    return {
        "resolution": "agent2_correct",
        "explanation": "B cites the newer source",
        "confidence": 0.7,
        "action": "use_agent2",
    }


def fill(register: Callable[..., None], tmp: Path) -> dict[str, str]:
    """Run every command once (two bench runs) into ``$MOOT_STORE``; returns ``{name: run id}``."""
    from absa.test_absa_cli import brain
    from test_arbitration import QATAR

    register("fill", lambda rest: FunctionModel(debate_reply, name=f"fill:{rest}"))
    register("fillbad", lambda rest: FunctionModel(broken_reply, name=f"fillbad:{rest}"))
    register("fillabsa", lambda rest: FunctionModel(brain, name=f"fillabsa:{rest}"))
    register("fillarb", lambda rest: ScriptedModel([_arb_ruling()]))
    right = oracle(lambda i, a, r: "right" if (i + a + r) % 3 else "wrong")
    wrong = oracle(lambda i, a, r: "right" if (i + a) % 2 else "junk")
    register("fillbench", lambda rest: right if rest == "a" else wrong)

    ids: dict[str, str] = {}

    def newest() -> str:
        with RunStore(os.environ["MOOT_STORE"]) as store:
            return store.list(limit=1)[0].id

    def run(name: str, argv: list[str], code: int = 0) -> None:
        assert main(argv) == code, argv
        ids[name] = newest()

    run("debate", ["run", "Should we write tests first?", "--model", "fill:x", "--json"])
    run("fallback", ["run", "Is this broken?", "--model", "fillbad:x", "--rounds", "1", "--json"], code=1)
    run("absa", ["absa", "The battery life is terrible.", "--model", "fillabsa:x", "--json"])
    batch_in = tmp / "sentences.jsonl"
    batch_in.write_text('{"id": "s1", "sentence": "The battery life is terrible."}\n"Nice place."\n')
    out = tmp / "absa-out.jsonl"
    run("absa_batch", ["absa", "--input", str(batch_in), "--output", str(out), "--model", "fillabsa:x"])
    reports = tmp / "reports.json"
    reports.write_text(json.dumps({"reports": QATAR}))
    run("arbitrate", ["arbitrate", str(reports), "--model", "fillarb:x", "--json"])
    bench = ["bench", "--methods", "single,society:3:2", "--n", "6", "--no-plots"]
    run("bench_a", [*bench, "--model", "fillbench:a", "--out", str(tmp / "bench-a")])
    run("bench_b", [*bench, "--model", "fillbench:b", "--out", str(tmp / "bench-b")])
    return ids
