"""``moot protocols list/show/validate``, ``moot run --dry-run``, ``moot --version``, completion."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from moot import __version__
from moot.cli import main
from moot.models import Model, ModelRequest
from moot.models.testing import FunctionModel
from moot.protocol import load_protocol, preset_names


def _reply(req: ModelRequest) -> dict[str, object]:
    if req.metadata["phase"] == "judge":
        return {"final_answer": "merged", "citations": []}
    return {"answer": "a", "confidence": 0.5}


def _never(rest: str) -> Model:
    raise AssertionError("a dry run or a validation must not resolve a model")


@pytest.fixture(autouse=True)
def _providers(fake_provider: Callable[..., None]) -> None:
    fake_provider("never", _never)


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"moot {__version__}\n"


def test_shell_completion_is_enabled(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "--install-completion" in capsys.readouterr().out


def test_protocols_without_a_subcommand_lists_presets(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["protocols"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines if not line.startswith(" ")] == preset_names()


def test_protocol_list_wraps_at_the_terminal_width(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    assert main(["protocols"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) > len(preset_names()) and max(len(line) for line in lines) <= 60


@pytest.mark.parametrize("name", preset_names())
def test_show_prints_yaml_that_loads_back_to_the_preset(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["protocols", "show", name]) == 0
    shown = tmp_path / f"{name}.yaml"
    shown.write_text(capsys.readouterr().out)
    assert load_protocol(shown) == load_protocol(name)


def test_show_resolves_a_file_with_extends(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mine = tmp_path / "mine.yaml"
    mine.write_text("extends: adversarial\nname: mine\nrounds: 3\n")
    assert main(["protocols", "show", str(mine)]) == 0
    out = capsys.readouterr().out
    assert "name: mine\n" in out and "rounds: 3\n" in out and "moderator:\n  persona: moderator" in out


def test_validate_a_good_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mine = tmp_path / "mine.yaml"
    mine.write_text(
        "extends: answer\nrounds: 3\npersonas:\n  critical: {model: 'never:x'}\n"  # never resolved
    )
    assert main(["protocols", "validate", str(mine)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{mine}: valid protocol 'answer'")
    assert "order affirmative + critical; 3 rounds; judge synthesizer" in out and "at most 7 calls" in out


def test_validate_overrides_of_a_preset_in_the_seed_shape(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    over = tmp_path / "over.yaml"
    over.write_text("pipeline:\n  debate:\n    rounds: 1\n    order: [critic, analyst]\n")
    assert main(["protocols", "validate", str(over), "--protocol", "panel"]) == 0
    assert "order critic -> analyst; 1 round;" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("extends: answer\nroundz: 2\n", "unknown key 'roundz'"),
        ("extends: answer\norder: [affirmative, ghost]\n", "ghost"),
        ("extends: answer\nspeaker_prompt: no_such_prompt.md\n", "no_such_prompt.md"),
        ("extends: answer\npersonas:\n  critical: {model: 'nope:x'}\n", "unknown model provider 'nope'"),
        ("rounds: [1,\n", "malformed YAML"),
    ],
)
def test_validate_names_the_problem_in_one_line(
    text: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    assert main(["protocols", "validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("moot: error:") and message in err and err.count("\n") == 1


def test_validate_missing_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["protocols", "validate", "/no/such/file.yaml"]) == 2
    assert "config file not found" in capsys.readouterr().err


@pytest.mark.parametrize("protocol", ["answer", "panel", "adversarial-extended"])
def test_dry_run_prints_exactly_the_prompts_round_one_sends(
    protocol: str, fake_provider: Callable[..., None], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ctx = tmp_path / "ctx.json"
    ctx.write_text(json.dumps({"docs": [{"id": "d1", "text": "Tea has caffeine."}]}))
    argv = ["run", "Is tea good?", "--protocol", protocol, "--context", str(ctx), "--dry-run", "--json"]
    assert main([*argv, "--model", "never:x"]) == 0
    printed = json.loads(capsys.readouterr().out)
    planned = printed["calls"]
    estimate = printed["estimate"]  # the whole debate at most, priced from the spec (never:x has no price)
    assert estimate["calls"] >= len(planned) and estimate["cost_usd_at_most"] is None
    assert printed["estimate_error"] is None
    # The same debate, really run on a function model: its first speakers got the same messages.
    model = FunctionModel(lambda req: _schema_reply(req), name="fake:real")
    fake_provider("fake", lambda rest: model)
    main([*argv[:-2], "--json", "--model", "fake:x"])
    capsys.readouterr()
    sent = {
        r.metadata["speaker"]: [m.model_dump() for m in r.messages]
        for r in model.requests
        if r.metadata["round"] == 1 and r.metadata["phase"] == "turn" and r.metadata.get("attempt", 0) == 0
    }
    first = [call for call in planned if call["stage"] == 0]
    assert first and all(call["messages"] == sent[call["speaker"]] for call in first)
    assert {call["speaker"] for call in planned} == set(load_protocol(protocol).speakers())
    for call in planned:
        assert call["model"] == "never:x" and call["round"] == 1
        if call["stage"] > 0:  # later speakers: the same prompt, but HISTORY names whose replies go there
            system, user = (m["content"] for m in call["messages"])
            real_system, real_user = (m["content"] for m in sent[call["speaker"]])
            assert system == real_system and user.split("[PERSONA]")[1] == real_user.split("[PERSONA]")[1]
            assert call["waits_for"] and f"<{call['waits_for'][0]}'s reply, at run time>" in user


def _schema_reply(req: ModelRequest) -> dict[str, object]:
    from moot.models.testing import schema_instance

    assert req.json_schema is not None
    return dict(schema_instance(req.json_schema))


def test_dry_run_text_is_readable_and_calls_no_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "Is tea good?", "--protocol", "panel", "--dry-run", "--model", "never:x"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("=== round 1 · analyst · model never:x · reply prt · max_tokens")
    assert "=== round 1 · critic · model never:x · reply prt · max_tokens 500, after analyst ===" in out
    assert "--- system ---" in out and "[TOPIC]\nIs tea good?" in out


def test_dry_run_with_a_batch_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topics = tmp_path / "t.jsonl"
    topics.write_text('"A?"\n')
    argv = ["run", "--input", str(topics), "--output", str(tmp_path / "o.jsonl"), "--dry-run"]
    assert main(argv) == 2
    assert "--dry-run is for a single debate" in capsys.readouterr().err
