from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from moot.arbitration import AgentReport, arbitrate, arbitrate_sync, detect_contradictions
from moot.cli import main
from moot.models import ModelRequest
from moot.models.testing import FunctionModel, ScriptedModel


def report(
    agent: str, metric: str, value: float | None, citation: str, conf: float, interp: str | None = None
) -> dict:
    finding: dict[str, Any] = {"metric": metric, "value": value, "citation": citation, "confidence": conf}
    if interp:
        finding["interpretation"] = interp
    return {"agent": agent, "findings": [finding]}


def ruling(resolution: str, action: str, conf: float = 0.8, value: float | None = None) -> dict[str, Any]:
    return {
        "resolution": resolution,
        "explanation": f"because {resolution}",
        "recommended_value": value,
        "recommended_citation": None,
        "confidence": conf,
        "action": action,
    }


QATAR = [
    report("LabourEconomist", "qatar_unemployment_rate", 0.10, "[GCC-STAT Q1-2024]", 0.90),
    report("NationalStrategy", "Qatar unemployment rate", 0.12, "[World Bank 2024]", 0.85),
]


def test_no_contradictions_skips_without_any_llm_call() -> None:
    model = ScriptedModel([])
    events: list[tuple[Any, ...]] = []
    agreeing = [
        report(a, "gdp_growth", 2.0 + d, "[IMF]", 0.8) for a, d in (("A", 0), ("B", 0.04), ("C", 0.09))
    ]
    result = arbitrate_sync(agreeing, model=model, on_progress=lambda *a: events.append(a))
    assert result.status == "skipped" and result.contradictions_found == 0
    assert model.requests == [] and result.usage.calls == 0
    assert events[0] == ("debate", "running") and events[-1][1] == "complete"


def test_detection_rules_metric_names_threshold_and_severity() -> None:
    found = detect_contradictions([AgentReport.model_validate(r) for r in QATAR])
    assert len(found) == 1
    c = found[0]
    # the seed's arithmetic: 0.02 relative to the smaller value 0.10 is 20% (medium); two sources
    assert c.metric_name == "qatar_unemployment_rate" and c.kind == "value+source"
    assert c.relative_difference == 0.2 and c.severity == "medium"
    # exactly 5% of the smaller value is not a contradiction; 100 vs 105.1 is
    five = [report("A", "m", 100.0, "", 0.5), report("B", "m", 105.0, "", 0.5)]
    assert detect_contradictions([AgentReport.model_validate(r) for r in five]) == []
    above = [report("A", "m", 100.0, "", 0.5), report("B", "m", 105.1, "", 0.5)]
    found = detect_contradictions([AgentReport.model_validate(r) for r in above])
    assert [(f.kind, f.relative_difference, f.severity) for f in found] == [("value", 0.051, "low")]
    zero = [report("A", "m", 0.0, "", 0.5), report("B", "m", 0.3, "", 0.5)]
    found = detect_contradictions([AgentReport.model_validate(r) for r in zero])
    assert [(f.kind, f.relative_difference, f.severity) for f in found] == [("value", None, "high")]


def test_confidence_and_source_conflicts() -> None:
    def found(*reports: dict[str, Any]) -> list[tuple[str, str]]:
        return [
            (c.kind, c.severity)
            for c in detect_contradictions([AgentReport.model_validate(r) for r in reports])
        ]

    # the same claim held with very different certainty
    assert found(report("A", "m", 2.0, "[IMF]", 0.9), report("B", "m", 2.0, "[IMF]", 0.5)) == [
        ("confidence", "low")
    ]
    assert found(report("A", "m", 2.0, "[IMF]", 0.9), report("B", "m", 2.05, "[IMF]", 0.7)) == []
    # different sources disagreeing on the value; the same source with two values is a value conflict only
    two_sources = found(
        report("A", "m", 0.10, "[Per extraction: '0.10%' from GCC-STAT Q1-2024]", 0.9),
        report("B", "m", 0.12, "[Per extraction: '0.12%' from World Bank 2024]", 0.9),
    )
    assert two_sources == [("value+source", "medium")]
    same_source = found(
        report("A", "m", 0.10, "[GCC-STAT Q1-2024]", 0.9), report("B", "m", 0.12, "[GCC-STAT 2024]", 0.9)
    )
    assert same_source == [("value", "medium")]
    # equal values from two sources corroborate each other
    assert found(report("A", "m", 3.0, "[GCC-STAT]", 0.8), report("B", "m", 3.0, "[World Bank]", 0.8)) == []


def test_arbitrator_prompt_carries_the_source_authority_order() -> None:
    def follows_authority(req: ModelRequest) -> dict[str, Any]:
        prompt = "\n".join(m.content for m in req.messages)
        assert "SOURCE AUTHORITY (most authoritative first): GCC-STAT > World Bank > other" in prompt
        agent1_gcc = "Agent 1 (LabourEconomist): 0.1 [GCC-STAT" in prompt
        return ruling("agent1_correct" if agent1_gcc else "agent2_correct", "use_agent1", 0.9)

    result = arbitrate_sync(QATAR, model=FunctionModel(follows_authority))
    m = result.metrics[0]
    assert m.status == "resolved" and m.value == 0.10 and m.citation == "[GCC-STAT Q1-2024]"

    seen: list[str] = []

    def record(req: ModelRequest) -> dict[str, Any]:
        seen.append("\n".join(m.content for m in req.messages))
        return ruling("agent2_correct", "use_agent2", 0.9)

    arbitrate_sync(QATAR, model=FunctionModel(record), source_authority=["World Bank", "GCC-STAT"])
    assert "World Bank > GCC-STAT > other" in seen[0]


def test_overall_timeout_flags_unfinished_contradictions() -> None:
    reports = [
        {"agent": "A", "findings": [{"metric": f"m{i}", "value": 1.0, "confidence": 0.9} for i in range(3)]},
        {"agent": "B", "findings": [{"metric": f"m{i}", "value": 2.0, "confidence": 0.5} for i in range(3)]},
    ]
    model = ScriptedModel({"*": [ruling("agent1_correct", "use_agent1")] * 3}, delay=0.3)
    result = arbitrate_sync(reports, model=model, concurrency=1, timeout_s=0.45)
    assert result.status == "timed_out" and result.contradictions_found == 3
    assert [r.decision is not None for r in result.rulings] == [True, False, False]
    assert result.rulings[1].error == "no ruling within the overall timeout of 0.45 s; flagged for review"
    assert (result.resolved, result.flagged_for_review) == (1, 2)
    assert [m.status for m in result.metrics] == ["resolved", "flagged", "flagged"]
    assert result.consensus_narrative.count("flagged for review (no ruling: no ruling within") == 2
    # the call in flight at the timeout was sent: it counts as an attempt, its turn kept (cancelled)
    assert len(model.requests) == result.usage.attempts == 2 and result.usage.calls == 1
    cut = result.rulings[1].turn
    assert cut is not None and cut.cancelled and result.rulings[2].turn is None


def test_conflicting_interpretations_are_contradictions() -> None:
    reports = [
        report("A", "employment trend", None, "[x]", 0.7, "improving steadily"),
        report("B", "employment_trend", None, "[y]", 0.7, "declining since 2023"),
    ]
    found = detect_contradictions([AgentReport.model_validate(r) for r in reports])
    assert len(found) == 1 and found[0].kind == "interpretation" and found[0].severity == "medium"
    both = [report("A", "m", 10.0, "", 0.5, "rising"), report("B", "m", 5.0, "", 0.5, "falling")]
    assert detect_contradictions([AgentReport.model_validate(r) for r in both])[0].severity == "high"


def test_simple_contradiction_resolves_to_the_upheld_agent() -> None:
    model = ScriptedModel([ruling("agent1_correct", "use_agent1", 0.9)])
    result = arbitrate_sync(QATAR, model=model)
    assert result.status == "complete" and result.resolved == 1 and result.flagged_for_review == 0
    m = result.metrics[0]
    assert m.status == "resolved" and m.value == 0.10 and m.agents == ["LabourEconomist"]
    adjusted = {r.agent: r.findings[0].debate for r in result.adjusted_reports}
    assert adjusted["LabourEconomist"]["outcome"] == "confirmed"
    assert adjusted["NationalStrategy"]["outcome"] == "superseded"
    assert adjusted["NationalStrategy"]["accepted_value"] == 0.10
    prompt = model.requests[0].messages[0].content
    assert "Agent 1 (LabourEconomist): 0.1 [GCC-STAT Q1-2024] (confidence: 0.9)" in prompt
    assert result.usage.calls == 1 and result.latency_ms > 0


def test_both_valid_keeps_both_values_with_context() -> None:
    result = arbitrate_sync(QATAR, model=ScriptedModel([ruling("both_valid", "use_both", 0.7)]))
    assert result.metrics[0].status == "both_valid" and result.resolved == 1
    assert (
        "LabourEconomist=0.1" in result.consensus_narrative
        and "because both_valid" in result.consensus_narrative
    )
    assert all(r.findings[0].debate["outcome"] == "both_valid" for r in result.adjusted_reports)


def test_neither_valid_or_failed_call_is_flagged() -> None:
    result = arbitrate_sync(QATAR, model=ScriptedModel([ruling("neither_valid", "flag_for_review")]))
    assert result.flagged_for_review == 1 and result.resolved == 0
    failed = arbitrate_sync(QATAR, model=ScriptedModel(["nonsense", "still nonsense"]))
    assert failed.flagged_for_review == 1 and failed.rulings[0].decision is None
    assert failed.rulings[0].error is not None and "flagged for review" in failed.consensus_narrative


def test_multi_way_contradiction_confidence_weighted() -> None:
    three = [
        report("A", "inflation", 3.0, "[central bank]", 0.9),
        report("B", "inflation", 3.6, "[survey]", 0.6),
        report("C", "inflation", 4.5, "[blog]", 0.4),
    ]

    def judge(req: ModelRequest) -> dict[str, Any]:
        topic = req.messages[0].content
        # A beats everyone; B beats C
        if "Agent 1 (A)" in topic:
            return ruling("agent1_correct", "use_agent1", 0.8)
        return ruling("agent1_correct", "use_agent1", 0.6)

    result = arbitrate_sync(three, model=FunctionModel(judge))
    assert result.contradictions_found == 3 and result.usage.calls == 3
    m = result.metrics[0]
    assert m.status == "resolved" and m.value == 3.0 and m.scores == {"A": 1.6, "B": 0.6}


def test_split_decision_is_flagged() -> None:
    three = [report("A", "x", 1.0, "", 0.5), report("B", "x", 2.0, "", 0.5), report("C", "x", 3.0, "", 0.5)]

    def cycle(req: ModelRequest) -> dict[str, Any]:
        topic = req.messages[0].content
        if "Agent 1 (A)" in topic and "Agent 2 (B)" in topic:
            return ruling("agent1_correct", "use_agent1", 0.8)  # A > B
        if "Agent 1 (A)" in topic:
            return ruling("agent2_correct", "use_agent2", 0.8)  # C > A
        return ruling("agent1_correct", "use_agent1", 0.8)  # B > C

    result = arbitrate_sync(three, model=FunctionModel(cycle))
    assert result.metrics[0].status == "flagged" and result.metrics[0].reason == "split decision"
    assert result.flagged_for_review == 3


def test_ten_plus_contradictions_are_batched_under_the_bound() -> None:
    reports = [
        {"agent": "A", "findings": [{"metric": f"m{i}", "value": 1.0, "confidence": 0.9} for i in range(12)]},
        {"agent": "B", "findings": [{"metric": f"m{i}", "value": 2.0, "confidence": 0.5} for i in range(12)]},
    ]
    model = ScriptedModel({"*": [ruling("agent1_correct", "use_agent1")] * 12}, delay=0.02)
    progress: list[int] = []

    async def cb(
        stage: str, status: str, data: dict[str, Any] | None = None, latency: float | None = None
    ) -> None:
        if status == "progress" and data:
            progress.append(data["done"])

    result = asyncio.run(arbitrate(reports, model=model, concurrency=3, on_progress=cb))
    assert result.contradictions_found == 12 and result.resolved == 12
    assert model.max_in_flight == 3 and progress == list(range(1, 13))


def test_cli_arbitrate_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_provider: Callable[..., None]
) -> None:
    fake_provider("arbfake", lambda rest: ScriptedModel([ruling("agent2_correct", "use_agent2", 0.7)]))
    path = tmp_path / "reports.json"
    path.write_text(json.dumps({"reports": QATAR}))
    assert main(["arbitrate", str(path), "--model", "arbfake:x", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["status"] == "complete" and data["metrics"][0]["agents"] == ["NationalStrategy"]
    bad = tmp_path / "bad.json"
    bad.write_text('{"reports": [{"agent": "A", "findings": [{"value": 1}]}]}')
    assert main(["arbitrate", str(bad)]) == 2
    assert "invalid report" in capsys.readouterr().err
