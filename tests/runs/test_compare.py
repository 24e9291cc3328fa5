"""``moot runs compare`` and the viewer's compare page on two bench runs with partly shared items."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from moot.app.compare import BenchComparison, compare_runs
from moot.bench.records import ItemRecord
from moot.bench.stats import mcnemar
from moot.cli import main
from moot.runs import RunStore

# Run A: items 1-10, "single" right on 1-7; "vote:3" right on every item.
# Run B: items 3-12, "single" right on 1-4 and 8-12 (so on the shared 3-10: A only on 5-7, B only on 8-10);
# "society:3:2" only in B.
A_SINGLE = {f"i{k}": k <= 7 for k in range(1, 11)}
B_SINGLE = {f"i{k}": k <= 4 or k >= 8 for k in range(3, 13)}


def _unit(item: str, method: str, correct: bool) -> str:
    record = ItemRecord(
        item_id=item,
        method=method,
        gold="42",
        final="42" if correct else "7",
        correct=correct,
        parse_failed=False,
        calls=1,
    )
    return record.model_dump_json()


def _bench(store: RunStore, model: str, n: int, units: dict[str, dict[str, bool]]) -> str:
    config = json.dumps({"task": "arithmetic", "methods": list(units), "model": model, "n": n, "seed": 0})
    run_id = store.create_run("bench", title="arithmetic", model=model, config=config)
    for method, by_item in units.items():
        for item, correct in by_item.items():
            store.put_item(run_id, item, method, _unit(item, method, correct), correct=correct)
    store.update(run_id, status="complete", ended=True)
    return run_id


@pytest.fixture
def runs(tmp_path: Path) -> tuple[Path, str, str]:
    path = tmp_path / "runs.db"
    with RunStore(path) as store:
        a = _bench(store, "m:a", 10, {"single": A_SINGLE, "vote:3": dict.fromkeys(A_SINGLE, True)})
        b = _bench(store, "m:b", 12, {"single": B_SINGLE, "society:3:2": dict.fromkeys(B_SINGLE, False)})
    return path, a, b


def test_accuracy_difference_and_paired_test_on_shared_items(runs: tuple[Path, str, str]) -> None:
    path, a, b = runs
    with RunStore(path) as store:
        cmp = compare_runs(store, a, b)
    assert isinstance(cmp, BenchComparison)
    single, vote, society = cmp.methods
    assert (single.method, vote.method, society.method) == ("single", "vote:3", "society:3:2")
    assert (single.a_n, single.a_correct, single.b_n, single.b_correct) == (10, 7, 10, 7)
    assert single.diff == pytest.approx(0.0)  # the same accuracy over different items...
    assert single.test is not None and single.test.n == 8  # ...paired on the 8 both ran (i3-i10)
    assert single.only_a_items == ("i5", "i6", "i7") and single.only_b_items == ("i8", "i9", "i10")
    assert single.shared_diff == pytest.approx(0.0)
    shared = [f"i{k}" for k in range(3, 11)]
    expected = mcnemar("A:single", "B:single", [A_SINGLE[i] for i in shared], [B_SINGLE[i] for i in shared])
    assert single.test.p_value == pytest.approx(expected.p_value)
    assert vote.test is None and vote.b_n == 0 and vote.diff is None and vote.shared_diff is None
    assert society.test is None and society.a_n == 0
    settings = {k: (x, y) for k, x, y in cmp.settings}
    assert settings["model"] == ("m:a", "m:b") and settings["n"] == ("10", "12")
    assert settings["items run"] == ("10", "10") and settings["units run"] == ("20", "20")


def test_cli_table_json_and_discordant_items(
    runs: tuple[Path, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    path, a, b = runs
    assert main(["runs", "compare", a[:8], b[:8], "--store", str(path), "--json"]) in (0, None)
    data = json.loads(capsys.readouterr().out)
    single = data["methods"][0]
    assert single["shared_diff"] == 0.0 and single["mcnemar"]["only_b_items"] == ["i8", "i9", "i10"]
    assert {s["field"]: s["b"] for s in data["settings"]}["n"] == "12"
    assert main(["runs", "compare", a[:8], b[:8], "--store", str(path)]) in (0, None)
    out = capsys.readouterr().out
    assert "task arithmetic" in out and "m:a" in out and "McNemar" in out
    assert "single: only A right on i5, i6, i7" in out and "single: only B right on i8, i9, i10" in out


def test_viewer_compare_page_links_each_discordant_item_in_both_runs(runs: tuple[Path, str, str]) -> None:
    pytest.importorskip("fastapi", reason="the viewer needs the view extra (fastapi, uvicorn, jinja2)")
    from fastapi.testclient import TestClient

    from moot.view import create_app

    path, a, b = runs
    client = TestClient(create_app(path), base_url="http://127.0.0.1:7575")
    page = client.get("/compare", params={"a": a, "b": b}).text
    assert "Items only one run got right" in page and "B − A shared" in page
    for item in ("i5", "i8"):
        assert f'href="/runs/{a}/items/{item}"' in page and f'href="/runs/{b}/items/{item}"' in page
    assert client.get(f"/runs/{b}/items/i8").status_code == 200  # the links lead to the transcripts
    assert '<tr class="differs"><th>model</th>' in page


def test_settings_that_differ_and_item_by_item(runs: tuple[Path, str, str]) -> None:
    path, a, b = runs
    with RunStore(path) as store:
        cmp = compare_runs(store, a, b)
    assert isinstance(cmp, BenchComparison)
    differ = {name: (x, y) for name, x, y in cmp.differ}
    assert differ["model"] == ("m:a", "m:b") and differ["n"] == ("10", "12")
    assert differ["methods"] == ("single, vote:3", "single, society:3:2")
    assert "seed" not in differ and "task" not in differ and cmp.same >= 3
    by_item = dict(cmp.items)
    assert by_item["i5"]["single"] == (True, False) and by_item["i1"]["single"] == (True, None)
    assert by_item["i12"]["society:3:2"] == (None, False)


def test_two_benches_that_differ_only_in_model_concurrency_say_so(
    tmp_path: Path, fake_provider: Callable[..., None], capsys: pytest.CaptureFixture[str]
) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from bench_helpers import oracle

    fake_provider("cmpconc", lambda rest: oracle(lambda i, a, r: "right" if (i + a) % 2 else "wrong"))
    bench = ["bench", "--methods", "single,vote:3", "--n", "4", "--no-plots", "--model", "cmpconc:x"]
    assert main([*bench, "--out", str(tmp_path / "a")]) == 0
    assert main([*bench, "--out", str(tmp_path / "b"), "--model-concurrency", "2"]) == 0
    with RunStore(os.environ["MOOT_STORE"]) as store:
        b, a = store.list()
        cmp = compare_runs(store, a.id, b.id)
    assert [(name, x, y) for name, x, y in cmp.differ] == [("model_concurrency", "adaptive", "2")]
    capsys.readouterr()
    assert main(["runs", "compare", a.id[:8], b.id[:8]]) == 0
    out = capsys.readouterr().out
    assert "settings that differ" in out and "model_concurrency" in out


def test_a_unit_that_fell_back_is_not_paired(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    with RunStore(path) as store:
        a = _bench(store, "m:a", 3, {"answer": {"i1": True, "i2": True, "i3": True}})
        b = _bench(store, "m:b", 3, {"answer": {"i1": True, "i2": False}})
        fell = ItemRecord.model_validate_json(_unit("i3", "answer", False)).model_copy(
            update={"fallback": "timeout: the debate exceeded 10 s", "final": None}
        )
        store.put_item(b, "i3", "answer", fell.model_dump_json(), correct=False)
        (answer,) = compare_runs(store, a, b).methods  # type: ignore[union-attr]
    assert (answer.a_n, answer.b_n, answer.b_correct) == (3, 2, 1)
    assert answer.test is not None and answer.test.n == 2
