"""moot on a local in-process Ray cluster (2 CPUs): same results as without Ray, nothing lost or doubled."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from absa.test_absa_cli import brain, hangs_in_debate
from moot import models
from moot.absa import FinalResult, run_absa_batch
from moot.bench.runner import BenchConfig, load_records, run_bench
from moot.cli import main
from moot.models import FunctionModel, ModelRequest
from moot.runs import RunStore
from moot.scale import (
    MAX_DEATHS,
    Job,
    ModelSource,
    RayOptions,
    run_absa_batch_ray,
    run_bench_ray,
    worker_pool,
)

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'moot[ray]')")

_EXPR = re.compile(r"result of ([0-9+*\-]+)\?")


@pytest.fixture(scope="module", autouse=True)
def cluster() -> Iterator[None]:
    """One local cluster for the module (starting one takes seconds); no dashboard, no network."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # The models below are functions of this test module, which workers cannot import: send them by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield
    ray.shutdown()


def _answer(request: ModelRequest) -> str:
    """Right or wrong by (item, agent, round): deterministic, so runs can be compared record by record."""
    match = _EXPR.search(request.messages[0].content)
    assert match
    a, b, c, d, e, f = (int(x) for x in re.findall(r"\d+", match.group(1)))
    gold = a + b * c + d - e * f
    item = int(str(request.metadata["item"]).rsplit("-", 1)[1])
    agent = int(str(request.metadata["speaker"]).removeprefix("agent"))
    right = (item + agent + int(request.metadata["round"])) % 3 != 0
    return f"The result is ({gold if right else gold + 1})."


def oracle() -> FunctionModel:
    return FunctionModel(_answer, delay=0.01)


def _dying_oracle(flag: str) -> FunctionModel:
    """The worker that first reaches item 5 dies there (its process exits), once in the whole run."""

    def fn(request: ModelRequest) -> str:
        if str(request.metadata["item"]).endswith("-5"):
            try:
                os.close(os.open(flag, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                pass
            else:
                os._exit(1)
        return _answer(request)

    return FunctionModel(fn, delay=0.01)


def _comparable(path: Path) -> list[dict[str, Any]]:
    """The units, sorted, without their timings (``wall_s``, each answer's ``latency_s``...)."""
    records = sorted(load_records(path / "results.jsonl"), key=lambda r: (r.item_id, r.method))
    return [_untimed(r.model_dump()) for r in records]


def _untimed(data: Any) -> Any:
    if isinstance(data, dict):
        # sha256: the whole record's, its times included
        return {k: _untimed(v) for k, v in data.items() if not k.endswith(("_s", "_ms")) and k != "sha256"}
    if isinstance(data, list):
        return [_untimed(v) for v in data]
    return data


def _report(path: Path) -> list[str]:
    """``report.md`` without its timing column (wall s/item) and time written: the rest must match."""
    lines, wall = [], None
    for line in (path / "report.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("- written: "):  # the minute it was written: two runs may straddle one
            continue
        cells = line.split("|")
        if " wall s/item " in cells:
            wall = cells.index(" wall s/item ")
        elif not line.startswith("|"):
            wall = None
        elif wall is not None and len(cells) > wall:
            cells[wall] = "-"
        lines.append("|".join(cells))
    assert any("wall s/item" in line for line in lines)
    return lines


CONFIG = BenchConfig(task="arithmetic", methods=["single", "vote:3", "society:2:2"], n=6, seed=3)


def test_bench_on_ray_matches_the_single_machine_run(tmp_path: Path) -> None:
    here = asyncio.run(run_bench(CONFIG, model=oracle(), out=tmp_path / "here"))
    there = asyncio.run(
        run_bench_ray(CONFIG, model=oracle, out=tmp_path / "ray", ray=RayOptions(workers=2, concurrency=2))
    )
    assert there.complete and not there.failures
    assert _comparable(tmp_path / "ray") == _comparable(tmp_path / "here")
    assert [r.item_id for r in there.records] == [r.item_id for r in here.records]
    lines = (tmp_path / "ray" / "results.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 18  # 6 items x 3 methods, each once
    assert [w["worker"] for w in there.workers] == ["w0", "w1"]
    assert sum(w["units"] for w in there.workers) == 18
    assert all(w["units"] > 0 and not w["died"] for w in there.workers)
    assert there.model_name == here.model_name


def test_resume_on_ray_runs_only_the_missing_units(tmp_path: Path) -> None:
    small = CONFIG.model_copy(update={"n": 3})
    asyncio.run(run_bench(small, model=oracle(), out=tmp_path / "out"))
    run = asyncio.run(
        run_bench_ray(CONFIG, model=oracle, out=tmp_path / "out", resume=True, ray=RayOptions(workers=2))
    )
    assert run.complete and run.resumed == 9
    assert sum(w["units"] for w in run.workers) == 9
    assert len((tmp_path / "out" / "results.jsonl").read_text().splitlines()) == 18
    asyncio.run(run_bench(CONFIG, model=oracle(), out=tmp_path / "here"))
    assert _comparable(tmp_path / "out") == _comparable(tmp_path / "here")


def test_a_worker_killed_mid_run_loses_only_its_units(tmp_path: Path) -> None:
    flag = str(tmp_path / "died")
    run = asyncio.run(
        run_bench_ray(
            CONFIG,
            model=lambda: _dying_oracle(flag),
            out=tmp_path / "ray",
            ray=RayOptions(workers=2, concurrency=2),
        )
    )
    assert Path(flag).exists()  # a worker did die
    assert run.complete and not run.failures
    assert len((tmp_path / "ray" / "results.jsonl").read_text().splitlines()) == 18
    died = [w for w in run.workers if w["died"]]
    assert len(died) == 1
    assert len(run.workers) == 3  # a replacement was started
    assert sum(w["units"] for w in run.workers) == 18
    asyncio.run(run_bench(CONFIG, model=oracle(), out=tmp_path / "here"))
    assert _comparable(tmp_path / "ray") == _comparable(tmp_path / "here")


def test_bench_cli_on_ray_records_per_worker_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_provider: Callable[..., None]
) -> None:
    fake_provider("rayoracle", lambda rest: oracle())
    store = tmp_path / "runs.db"
    argv = ["bench", "--methods", "single,vote:3", "--model", "rayoracle:a", "--n", "5", "--seed", "3"]
    argv += ["--no-plots", "--store", str(store)]
    assert main([*argv, "--out", str(tmp_path / "here")]) == 0
    # --ray with no address is --ray auto.
    assert main([*argv, "--out", str(tmp_path / "ray"), "--ray", "--ray-workers", "2"]) == 0
    assert "accuracy" in capsys.readouterr().out
    assert _comparable(tmp_path / "ray") == _comparable(tmp_path / "here")
    assert _report(tmp_path / "ray") == _report(tmp_path / "here")
    runs = RunStore(store).list(kind="bench")
    on_ray = next(r for r in runs if r.config["out"].endswith("ray"))
    assert on_ray.status == "complete"
    assert sum(w["units"] for w in on_ray.summary["workers"]) == 10
    assert on_ray.summary["units"] == 10 and len(RunStore(store).item_keys(on_ray.id)) == 10
    assert "workers" not in next(r for r in runs if r.id != on_ray.id).summary


def test_ray_workers_without_ray_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--model", "test", "--ray-workers", "2", "--out", str(tmp_path), "--no-plots"]) == 2
    assert "--ray-workers needs --ray" in capsys.readouterr().err


def _absa_view(res: FinalResult) -> dict[str, Any]:
    """What an ABSA result decided (its timings left out)."""
    moderator = res.moderator.model_dump(mode="json") if res.moderator is not None else None
    return {
        "label": res.label,
        "confidence": res.confidence,
        "aspects": res.aspects,
        "moderator": moderator,
        "calls": res.usage.calls,
        "errors": res.errors,
        "stage2": res.stage2.model_dump(mode="json"),
    }


SENTENCES = ["The battery life is terrible.", "Nice place.", "Lovely staff.", "The screen is dim.", "Ok."]


def _absa_model() -> FunctionModel:
    return FunctionModel(brain, name="absafake:x")


def test_absa_batch_on_ray_matches_the_single_machine_batch() -> None:
    for module in ("absa.test_absa_cli", "absa.test_dataset_eval", "absa.scripts"):
        ray.cloudpickle.register_pickle_by_value(sys.modules[module])
    seen: list[int] = []
    here = asyncio.run(run_absa_batch(SENTENCES, model=_absa_model(), concurrency=2))
    there = asyncio.run(
        run_absa_batch_ray(
            SENTENCES, model=_absa_model, ray=RayOptions(workers=2), on_result=lambda i, r: seen.append(i)
        )
    )
    assert sorted(seen) == list(range(len(SENTENCES)))  # each sentence came back once
    assert [_absa_view(r) for r in there.results] == [_absa_view(r) for r in here]
    assert there.results[0].label == "negative"
    assert sum(w["units"] for w in there.workers) == len(SENTENCES)


def test_absa_cli_batch_on_ray(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inp = tmp_path / "in.jsonl"
    inp.write_text(
        "".join(json.dumps({"id": f"s{i}", "sentence": s}) + "\n" for i, s in enumerate(SENTENCES))
    )
    store = tmp_path / "runs.db"
    argv = ["absa", "--input", str(inp), "--model", "test", "--store", str(store), "--concurrency", "2"]
    assert main([*argv, "--output", str(tmp_path / "here.jsonl")]) == 0
    assert main([*argv, "--output", str(tmp_path / "ray.jsonl"), "--ray", "auto", "--ray-workers", "2"]) == 0
    assert "wrote 5 results" in capsys.readouterr().err

    def lines(name: str) -> dict[str, dict[str, Any]]:
        rows = [json.loads(x) for x in (tmp_path / name).read_text(encoding="utf-8").splitlines()]
        return {row["id"]: _absa_view(FinalResult.model_validate(row)) for row in rows}

    assert lines("ray.jsonl") == lines("here.jsonl")
    assert len(lines("ray.jsonl")) == 5
    stored = RunStore(store).list(kind="absa")
    on_ray = next(r for r in stored if "workers" in r.summary)
    assert sum(w["units"] for w in on_ray.summary["workers"]) == 5
    units = list(RunStore(store).iter_items(on_ray.id))
    assert len(units) == 5
    # Each sentence's stage requests came back from its worker and are kept, as on one machine.
    assert all(u.data["result"]["stage_requests"][0]["stage"] == "ate" for u in units)


def _hanging_absa_model() -> FunctionModel:
    return FunctionModel(hangs_in_debate, name="absahang:x")


def test_absa_batch_on_ray_with_a_timeout() -> None:
    """One deadline for the batch, as on one machine: finished sentences whole, the rest failed."""
    for module in ("absa.test_absa_cli", "absa.test_dataset_eval", "absa.scripts"):
        ray.cloudpickle.register_pickle_by_value(sys.modules[module])
    # One worker, one sentence at a time: the zqx sentence hangs in its debate until the deadline,
    # and the sentence queued behind it is never sent.
    sentences = ["Nice place.", "The zqx hinge is terrible.", "Lovely staff."]
    batch = asyncio.run(
        run_absa_batch_ray(sentences, model=_hanging_absa_model, ray=RayOptions(workers=1), timeout_s=3.0)
    )
    first, hung, queued = batch.results
    assert not first.errors and first.trace and not first.failed
    assert hung.failed and "deadline" in hung.errors and "debate" in hung.errors
    assert hung.trace and hung.usage.attempts > 0  # stage 1 finished; the cut debate's requests count
    assert queued.failed and "deadline" in queued.errors and not queued.trace and queued.usage.calls == 0
    assert batch.workers[0]["units"] == 2  # the queued sentence never went to the worker


def test_absa_cli_batch_on_ray_with_a_timeout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text('"Nice place."\n', encoding="utf-8")
    argv = ["absa", "--input", str(inp), "--output", str(out), "--model", "test", "--no-store"]
    assert main([*argv, "--ray", "auto", "--ray-workers", "1", "--timeout", "30"]) == 0
    assert "wrote 1 results" in capsys.readouterr().err
    assert len(out.read_text(encoding="utf-8").splitlines()) == 1


def _poison_oracle() -> FunctionModel:
    """Item 5 kills every worker that runs it: a unit that must be given up, not retried forever."""

    def fn(request: ModelRequest) -> str:
        if str(request.metadata["item"]).endswith("-5"):
            os._exit(1)
        return _answer(request)

    return FunctionModel(fn)


def test_a_unit_that_kills_every_worker_is_given_up_and_left_for_resume(tmp_path: Path) -> None:
    config = CONFIG.model_copy(update={"methods": ["single"]})
    run = asyncio.run(
        run_bench_ray(
            config, model=_poison_oracle, out=tmp_path / "out", ray=RayOptions(workers=2), unit_retries=0
        )
    )
    assert not run.complete
    assert [(item, method) for item, method, _ in run.failures] == [("arithmetic-5", "single")]
    assert f"died {MAX_DEATHS} times" in run.failures[0][2]
    assert len(run.records) == 5  # every other unit ran, once
    assert sum(w["died"] for w in run.workers) == MAX_DEATHS


def test_a_model_that_cannot_be_built_on_the_workers_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["bench", "--model", "nosuch:x", "--n", "2", "--out", str(tmp_path / "o"), "--no-plots"]
    assert main([*argv, "--ray", "auto", "--ray-workers", "1"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "moot: error: unknown model provider 'nosuch'; known providers: " + ", ".join(
        sorted(models._PROVIDERS)
    )


def test_bench_cli_resume_on_ray_continues_a_single_machine_run(
    tmp_path: Path, fake_provider: Callable[..., None]
) -> None:
    fake_provider("rayresume", lambda rest: oracle())
    out = tmp_path / "out"
    argv = ["bench", "--methods", "single", "--model", "rayresume:a", "--seed", "3", "--no-plots"]
    assert main([*argv, "--n", "3", "--out", str(out)]) == 0
    assert main(["bench", "--resume", str(out), "--n", "6", "--no-plots", "--ray", "auto"]) == 0
    assert main([*argv, "--n", "6", "--out", str(tmp_path / "here")]) == 0
    assert len((out / "results.jsonl").read_text(encoding="utf-8").splitlines()) == 6
    assert _comparable(out) == _comparable(tmp_path / "here")
    assert _report(out) == _report(tmp_path / "here")


class _Threads(Job):
    """Reports the thread counts of the worker's model."""

    async def run(self, model: models.Model, unit: Any) -> tuple[int, int]:
        return model.n_threads, model.n_threads_batch  # type: ignore[attr-defined]


def test_an_embedded_model_on_a_worker_uses_the_workers_share_of_cpus() -> None:
    """llama.cpp reads prompts with every CPU of the machine by default; on a worker given one CPU
    that second thread took CPU from the other worker's decoding (2 workers: 0.94x one process)."""
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed")
    assert "MOOT_LLAMA_BATCH_THREADS" not in os.environ  # the cluster's workers inherit this process's

    async def go(workers: int) -> list[tuple[int, int]]:
        options = RayOptions(workers=workers)
        async with worker_pool(ray, ModelSource(spec="local"), _Threads(), options) as pool:
            return list(await asyncio.gather(pool.run(0), pool.run(1)))

    assert asyncio.run(go(2)) == [(1, 1), (1, 1)]
    # One worker on the 2-CPU cluster gets both CPUs, and the threads a plain process would use.
    assert asyncio.run(go(1)) == [(1, 2), (1, 2)]


def _slow_schema_model() -> Any:
    from moot.models.testing import SchemaModel

    return SchemaModel(delay=0.3)


def test_a_presets_bench_deadline_reaches_the_workers(tmp_path: Path) -> None:
    """The unit's deadline travels as seconds in the job; each worker's debate falls back at it."""
    config = BenchConfig(task="arithmetic", methods=["answer"], n=2, deadlines={"answer": 0.5})
    run = asyncio.run(
        run_bench_ray(config, model=_slow_schema_model, out=tmp_path / "out", ray=RayOptions(workers=1))
    )
    assert run.complete and len(run.fell_back) == 2
    assert all(r.fallback == "timeout: the debate exceeded 0.5 s" and not r.correct for r in run.records)


def test_a_benchs_judging_options_reach_the_workers(tmp_path: Path) -> None:
    """``moot bench --ray --judge-blind``: each worker's debates judge blind, and each record says
    how its deciding step was judged, as on one machine (the option was dropped on the way)."""
    from moot.models.testing import SchemaModel

    config = BenchConfig(task="arithmetic", methods=["answer"], n=1, judging={"blind": True})
    run = asyncio.run(
        run_bench_ray(config, model=SchemaModel, out=tmp_path / "out", ray=RayOptions(workers=1))
    )
    (record,) = run.records
    assert record.judging and all(j.blind for j in record.judging), record.judging


@pytest.mark.parametrize("workers", [1, 2])
def test_model_concurrency_reaches_the_workers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], workers: int
) -> None:
    """``moot absa --input --ray --model-concurrency 2`` against a real server: the cap is per
    endpoint, so the workers together never have more than 2 requests at it (each its share)."""
    from limit_servers import LimitServer

    inp = tmp_path / "in.jsonl"
    sentences = [f"The soup was cold and the waiter number {i} was rude." for i in range(8)]
    inp.write_text(
        "".join(json.dumps({"id": f"s{i}", "sentence": s}) + "\n" for i, s in enumerate(sentences))
    )
    with LimitServer("ok", latency=0.1) as server:
        argv = [
            "absa", "--input", str(inp), "--model", f"openai:m?base_url={server.url}",
            "--store", str(tmp_path / "runs.db"), "--output", str(tmp_path / "out.jsonl"),
            "--concurrency", "4", "--ray", "auto", "--ray-workers", str(workers), "--model-concurrency", "2",
        ]  # fmt: skip
        main(argv)  # the server's canned reply is no ABSA answer: the exit code is not the point
    capsys.readouterr()
    assert server.requests >= 8  # every sentence reached the server
    assert server.peak <= 2, server.peak
