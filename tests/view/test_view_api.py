"""The viewer's pages and JSON API, through FastAPI's test client, on a store filled by real runs."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="moot view needs the view extra (fastapi, uvicorn, jinja2)")
from fastapi.testclient import TestClient  # noqa: E402

from moot.cli import main  # noqa: E402
from moot.runs import RunStore, recording  # noqa: E402
from moot.view import create_app  # noqa: E402
from runs.filled import XSS  # noqa: E402

LOCAL = "http://127.0.0.1:7575"  # the loopback app accepts loopback Host headers only


@pytest.fixture
def client(filled: dict[str, str]) -> TestClient:
    return TestClient(create_app(os.environ["MOOT_STORE"]), base_url=LOCAL)


def test_run_list_filters_search_and_sort(client: TestClient, filled: dict[str, str]) -> None:
    page = client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    for run_id in filled.values():
        assert f"/runs/{run_id}" in page.text
    benches = client.get("/", params={"kind": "bench"}).text
    assert filled["bench_a"] in benches and filled["debate"] not in benches
    found = client.get("/", params={"q": "tests first"}).text
    assert filled["debate"] in found and filled["fallback"] not in found
    by_score = client.get("/api/runs", params={"sort": "score", "kind": "bench"}).json()
    assert by_score["total"] == 2 and by_score["runs"][0]["score"] >= by_score["runs"][1]["score"]
    assert [r["id"] for r in client.get("/api/runs", params={"status": "fell_back"}).json()["runs"]] == [
        filled["fallback"]
    ]
    # Words found only inside a turn (the critic's reply), never in a title.
    inside = client.get("/api/runs", params={"q": "zugzwang"}).json()
    assert [r["id"] for r in inside["runs"]] == [filled["debate"]] and inside["total"] == 1
    assert filled["debate"] in client.get("/", params={"q": "zugzwang"}).text
    protocols = {r["id"]: r["protocol"] for r in client.get("/api/runs").json()["runs"]}
    assert protocols[filled["bench_a"]] == "single, society:3:2" and protocols[filled["debate"]]


def test_list_page_and_api_page_through_runs(tmp_path: Path) -> None:
    path = tmp_path / "many.db"
    with RunStore(path) as store:
        ids = [store.create_run("run", title=f"topic number {i}", model="m") for i in range(120)]
        store.update(ids[0], status="complete")
    client = TestClient(create_app(path), base_url=LOCAL)
    first = client.get("/api/runs").json()
    assert first["total"] == 120 and first["limit"] == 50 and len(first["runs"]) == 50
    seen = [r["id"] for r in first["runs"]]
    for offset in (50, 100):
        seen += [r["id"] for r in client.get("/api/runs", params={"offset": offset}).json()["runs"]]
    assert sorted(seen) == sorted(ids)
    page = client.get("/").text
    assert "showing 1–50 of 120" in page and 'href="/?offset=50"' in page and "newer" not in page
    last = client.get("/", params={"offset": 100, "kind": "run"}).text
    assert "showing 101–120 of 120" in last and 'href="/?kind=run&amp;offset=50"' in last
    assert "older ›" not in last
    assert client.get("/api/runs", params={"limit": 10_000}).json()["limit"] == 500


def test_debate_page_shows_timeline_decision_and_escapes_model_output(
    client: TestClient, filled: dict[str, str]
) -> None:
    page = client.get(f"/runs/{filled['debate']}").text
    assert "Round 1" in page and "Round 2" in page and "Verdict" in page
    assert "Tests first, then the fix." in page and "doc-2" in page and "confidence 0.40" in page
    assert XSS not in page and "&lt;script&gt;alert(" in page  # shown as text, never run
    assert 'data-speaker="affirmative"' in page and 'data-speaker="critical"' in page


def test_fallback_and_failed_turns_are_visible_with_raw_text(
    client: TestClient, filled: dict[str, str]
) -> None:
    page = client.get(f"/runs/{filled['fallback']}").text
    assert "Fell back:" in page and "failed" in page
    assert "this is not JSON at all" in page  # the raw model output of the failed turn


def test_bench_page_report_items_and_transcripts(client: TestClient, filled: dict[str, str]) -> None:
    run_id = filled["bench_a"]
    page = client.get(f"/runs/{run_id}").text
    assert "Paired tests (McNemar)" in page and "95% interval" in page and "Flips between rounds" in page
    links = re.findall(rf'href="/runs/{run_id}/items/([^"]+)"', page)
    assert len(links) == 6
    item = client.get(f"/runs/{run_id}/items/{links[0]}").text
    assert "single" in item and "society:3:2" in item and "Round 1" in item and "gold answer" in item
    assert client.get(f"/runs/{run_id}/items/nope").status_code == 404
    assert "<h3>Plots</h3>" not in page  # run with --no-plots: none to show
    assert client.get(f"/runs/{run_id}/plots/accuracy_by_round.png").status_code == 404


def test_bench_plots_come_from_the_recorded_out_folder(client: TestClient, filled: dict[str, str]) -> None:
    out = Path(RunStore(os.environ["MOOT_STORE"]).get(filled["bench_a"]).config["out"])
    png = b"\x89PNG\r\n\x1a\n" + b"0" * 64
    (out / "accuracy_by_round.png").write_bytes(png)
    page = client.get(f"/runs/{filled['bench_a']}").text
    assert f'src="/runs/{filled["bench_a"]}/plots/accuracy_by_round.png"' in page
    got = client.get(f"/runs/{filled['bench_a']}/plots/accuracy_by_round.png")
    assert got.status_code == 200 and got.content == png and got.headers["content-type"] == "image/png"
    (out / "secret.txt").write_text("not a plot")
    assert client.get(f"/runs/{filled['bench_a']}/plots/secret.txt").status_code == 404
    assert client.get(f"/runs/{filled['bench_a']}/plots/..%2F..%2Fetc%2Fpasswd").status_code == 404


def test_absa_single_batch_and_arbitration_pages(client: TestClient, filled: dict[str, str]) -> None:
    page = client.get(f"/runs/{filled['absa']}").text
    assert (
        '<mark class="aspect' in page and "battery life" in page and "Stage 1" in page and "Moderator" in page
    )
    assert "min_total" in page  # the override thresholds
    batch = client.get(f"/runs/{filled['absa_batch']}").text
    assert "Nice place." in batch and f"/runs/{filled['absa_batch']}/items/s1" in batch
    assert "battery life" in client.get(f"/runs/{filled['absa_batch']}/items/s1").text
    arb = client.get(f"/runs/{filled['arbitrate']}").text
    assert "Contradictions and rulings" in arb and "agent2_correct" in arb and "Consensus" in arb


def test_compare_page_and_api(client: TestClient, filled: dict[str, str]) -> None:
    page = client.get("/compare", params={"a": filled["bench_a"], "b": filled["bench_b"]}).text
    assert "McNemar p" in page and "society:3:2" in page
    data = client.get("/api/compare", params={"a": filled["debate"], "b": filled["fallback"]}).json()
    assert data["kind"] == "run" and any(r["field"] == "final answer" for r in data["rows"])
    assert (
        client.get("/api/compare", params={"a": filled["debate"], "b": filled["bench_a"]}).status_code == 400
    )


def test_json_api_run_events_items(client: TestClient, filled: dict[str, str]) -> None:
    run = client.get(f"/api/runs/{filled['debate'][:8]}").json()
    assert run["id"] == filled["debate"] and run["result"]["final_answer"] == "Tests first, then the fix."
    events = client.get(f"/api/runs/{filled['debate']}/events", params={"after": 2}).json()
    assert events[0]["seq"] == 3 and events[-1]["kind"] == "debate_completed"
    assert len(client.get(f"/api/runs/{filled['bench_a']}/items").json()) == 12
    assert client.get("/api/runs/ffffffff").status_code == 404
    assert "/api/runs/{run_id}/stream" in client.get("/openapi.json").json()["paths"]


def test_delete_needs_confirmation(client: TestClient, filled: dict[str, str]) -> None:
    run_id = filled["absa"]
    assert client.delete(f"/api/runs/{run_id}").status_code == 409
    assert client.delete(f"/api/runs/{run_id}", headers={"X-Moot-Confirm": run_id[:8]}).status_code == 409
    assert client.get(f"/api/runs/{run_id}").status_code == 200
    assert client.delete(f"/api/runs/{run_id}", headers={"X-Moot-Confirm": run_id}).json() == {
        "deleted": run_id
    }
    assert client.get(f"/api/runs/{run_id}").status_code == 404
    assert client.post(f"/api/runs/{filled['debate']}").status_code == 405  # nothing else writes


def test_stream_sends_updates_then_end_for_a_finished_run(client: TestClient, filled: dict[str, str]) -> None:
    with client.stream("GET", f"/api/runs/{filled['debate']}/stream") as response:
        body = "".join(response.iter_text())
    assert body.startswith("event: update\n") and '"status": "complete"' in body and "event: end" in body


def test_live_run_page_follows_a_running_run(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.db")
    with recording("run", title="live one", store=store) as rec:
        client = TestClient(create_app(tmp_path / "runs.db"), base_url=LOCAL)
        page = client.get(f"/runs/{rec.run_id}").text
        assert 'data-live="yes"' in page and "live:" in page
        assert (
            client.get(f"/runs/{rec.run_id}", params={"fragment": 1})
            .text.lstrip()
            .startswith('<p class="live"')
        )
    assert 'data-live="no"' in client.get(f"/runs/{rec.run_id}").text


def test_token_is_required_on_every_request(filled: dict[str, str]) -> None:
    client = TestClient(create_app(os.environ["MOOT_STORE"], token="s3cret", host="0.0.0.0"))
    assert client.get("/").status_code == 401
    assert client.get("/api/runs").status_code == 401
    assert client.get("/static/moot.css").status_code == 401
    assert client.get("/api/runs", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    first = client.get("/", params={"token": "s3cret"})
    assert first.status_code == 200 and "moot_token" in first.headers["set-cookie"]
    assert client.get(f"/runs/{filled['debate']}").status_code == 200  # the cookie carries it now
    assert (
        TestClient(create_app(os.environ["MOOT_STORE"], token="s3cret", host="0.0.0.0"))
        .get("/", params={"token": "wrong"})
        .status_code
        == 401
    )


def test_loopback_rejects_foreign_host_headers(filled: dict[str, str]) -> None:
    client = TestClient(create_app(os.environ["MOOT_STORE"]), base_url=LOCAL)
    assert client.get("/", headers={"host": "evil.example"}).status_code == 400
    assert client.get("/", headers={"host": "127.0.0.1:7575"}).status_code == 200


def test_static_files_are_local_and_no_cdn_is_referenced(client: TestClient, filled: dict[str, str]) -> None:
    page = client.get(f"/runs/{filled['debate']}").text
    assert not re.search(r'(src|href)="https?://', page)
    assert (
        client.get("/static/moot.js").status_code == 200
        and "EventSource" in client.get("/static/moot.js").text
    )


def test_moot_view_refuses_a_public_host_without_token(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["view", "--host", "0.0.0.0"]) == 2
    assert "--token" in capsys.readouterr().err
    assert main(["view", "--store", str(tmp_path / "none.db")]) == 2
    assert "no run store" in capsys.readouterr().err


def test_moot_view_serves_the_store_until_stopped(filled: dict[str, str]) -> None:
    import signal
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    argv = [sys.executable, "-m", "moot", "view", "--port", str(port), "--store", os.environ["MOOT_STORE"]]
    proc = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline, body = time.time() + 60, ""
        while time.time() < deadline and not body:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/runs", timeout=5) as response:
                    body = response.read().decode()
            except OSError:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                time.sleep(0.2)
        assert filled["debate"] in {r["id"] for r in json.loads(body)["runs"]}
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=20)
        assert proc.stderr is not None
        err = proc.stderr.read()
        proc.stderr.close()
    assert f"127.0.0.1:{port}" in err and "Traceback" not in err


def test_a_running_run_lists_the_calls_and_tokens_stored_so_far(tmp_path: Path) -> None:
    from moot.models.base import Usage
    from moot.transcript import Event, Turn

    path = tmp_path / "live.db"
    with RunStore(path) as store:
        with recording("run", title="in progress", store=store) as rec:
            for speaker in ("a", "b"):
                turn = Turn(
                    speaker=speaker,
                    round=1,
                    content={"message": "hi"},
                    usage=Usage(calls=1, prompt_tokens=100, completion_tokens=20),
                )
                rec.on_event(Event(kind="turn_completed", round=1, speaker=speaker, turn=turn))
            bench = store.create_run("bench", title="arithmetic")
            unit = {"item_id": "i1", "calls": 3, "prompt_tokens": 30, "completion_tokens": 6}
            store.put_item(bench, "i1", "vote:3", json.dumps(unit))
            rec.flush()
            rows = {
                r["id"]: r
                for r in TestClient(create_app(path), base_url=LOCAL).get("/api/runs").json()["runs"]
            }
            assert rows[rec.run_id]["usage"]["calls"] == 2
            assert rows[rec.run_id]["usage"]["prompt_tokens"] == 200
            assert rows[bench]["usage"]["calls"] == 3 and rows[bench]["usage"]["completion_tokens"] == 6


def test_api_docs_are_served_from_the_package(client: TestClient) -> None:
    docs = client.get("/docs").text
    assert "/static/swagger/swagger-ui-bundle.js" in docs and "cdn" not in docs.lower()
    assert client.get("/static/swagger/swagger-ui-bundle.js").status_code == 200
    assert client.get("/redoc").status_code == 404  # dropped: its assets would come from a CDN


def test_bench_items_filter_by_right_wrong_pairs_and_kinds_of_failure(
    client: TestClient, filled: dict[str, str]
) -> None:
    run_id = filled["bench_b"]
    everything = client.get(f"/runs/{run_id}").text
    assert "6 of 6 items" in everything

    def shown(**params: str) -> list[str]:
        page = client.get(f"/runs/{run_id}", params=params)
        assert page.status_code == 200
        return re.findall(rf'class="item-link" href="/runs/{run_id}/items/([^"]+)"', page.text)

    records = {(r["item"], r["part"]): r for r in client.get(f"/api/runs/{run_id}/items").json()}
    right_single = sorted(i for (i, m), r in records.items() if m == "single" and r["correct"])
    both = sorted(
        i for i in right_single if not records[(i, "society:3:2")]["correct"]
    )  # single right, society wrong
    assert sorted(shown(right="single")) == right_single and 0 < len(right_single) < 6
    assert sorted(shown(right="single", wrong="society:3:2")) == both
    parse_failed = sorted({i for (i, _), r in records.items() if r["data"]["parse_failed"]})
    assert sorted(shown(show="parse_failure")) == parse_failed and parse_failed  # "junk" answers
    assert shown(show="fell_back") == [] and shown(show="failed") == []
    assert client.get(f"/runs/{run_id}", params={"show": "nonsense"}).status_code == 400


def test_bench_filter_keeps_fallen_back_and_failed_units() -> None:
    from moot.bench.records import ItemRecord
    from moot.view.shape import BenchFilter, BenchItemRow, filter_bench_items

    def unit(item: str, method: str, correct: bool, note: str | None = None) -> ItemRecord:
        return ItemRecord(
            item_id=item, method=method, gold="1", final="1" if correct else "2", correct=correct,
            parse_failed=False, note=note,
        )  # fmt: skip

    rows = [
        BenchItemRow("a", "1", {"single": unit("a", "single", True), "answer": unit("a", "answer", True)}),
        BenchItemRow("b", "1", {"answer": unit("b", "answer", False, note="fallback: deadline")}),
        BenchItemRow("c", "", {}),
    ]
    failed = {"c": {"answer": "ModelConnectionError: refused"}}
    assert [r.item_id for r in filter_bench_items(rows, BenchFilter(show="fell_back"), failed)] == ["b"]
    assert [r.item_id for r in filter_bench_items(rows, BenchFilter(show="failed"), failed)] == ["c"]
    assert [r.item_id for r in filter_bench_items(rows, BenchFilter(wrong="answer"), failed)] == ["b"]
    assert len(filter_bench_items(rows, BenchFilter(), failed)) == 3


def test_a_failed_run_names_each_error_class_once_and_the_failure_in_one_place(
    capsys: pytest.CaptureFixture[str], fake_provider: Any
) -> None:
    from moot.errors import ModelConnectionError
    from moot.models import ModelRequest
    from moot.models.testing import FunctionModel

    def down(req: ModelRequest) -> object:
        raise ModelConnectionError("cannot connect to http://127.0.0.1:9/v1: connection refused")

    fake_provider("viewdown", lambda rest: FunctionModel(down, name="viewdown:x"))
    assert main(["run", "Is tea good?", "--model", "viewdown:x", "--rounds", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("ModelConnectionError") == 1, err
    # The CLI's exit 2 leaves no run (issue 37); the library records the failed run the page shows.
    from moot import Debate

    Debate("answer", model="viewdown:x", store=True, overrides={"rounds": 1}).run_sync("Is tea good?")
    store = RunStore(os.environ["MOOT_STORE"])
    (run,) = store.list()
    assert (run.error or "").count("ModelConnectionError") == 1, run.error
    page = TestClient(create_app(store.path), base_url=LOCAL).get(f"/runs/{run.id}").text
    body = page.split('<div id="run-body"', 1)[1]
    assert "ModelConnectionError: ModelConnectionError" not in page and "cancelled: cancelled" not in page
    # The run's error at the top, and the turn that met it; the fallback and the cancelled turn
    # do not say it again.
    assert page.count("connection refused") == 2, page
    assert "Fell back:" not in body and "cancelled: the debate stopped (see above)" in body


def test_error_text_names_the_kind_once() -> None:
    from moot.errors import ModelConnectionError, error_text

    assert error_text(ModelConnectionError("refused")) == "ModelConnectionError: refused"
    twice = error_text("ModelConnectionError", "ModelConnectionError: refused")
    assert twice == "ModelConnectionError: refused"
    assert error_text("cancelled", "cancelled: the debate stopped") == "cancelled: the debate stopped"
    assert error_text("invalid_output", "") == "invalid_output" and error_text(None, "x") == "x"


def test_each_turn_has_a_transcript_of_its_requests_repairs_and_content(
    client: TestClient, filled: dict[str, str]
) -> None:
    page = client.get(f"/runs/{filled['fallback']}").text
    critic = page.split('data-speaker="critical"', 1)[1].split("</article>", 1)[0]
    assert "transcript: what the model was sent · 2 requests" in critic  # the answer, then its repair
    rows = re.findall(r"<tr><td>(\d)</td><td>(first|repair)</td>", critic)
    assert rows == [("1", "first"), ("2", "repair")] and critic.count("<td>invalid_output</td>") == 2
    assert "raw reply" in critic and "this is not JSON at all" in critic
    good = client.get(f"/runs/{filled['debate']}").text
    verdict = good.split('class="verdict"', 1)[1]
    assert "1 request" in verdict and "parsed content" in verdict and "Tests first, then the fix." in verdict


def test_a_bench_agents_transcript_is_escaped_text(tmp_path: Path) -> None:
    from moot.bench.records import AgentAnswer, ItemRecord, SentMessage
    from moot.models.base import Usage

    path = tmp_path / "runs.db"
    with RunStore(path) as store:
        run_id = store.create_run("bench", title="arithmetic", config={"methods": ["society:2:2"]})
        answers = [
            [
                AgentAnswer(
                    agent=f"agent{i}",
                    answer=None,
                    correct=False,
                    text=f"{XSS} {i}",
                    sent=[0],
                    usage=Usage(calls=1),
                )
                for i in range(2)
            ],
            [
                AgentAnswer(
                    agent="agent0", answer="7", correct=True, text="(7)", sent=[0, 1, 2], latency_s=0.5
                )
            ],
        ]
        record = ItemRecord(
            item_id="arithmetic-0",
            method="society:2:2",
            gold="7",
            final="7",
            correct=True,
            parse_failed=False,
            rounds=answers,
            messages=[
                SentMessage(role="user", content="What is 3+4? <b>bold</b>"),
                SentMessage(role="assistant", content=f"{XSS} 0"),
                SentMessage(role="user", parts=["One agent response: ```", (0, 1), "```"]),
            ],
        )
        store.put_item(run_id, "arithmetic-0", "society:2:2", record.model_dump_json(), correct=True)
        store.update(run_id, status="complete", ended=True)
    client = TestClient(create_app(path), base_url=LOCAL)
    page = client.get(f"/runs/{run_id}/items/arithmetic-0").text
    assert XSS not in page and "<b>bold</b>" not in page
    assert page.count("&lt;script&gt;alert(") >= 4  # two replies, the history's reply, the peer's reply
    assert "shared message #1 (above)" in page and "What is 3+4? &lt;b&gt;bold&lt;/b&gt;" in page
    assert "One agent response" in page and "0.50s" in page


def test_bench_page_and_report_md_say_the_same_baselines(
    client: TestClient, filled: dict[str, str], tmp_path: Path
) -> None:
    """One computation: the viewer rebuilds the report from the store, items in the order units finished."""
    report = (tmp_path / "bench-a" / "report.md").read_text(encoding="utf-8")
    rows = [
        line.split("|")[1].strip()
        for line in report.splitlines()
        if line.startswith(("| baseline:", "| no majority baseline"))
    ]
    # Six arithmetic items, six different answers: no majority class to give.
    assert rows == ["no majority baseline: every gold answer is unique"]
    page = client.get(f"/runs/{filled['bench_a']}").text
    assert "no majority baseline: every gold answer is unique" in page and "(majority class)" not in page


def test_runs_list_json_and_api_runs_are_one_shape(
    client: TestClient, filled: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``moot runs list --json`` answers what ``/api/runs`` answers: ``{total, offset, limit, runs}``."""
    assert main(["runs", "list", "--kind", "bench", "--limit", "1", "--offset", "1", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    api = client.get("/api/runs", params={"kind": "bench", "limit": 1, "offset": 1}).json()
    assert cli == api and cli["total"] == 2 and [r["id"] for r in cli["runs"]] == [filled["bench_a"]]
