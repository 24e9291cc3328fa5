"""The run store and the viewer on the real path: a debate on the embedded model, recorded and shown."""

from __future__ import annotations

import os

import pytest

from moot.cli import main
from moot.runs import RunStore, load_result
from moot.transcript import DebateResult


@pytest.mark.integration
def test_a_debate_on_the_embedded_model_is_recorded_and_viewable(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "Is a short walk after lunch a good habit?", "--model", "local", "--rounds", "1"]
    code = main([*argv, "--max-tokens", "64", "--json"])
    assert code in (0, 1)  # 1: the small model's answer fell back; the run is recorded either way
    printed = DebateResult.model_validate_json(capsys.readouterr().out)
    with RunStore(os.environ["MOOT_STORE"], must_exist=True) as store:
        (run,) = store.list()
        assert run.status == ("fell_back" if printed.degraded else "complete")
        assert load_result(store, run.id) == printed
        assert run.config["models"]["affirmative"]["spec"] == "local" and run.config["prompts_sha256"]
        assert run.usage.calls == printed.usage.calls > 0
        turns = [e for e in store.events(run.id) if e.kind in ("turn_completed", "judge_completed")]
        assert len(turns) == len(printed.turns(include_judge=True))

    fastapi = pytest.importorskip("fastapi.testclient", reason="moot view needs the view extra")
    from markupsafe import escape

    from moot.view import create_app

    client = fastapi.TestClient(create_app(os.environ["MOOT_STORE"]), base_url="http://127.0.0.1")
    page = client.get(f"/runs/{run.id}").text
    for turn in printed.turns(include_judge=True):
        assert f'data-speaker="{turn.speaker}"' in page
        if turn.text:
            assert str(escape(turn.text))[:40] in page  # Jinja's escaping, so quotes compare equal
