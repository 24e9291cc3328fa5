"""Configs cannot read files outside their folder; model text cannot drive the terminal."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from moot import Debate
from moot.cli import main
from moot.cli._safe import clean, markup
from moot.errors import ConfigError
from moot.models import ModelRequest
from moot.models.testing import FunctionModel
from moot.protocol import load_protocol

SECRET = "TOP-SECRET-LINE"
HOSTILE = (
    "\x1b]0;pwned title\x07"  # OSC: retitle the terminal
    "\x1b[2J\x1b[H"  # clear the screen, cursor home
    "visible\x1b[8mhidden\x1b[28m"  # conceal attribute
    "\x1b[3A"  # cursor up
    "\x9b2J"  # 8-bit CSI clear
    "good\rEVIL"  # carriage return overwrite
    "\u202etxt.exe"  # right-to-left override
    "[bold red]fake markup[/] [link=http://evil]x[/link]"
)


def _prompts_seen(model: FunctionModel) -> str:
    return "\n".join(m.content for r in model.requests for m in r.messages)


def _echo(req: ModelRequest) -> dict[str, object]:
    if req.metadata["phase"] == "judge":
        return {"final_answer": "done", "citations": []}
    return {"answer": "ok", "confidence": 0.5}


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A secret file next to (not inside) the config folder ``tmp_path/cfg``."""
    (tmp_path / "secret.md").write_text(SECRET, encoding="utf-8")
    (tmp_path / "cfg").mkdir()
    return tmp_path


def _config(folder: Path, prompt: str, name: str = "proto.yaml") -> Path:
    path = folder / name
    path.write_text(f"extends: answer\nspeaker_prompt: {json.dumps(prompt)}\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("ref", ["/etc/passwd", "../secret.md", "SECRET_ABS"])
def test_a_prompt_path_leaving_the_config_folder_is_refused(outside: Path, ref: str) -> None:
    ref = str(outside / "secret.md") if ref == "SECRET_ABS" else ref
    cfg = _config(outside / "cfg", ref)
    with pytest.raises(ConfigError, match="outside the config's folder") as info:
        load_protocol(cfg)
    assert "--allow-outside-paths" in str(info.value) and info.value.key == "speaker_prompt"


def test_judge_and_moderator_prompts_and_extends_are_confined_too(outside: Path) -> None:
    cfg = outside / "cfg" / "judge.yaml"
    cfg.write_text("extends: answer\njudge: {persona: synthesizer, prompt: ../secret.md}\n")
    with pytest.raises(ConfigError, match="judge.prompt"):
        load_protocol(cfg)
    (outside / "base.yaml").write_text("extends: answer\n")
    cfg.write_text("extends: ../base.yaml\n")
    with pytest.raises(ConfigError, match="extends"):
        load_protocol(cfg)


def test_a_symlink_out_of_the_folder_is_refused(outside: Path) -> None:
    (outside / "cfg" / "link.md").symlink_to(outside / "secret.md")
    with pytest.raises(ConfigError, match="outside"):
        load_protocol(_config(outside / "cfg", "link.md"))


def test_paths_resolve_against_the_config_folder_not_the_cwd(
    outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = outside / "cfg"
    (folder / "mine.md").write_text("MY OWN PROMPT", encoding="utf-8")
    (folder / "base.yaml").write_text("extends: answer\nspeaker_prompt: mine.md\n", encoding="utf-8")
    (folder / "child.yaml").write_text("extends: base.yaml\nrounds: 1\n", encoding="utf-8")
    monkeypatch.chdir(outside)  # the working directory is elsewhere
    model = FunctionModel(_echo)
    Debate(folder / "child.yaml", model=model).run_sync("Why?")
    assert "MY OWN PROMPT" in _prompts_seen(model)


def test_a_file_in_the_cwd_cannot_replace_a_shipped_prompt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "answer_speaker.md").write_text(SECRET, encoding="utf-8")
    (tmp_path / "speaker.md").write_text(SECRET, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    model = FunctionModel(_echo)
    Debate("answer", model=model, overrides={"rounds": 1}).run_sync("Why?")
    assert SECRET not in _prompts_seen(model)


def test_a_missing_prompt_fails_at_load_time(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_protocol(_config(tmp_path, "nowhere.md"))


@pytest.fixture
def spy(fake_provider: Callable[..., None]) -> FunctionModel:
    model = FunctionModel(_echo, name="spy:x")
    fake_provider("spy", lambda rest: model)
    return model


def test_cli_refuses_etc_passwd_with_one_line(
    outside: Path, spy: FunctionModel, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _config(outside / "cfg", "/etc/passwd")
    assert main(["run", "Why?", "--model", "spy:x", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "outside the config's folder" in err and "--allow-outside-paths" in err
    assert spy.requests == []


def test_cli_override_config_paths_are_confined(
    outside: Path, spy: FunctionModel, capsys: pytest.CaptureFixture[str]
) -> None:
    over = outside / "cfg" / "over.yaml"
    over.write_text("speaker_prompt: ../secret.md\n", encoding="utf-8")
    assert main(["run", "Why?", "--model", "spy:x", "--protocol", "answer", "--config", str(over)]) == 2
    assert "outside the config's folder" in capsys.readouterr().err and spy.requests == []


@pytest.mark.parametrize("how", ["flag", "env"])
def test_outside_paths_are_allowed_on_request(
    outside: Path, spy: FunctionModel, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    cfg = _config(outside / "cfg", "../secret.md")
    argv = ["run", "Why?", "--model", "spy:x", "--config", str(cfg), "--rounds", "1", "--json"]
    if how == "flag":
        argv.append("--allow-outside-paths")
    else:
        monkeypatch.setenv("MOOT_ALLOW_PATHS", "1")
    assert main(argv) == 0
    assert SECRET in _prompts_seen(spy)
    with pytest.raises(ConfigError):  # the permission ended with the command
        monkeypatch.delenv("MOOT_ALLOW_PATHS", raising=False)
        load_protocol(cfg)


def test_clean_strips_escape_sequences_and_keeps_text() -> None:
    out = clean(HOSTILE)
    assert "\x1b" not in out and "\x9b" not in out and "\x07" not in out and "\r" not in out
    assert "\u202e" not in out and "pwned" not in out
    assert "visiblehidden" in out and "good\nEVIL" in out and "txt.exe" in out
    assert clean("line 1\n\tline 2") == "line 1\n\tline 2"


def test_markup_escapes_rich_markup() -> None:
    assert markup("[bold]x[/]") == "\\[bold]x\\[/]"


def _hostile(req: ModelRequest) -> dict[str, object]:
    if req.metadata["phase"] == "judge":
        return {"final_answer": HOSTILE, "citations": [HOSTILE]}
    return {"answer": HOSTILE, "confidence": 0.5, "key_points": [HOSTILE]}


def test_model_output_cannot_drive_the_terminal(
    fake_provider: Callable[..., None], capsys: pytest.CaptureFixture[str]
) -> None:
    fake_provider("evil", lambda rest: FunctionModel(_hostile, name="evil:\x1b]0;x\x07model"))
    assert main(["run", "Why?", "--model", "evil:x", "--rounds", "1"]) == 0
    out = capsys.readouterr()
    shown = out.out + out.err
    for seq in ("\x1b", "\x9b", "\x07", "\r", "\u202e"):
        assert seq not in shown
    assert "visiblehidden" in shown.replace("\n", "").replace(" ", "").replace("│", "")
    assert "[bold red]fake markup[/]" in shown  # shown literally, not rendered as markup


def test_absa_config_paths_are_confined(outside: Path) -> None:
    from moot.absa import load_config

    folder = outside / "cfg"
    (outside / "th.json").write_text('{"min_total": 9}', encoding="utf-8")
    (folder / "th.json").write_text('{"min_total": 2.5}', encoding="utf-8")
    cfg = folder / "absa.yaml"
    cfg.write_text("debate_override: ../th.json\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="debate_override.*outside the config's folder"):
        load_config(str(cfg))
    cfg.write_text("debate:\n  speaker_prompt: /etc/passwd\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="speaker_prompt.*outside the config's folder"):
        load_config(str(cfg))
    cfg.write_text("debate_override: th.json\n", encoding="utf-8")  # next to the config: read
    assert load_config(str(cfg)).thresholds().min_total == 2.5


def test_absa_output_cannot_drive_the_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    from moot.absa import FinalResult
    from moot.cli._console import make_console
    from moot.cli.absa import print_absa_result as _print_result

    aspect = {"aspect": HOSTILE, "polarity": "negative", "confidence": 0.9, "start": None, "end": None}
    res = FinalResult(
        sentence="s", label="negative", confidence=0.9, aspects=[aspect], errors={"stage1": HOSTILE}
    )
    _print_result(res, make_console())
    shown = capsys.readouterr().out
    assert "fake markup" in shown  # the hostile text was shown...
    for seq in ("\x1b", "\x9b", "\x07", "\r", "\u202e"):  # ...without its control sequences
        assert seq not in shown


def test_arbitrate_output_cannot_drive_the_terminal(
    fake_provider: Callable[..., None], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from moot.models.testing import schema_instance

    def reply(req: ModelRequest) -> object:  # a valid ruling whose free text is hostile
        data = schema_instance(req.json_schema or {})
        return {k: HOSTILE if isinstance(v, str) and set(v) == {"x"} else v for k, v in data.items()}

    fake_provider("evil", lambda rest: FunctionModel(reply, name="evil:x"))
    reports = tmp_path / "reports.json"
    finding = {"metric": "rate", "value": 1.0, "citation": HOSTILE, "confidence": 0.9}
    pair = [{"agent": "a", "findings": [finding]}, {"agent": "b", "findings": [{**finding, "value": 9.0}]}]
    reports.write_text(json.dumps(pair), encoding="utf-8")
    main(["arbitrate", str(reports), "--model", "evil:x", "--no-store"])
    out = capsys.readouterr()
    shown = out.out + out.err
    assert "fake markup" in shown
    for seq in ("\x1b", "\x9b", "\x07", "\r", "\u202e"):
        assert seq not in shown
