"""``moot view`` in a real browser: Playwright driving Debian's headless Chromium against a live server.

Playwright's own browser download cannot work offline, so the tests launch the
system's ``chromium`` (``make test`` installs it with apt when it runs as root).
Without the package or the browser they are skipped with the reason; never silently.

Screenshots go to a temporary folder (docs/runs.md's come from real runs: ``make screenshots``
runs ``docs/screenshots.py``).
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="moot view needs the view extra (fastapi, uvicorn, jinja2)")
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="the playwright package is not installed (pip install 'moot[dev]')"
)
import uvicorn  # noqa: E402

from moot.runs import RunStore, recording  # noqa: E402
from moot.transcript import Event, Turn  # noqa: E402
from moot.view import create_app  # noqa: E402
from runs.filled import XSS  # noqa: E402

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _chromium() -> str:
    for candidate in (os.environ.get("MOOT_CHROMIUM"), shutil.which("chromium"), "/usr/bin/chromium"):
        if candidate and Path(candidate).is_file():
            return candidate
    pytest.skip(
        "no chromium executable (apt-get install chromium, or set MOOT_CHROMIUM): browser tests skipped"
    )


@pytest.fixture
def browser() -> Iterator[Any]:
    # Function scope: Playwright's sync API holds an event loop in this thread while it runs, and
    # the CLI runs that fill a store need the thread (asyncio.run, signal handlers) before it starts.
    executable = _chromium()
    with sync_api.sync_playwright() as p:
        try:
            b = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        except Exception as exc:  # a broken or incompatible browser: say so and skip
            pytest.skip(f"chromium at {executable} would not start under Playwright: {exc}")
        yield b
        b.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def serve() -> Iterator[Callable[[Path], str]]:
    """``serve(store) -> base URL``: a real uvicorn server in a thread, stopped after the test."""
    servers: list[tuple[uvicorn.Server, threading.Thread]] = []

    def start(store: Path) -> str:
        port = _free_port()
        config = uvicorn.Config(create_app(store), host="127.0.0.1", port=port, log_level="warning")
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.time() + 20
        while not server.started:
            assert time.time() < deadline, "the viewer did not start"
            time.sleep(0.05)
        servers.append((server, thread))
        return f"http://127.0.0.1:{port}"

    yield start
    for server, thread in servers:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    pg = context.new_page()
    dialogs: list[str] = []
    pg.on("dialog", lambda d: (dialogs.append(d.message), d.accept()))
    pg.dialogs = dialogs
    yield pg
    context.close()


def _shot(pg: Any, folder: Path, name: str) -> None:
    path = folder / name
    pg.screenshot(path=str(path), full_page=False)
    assert path.stat().st_size > 10_000


def test_browse_list_debate_bench_item_and_absa(
    filled: dict[str, str], page: Any, serve: Callable[[Path], str], shots: Path
) -> None:
    base = serve(Path(os.environ["MOOT_STORE"]))

    # The run list: every run, then filtered to the bench runs.
    page.goto(base + "/")
    assert page.locator("table#runs tbody tr").count() == len(filled)
    _shot(page, shots, "view-runs.png")
    page.select_option("select[name=kind]", "bench")
    page.click("button[type=submit]")
    page.wait_for_url("**kind=bench**")
    assert page.locator("table#runs tbody tr").count() == 2

    # Tick the two bench runs and compare them: accuracy per method side by side, McNemar.
    for box in page.locator("input.pick").all():
        box.check()
    page.click("#compare-picked")
    page.wait_for_url("**/compare?**")
    methods = page.locator("table.compare.methods").inner_text()
    assert "society:3:2" in methods and "exact" in methods
    assert {filled["bench_a"], filled["bench_b"]} <= set(
        page.locator("a[href^='/runs/']").evaluate_all(
            "els => els.map(e => e.getAttribute('href').split('/')[2])"
        )
    )
    _shot(page, shots, "view-compare.png")

    # A debate: lanes per speaker, rounds, the verdict; a <script> reply is text and never runs.
    page.goto(base + "/")
    page.click("text=Should we write tests first?")
    page.wait_for_selector(".timeline")
    assert page.locator(".lane-head").count() == 2 and page.locator(".round").count() == 2
    assert page.locator(".verdict .turn").inner_text().count("Tests first, then the fix.") == 1
    critic = page.locator('.turn[data-speaker="critical"][data-round="1"]')
    assert XSS in critic.inner_text()
    assert page.dialogs == []  # alert('x') never fired
    _shot(page, shots, "view-debate.png")

    # A fallback: the reason on top and the failed turn's raw text.
    page.goto(f"{base}/runs/{filled['fallback']}")
    assert "Fell back:" in page.locator(".banner.fallback").first.inner_text()
    assert "this is not JSON at all" in page.locator(".turn.failed pre.raw").first.inner_text()

    # A bench report, then one item down to every method's transcript.
    page.goto(f"{base}/runs/{filled['bench_a']}")
    page.wait_for_selector("table.report")
    assert page.locator("table.report tbody tr").count() >= 2
    assert "Paired tests (McNemar)" in page.content()
    _shot(page, shots, "view-bench.png")
    page.locator("a.item-link").first.click()
    page.wait_for_selector("section.transcript")
    methods = page.locator("section.transcript").evaluate_all("els => els.map(e => e.dataset.method)")
    assert methods == ["single", "society:3:2"]
    assert (
        page.locator("section.transcript article.agent").count() == 1 + 3 * 2
    )  # single; 3 agents x 2 rounds
    _shot(page, shots, "view-bench-item.png")

    # An ABSA run: the aspect span highlighted, stage by stage, the moderator's rules.
    page.goto(f"{base}/runs/{filled['absa']}")
    mark = page.locator("p.sentence mark.aspect").first
    assert mark.inner_text() == "battery life"
    assert "Stage 1" in page.locator("table.aspects").inner_text()
    assert page.locator("code.rule").count() >= 1
    _shot(page, shots, "view-absa.png")


def test_live_run_updates_in_the_page_and_delete_is_confirmed(
    page: Any, serve: Callable[[Path], str], tmp_path: Path
) -> None:
    path = tmp_path / "live.db"
    store = RunStore(path)
    with recording("run", title="A debate in progress", model="test:live", store=store) as rec:
        base = serve(path)
        page.goto(f"{base}/runs/{rec.run_id}")
        assert page.locator("#run-status").inner_text() == "running"
        turn = Turn(
            speaker="affirmative", round=1, stance="pro", content={"message": "First live turn arrives"}
        )
        rec.on_event(Event(kind="debate_started", message="A debate in progress"))
        rec.on_event(Event(kind="turn_completed", round=1, speaker="affirmative", turn=turn))
        page.wait_for_selector("text=First live turn arrives", timeout=15_000)  # pushed by the event stream
    page.wait_for_function("document.getElementById('run-status').textContent === 'complete'", timeout=15_000)

    page.click("#delete-run")
    page.wait_for_url(base + "/", timeout=15_000)
    assert page.dialogs and "cannot be undone" in page.dialogs[0]
    assert store.list() == []


def test_search_finds_words_said_only_inside_a_turn(
    filled: dict[str, str], page: Any, serve: Callable[[Path], str]
) -> None:
    base = serve(Path(os.environ["MOOT_STORE"]))
    page.goto(base + "/")
    page.fill("input[name=q]", "zugzwang")  # the critic's reply; no title has the word
    page.click("button[type=submit]")
    page.wait_for_url("**q=zugzwang**")
    links = page.locator("table#runs a.run-link").evaluate_all(
        "els => els.map(e => e.getAttribute('href').split('/')[2])"
    )
    assert links == [filled["debate"]]
    assert "showing 1–1 of 1" in page.locator("nav.pager").first.inner_text()


def test_the_list_pages_through_200_runs(page: Any, serve: Callable[[Path], str], tmp_path: Path) -> None:
    path = tmp_path / "many.db"
    with RunStore(path) as store:
        ids = {store.create_run("run", title=f"Topic number {i}", model="test:many") for i in range(200)}
        for run_id in ids:
            store.update(run_id, status="complete", ended=True)
    base = serve(path)
    page.goto(base + "/")
    seen: list[str] = []
    pages = 0
    while True:
        pages += 1
        seen += page.locator("table#runs a.run-link").evaluate_all(
            "els => els.map(e => e.getAttribute('href').split('/')[2])"
        )
        older = page.locator("nav.pager a.older").first
        if older.count() == 0:
            break
        older.click()
        page.wait_for_load_state()
    assert pages == 4 and len(seen) == 200 and set(seen) == ids  # every run once, 50 a page
    assert "showing 151–200 of 200" in page.locator("nav.pager").first.inner_text()
    page.locator("nav.pager a.newer").first.click()
    page.wait_for_load_state()
    assert "showing 101–150 of 200" in page.locator("nav.pager").first.inner_text()


def test_every_page_loads_with_requests_to_127_0_0_1_only(
    filled: dict[str, str], page: Any, serve: Callable[[Path], str]
) -> None:
    base = serve(Path(os.environ["MOOT_STORE"]))
    requests: list[str] = []
    page.context.on("request", lambda r: requests.append(r.url))
    bench = filled["bench_a"]
    urls = [
        "/",
        "/?kind=bench&q=arithmetic",
        *(f"/runs/{run_id}" for run_id in filled.values()),
        f"/runs/{bench}/items/arithmetic-1",
        f"/compare?a={filled['bench_a']}&b={filled['bench_b']}",
        f"/compare?a={filled['debate']}&b={filled['fallback']}",
        "/docs",
    ]
    for url in urls:
        response = page.goto(base + url)
        assert response is not None and response.ok, url
        page.wait_for_load_state("networkidle")
    page.wait_for_selector(".swagger-ui .info", timeout=15_000)  # the API page rendered, offline
    assert "moot view" in page.locator(".swagger-ui .info").inner_text()
    assert page.locator(".opblock").count() >= 5
    outside = [u for u in requests if not u.startswith(base + "/") and not u.startswith("data:")]
    assert outside == [] and len(requests) > len(urls)


def test_a_bench_filter_narrows_the_items_and_lives_in_the_url(
    filled: dict[str, str], page: Any, serve: Callable[[Path], str]
) -> None:
    base = serve(Path(os.environ["MOOT_STORE"]))
    page.goto(f"{base}/runs/{filled['bench_b']}")
    rows = "table.items tbody a.item-link"
    assert page.locator(rows).count() == 6
    page.select_option("form.item-filters select[name=right]", "single")
    page.select_option("form.item-filters select[name=wrong]", "society:3:2")
    page.click("form.item-filters button[type=submit]")
    page.wait_for_url("**right=single**")
    assert "wrong=society%3A3%3A2" in page.url
    narrowed = page.locator(rows).count()
    assert narrowed < 6 and f"{narrowed} of 6 items" in page.locator("#items-count").inner_text()
    page.goto(page.url)  # the filter is in the URL: the same items on a reload
    assert page.locator(rows).count() == narrowed
    page.select_option("form.item-filters select[name=right]", "")
    page.select_option("form.item-filters select[name=wrong]", "")
    page.select_option("form.item-filters select[name=show]", "parse_failure")
    page.click("form.item-filters button[type=submit]")
    page.wait_for_url("**show=parse_failure**")
    assert 0 < page.locator(rows).count() < 6


def test_compare_shows_the_settings_that_differ_and_two_debates_turn_by_turn(
    filled: dict[str, str], page: Any, serve: Callable[[Path], str], shots: Path
) -> None:
    base = serve(Path(os.environ["MOOT_STORE"]))
    page.goto(f"{base}/compare?a={filled['debate']}&b={filled['fallback']}")
    differ = page.locator("table.settings-differ").inner_text()
    assert "fill:x" in differ and "fillbad:x" in differ  # the model
    assert "rounds" in differ  # --rounds 1 against the preset's 2
    turns = page.locator("table.turns-ab")
    assert "round 1 · critical" in turns.inner_text()
    critic = turns.locator("tr", has_text="round 1 · critical")
    assert XSS in critic.inner_text() and "this is not JSON at all" in critic.inner_text()
    assert "no such turn" in turns.inner_text()  # round 2 ran in A only
    assert page.dialogs == []


def test_the_list_follows_a_running_run_with_what_the_store_holds(
    page: Any, serve: Callable[[Path], str], tmp_path: Path
) -> None:
    from moot.models.base import Usage

    path = tmp_path / "live.db"
    store = RunStore(path)
    with recording("run", title="A debate in progress", model="test:live", store=store) as rec:
        base = serve(path)
        page.goto(base + "/")
        calls = page.locator("table#runs tr.status-running td.calls")
        assert calls.inner_text() == "0"
        turn = Turn(
            speaker="affirmative",
            round=1,
            content={"message": "hello"},
            usage=Usage(calls=1, prompt_tokens=90, completion_tokens=10),
        )
        rec.on_event(Event(kind="turn_completed", round=1, speaker="affirmative", turn=turn))
        rec.flush()
        page.wait_for_function(
            "document.querySelector('table#runs td.calls').textContent.trim() === '1'", timeout=15_000
        )


def test_the_transcript_of_a_turn_shows_what_its_speaker_was_sent(
    filled: dict[str, str], page: Any, serve: Callable[[Path], str], shots: Path
) -> None:
    base = serve(Path(os.environ["MOOT_STORE"]))
    page.goto(f"{base}/runs/{filled['debate']}")
    critic = page.locator('.turn[data-speaker="critical"][data-round="2"]')
    transcript = critic.locator("details.transcript")
    assert not transcript.locator("ol.messages").is_visible()  # collapsed until asked for
    transcript.locator("summary").first.click()
    shown = transcript.inner_text()
    assert "Provide a skeptical, alternative perspective" in shown  # the critic's persona, as sent
    assert "critical [turn, round 1]: I disagree" in shown  # the history it was shown
    assert "shared prompt #1 (above)" in shown and "parsed content" in shown.lower()
    # The system prompt every turn was sent is on the page once, above the timeline.
    assert page.locator("details.shared-prompts").count() == 1
    assert page.content().count("You are one of two agents improving an answer") == 1
    assert page.dialogs == []  # the <script> in the history is text
    _shot(page, shots, "view-transcript.png")


def test_the_transcript_of_a_bench_agent_shows_what_it_was_sent(
    filled: dict[str, str], page: Any, serve: Callable[[Path], str], shots: Path
) -> None:
    base = serve(Path(os.environ["MOOT_STORE"]))
    page.goto(f"{base}/runs/{filled['bench_a']}/items/arithmetic-1")
    society = page.locator('section.transcript[data-method="society:3:2"]')
    # Round 0's prompt went to all three agents: on the page once per method, above the agents.
    shared = society.locator("details.shared-prompts")
    assert shared.count() == 1 and "What is the result of" in (shared.text_content() or "")
    agent = society.locator("article.agent").nth(3)  # round 1, agent0
    transcript = agent.locator("details.transcript")
    assert not transcript.locator("ol.messages").is_visible()  # collapsed until asked for
    transcript.locator("summary").first.click()
    shown = transcript.inner_text()
    assert "3 messages" in shown  # its question, its own round-0 reply, the peers' replies
    assert "shared message #1 (above)" in shown
    assert "These are the most recent answers to the question from the other agents" in shown
    assert "raw reply" in shown.lower() and "parsed answer" in shown.lower()
    single = page.locator('section.transcript[data-method="single"] article.agent details.transcript')
    single.locator("summary").first.click()
    assert "What is the result of" in single.inner_text()  # one agent: its prompt in its own transcript
    assert page.dialogs == []
    _shot(page, shots, "view-bench-transcript.png")


def test_the_transcript_of_an_absa_stage_shows_what_it_was_sent(
    filled: dict[str, str], page: Any, serve: Callable[[Path], str], shots: Path
) -> None:
    base = serve(Path(os.environ["MOOT_STORE"]))
    for url in (f"/runs/{filled['absa']}", f"/runs/{filled['absa_batch']}/items/s1"):
        page.goto(base + url)
        stages = page.locator("table.stages tbody tr").evaluate_all("els => els.map(e => e.dataset.stage)")
        assert stages[0] == "ate" and "atsa" in stages, url
        ate = page.locator('details.stage-transcript[data-stage="ate"]').first
        assert not ate.locator("ol.messages").is_visible()  # collapsed until asked for
        ate.locator("summary").first.click()
        ate.locator("li.role-system summary").first.click()  # a system prompt opens on request too
        shown = ate.inner_text()
        assert "You are an aspect term extractor" in shown  # the stage's prompt, as sent
        assert "The battery life is terrible." in shown  # the sentence in it
        assert "raw reply" in shown.lower() and "parsed output" in shown.lower()
        assert page.dialogs == []
    _shot(page, shots, "view-absa-stages.png")
