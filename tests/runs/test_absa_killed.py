"""``moot absa`` on one sentence records each step and debate turn as it happens: a SIGKILL loses none."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from absa.scripts import SENTENCE, persona_replies
from moot.absa import StageEvent, run_absa
from moot.app.records import absa_events
from moot.cli import main
from moot.models import run_with_model
from moot.models.testing import ScriptedModel
from moot.runs import RunStore
from moot.transcript import Event

TESTS = Path(__file__).resolve().parents[1]
SRC = str(TESTS.parent / "src")

# A `moot absa` whose model answers Stage 1 and the debate, then hangs in Stage 2's first call.
_ABSA = textwrap.dedent(
    """
    import asyncio, sys
    from absa.scripts import SENTENCE, persona_replies
    from moot import models
    from moot.cli import main
    from moot.models.testing import FunctionModel

    replies = persona_replies()

    async def reply(request):
        speaker = request.metadata["speaker"]
        if speaker == "ate_review":
            print("blocked", flush=True)
            await asyncio.sleep(3600)
        return replies[speaker].pop(0)

    models.register_provider("hang", lambda rest: FunctionModel(reply, name="hang:" + rest))
    main(["absa", SENTENCE, "--model", "hang:x", "--store", sys.argv[1]])
    """
)


def _env() -> dict[str, str]:
    path = os.pathsep.join([SRC, str(TESTS), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path}


def _wait_for(store_path: Path, run_kind: str, event_name: str, timeout: float = 30.0) -> str:
    """The id of the run once it has committed a ``step_started`` of ``event_name``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if store_path.exists():
            with RunStore(store_path) as store:
                for run in store.list(kind=run_kind):
                    if any(
                        e.kind == "step_started" and e.name == event_name for e in absa_events(store, run.id)
                    ):
                        return run.id
        time.sleep(0.05)
    raise AssertionError(f"no {event_name!r} step recorded within {timeout} s")


def test_sigkilled_absa_keeps_every_completed_step_and_turn(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "runs.db"
    proc = subprocess.Popen(
        [sys.executable, "-c", _ABSA, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=_env(),
    )
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == "blocked", "the run ended before Stage 2"
        # Recorded while it runs: the Stage 2 call it hangs in is already in the store.
        run_id = _wait_for(path, "absa", "ate_review")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        proc.kill()
        proc.stdout.close()
    with RunStore(path) as store:
        run = store.get(run_id)
        assert run.status == "interrupted" and run.result is None and run.title == SENTENCE
        events = absa_events(store, run_id)
        done = [e.name for e in events if e.kind == "step_completed"]
        assert done[:3] == ["ate", "atsa", "validator"]
        assert {"debate", "review_context", "validator_proposals"} <= set(done)
        outputs = {e.name: e for e in events if e.kind == "stage_output"}
        assert set(outputs) == {"stage1", "review_context"}  # Stage 2 never finished
        stage1 = outputs["stage1"].stage1
        assert stage1 is not None and [a.term for a in stage1.aspects] == ["battery", "screen"]
        stored = store.events(run_id)
        turns = [e for e in stored if e.kind == "turn_completed"]
        assert len(turns) == 6 and any(e.kind == "judge_completed" for e in stored)
        assert [e.seq for e in stored] == list(range(1, len(stored) + 1))
        assert [r.id for r in store.list(status="interrupted")] == [run_id]

    # `moot runs show` prints what it did; the viewer's ABSA page renders the partial run.
    assert main(["runs", "show", run_id[:8], "--store", str(path)]) in (0, None)
    shown = capsys.readouterr().out
    assert "interrupted" in shown and "ate: ok" in shown and "debate: ok" in shown
    assert "The screen is dim, a real flaw." in shown and "no final result (interrupted)" in shown
    pytest.importorskip("fastapi", reason="the viewer needs the view extra (fastapi, uvicorn, jinja2)")
    from fastapi.testclient import TestClient

    from moot.view import create_app

    client = TestClient(create_app(path), base_url="http://127.0.0.1:7575")
    page = client.get(f"/runs/{run_id}")
    assert page.status_code == 200
    text = page.text
    assert "No final result (interrupted)" in text and "stopped in" in text and "ate_review" in text
    assert "Stage 1" in text and "lasts all day" in text and 'title="battery: positive"' in text
    assert "Round 2" in text and "The screen is dim, a real flaw." in text


def test_on_event_sees_steps_outputs_and_debate_events_in_order() -> None:
    seen: list[StageEvent | Event] = []
    progress: list[str] = []

    def on_progress(name: str, step: object) -> None:
        if step is None:
            progress.append(name)

    res = run_with_model(
        ScriptedModel(persona_replies()),
        lambda m: run_absa(SENTENCE, model=m, on_progress=on_progress, on_event=seen.append),
    )
    names = [(e.kind, e.name) for e in seen if isinstance(e, StageEvent)]
    assert names[:2] == [("step_started", "ate"), ("step_completed", "ate")]
    assert names.index(("stage_output", "stage1")) < names.index(("step_started", "debate"))
    assert names[-1] == ("step_completed", "moderator") and ("stage_output", "stage2") in names
    completed = [e.step for e in seen if isinstance(e, StageEvent) and e.step is not None]
    assert completed == res.trace  # the same steps the result's trace holds
    debate = [e for e in seen if isinstance(e, Event)]
    assert [e.kind for e in debate].count("turn_completed") == 6 and debate[-1].kind == "debate_completed"
    # the progress display still names each speaker; those are not recorded as steps
    assert "debate: analyst (round 1)" in progress
    assert not any(n.startswith("debate: ") for _, n in names)
