"""The README and the reference pages moved out of it cannot drift from the code.

- The synopsis in ``docs/cli.md`` (its first ``text`` block) names every command and every
  option ``--help`` has, and no other.
- Every fenced ``python`` block of the README and of those pages (``PAGES``) runs, on the
  offline ``test`` model (``model="local"`` becomes ``"test"``); every ``moot ...`` line of
  their ``sh`` blocks runs too, with ``--model`` set to ``test`` and the example paths made
  absolute. Lines that need a server or an install (``make``, ``OPENAI_BASE_URL=...``) run in
  the integration tests.
- The quickstart is exactly ``make demo`` then ``make test``, and ``make demo`` runs one bare
  ``moot run``.
- Marked ``integration``: the first Python snippet and the demo's command run as written on
  the embedded model and make a full ``answer`` debate (5 calls, no fallback); the quickstart
  against llama.cpp's server runs as written.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import socket
import subprocess
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer

from moot.cli import app, main

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
# The README's reference material moved to these pages; their snippets run as the README's did.
PAGES = [
    ROOT / "README.md",
    *(
        ROOT / "docs" / f"{name}.md"
        for name in (
            "absa",
            "bench",
            "benchmarks",
            "caching-replay",
            "cli",
            "cluster",
            "concurrency",
            "development",
            "failures",
            "langgraph",
            "models-reference",
            "protocols",
            "runs",
            "tracing-reference",
        )
    ),
]


def _blocks(lang: str, text: str = README) -> list[str]:
    return [m.group(1) for m in re.finditer(rf"```{lang}\n(.*?)```", text, flags=re.S)]


def _page_blocks(lang: str) -> list[tuple[str, int, str]]:
    """``(page, index, code)`` for every ``lang`` block of every page in ``PAGES``."""
    return [
        (page.relative_to(ROOT).as_posix(), index, code)
        for page in PAGES
        for index, code in enumerate(_blocks(lang, page.read_text(encoding="utf-8")))
    ]


def _leaf_commands() -> dict[str, Any]:
    """``{"run": <command>, "protocols show": ..., ...}`` from the real CLI."""
    out: dict[str, Any] = {}

    def walk(command: Any, path: list[str]) -> None:
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                walk(sub, [*path, name])
        else:
            out[" ".join(path)] = command

    walk(typer.main.get_command(app), [])
    return out


def _synopsis() -> dict[str, str]:
    """Synopsis entries by command path (``moot protocols`` alone lists presets)."""
    cli = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    block = re.search(r"```text\n(.*?)```", cli, flags=re.S)
    assert block, "no ```text synopsis block in docs/cli.md"
    entries: dict[str, str] = {}
    current = ""
    for line in block.group(1).splitlines():
        if line.startswith("moot "):
            words = line.split()
            path = [w for w in words[1:3] if re.fullmatch(r"[a-z][a-z-]*", w)]
            leaves = _leaf_commands()
            while path and " ".join(path) not in leaves:
                path.pop()
            current = " ".join(path)
            entries[current] = entries.get(current, "") + " " + line
        else:
            entries[current] += " " + line
    return entries


def test_synopsis_matches_help() -> None:
    entries = _synopsis()
    leaves = _leaf_commands()
    assert set(leaves) <= set(entries), f"missing from the synopsis: {set(leaves) - set(entries)}"
    for path, command in leaves.items():
        text = entries[path]
        known = {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)}
        for param in command.params:
            if param.param_type_name == "option" and "--help" not in param.opts:
                assert param.opts[0] in text, (
                    f"moot {path} has {param.opts[0]}, which the synopsis (the first ```text block of"
                    f" docs/cli.md) does not list: add it there, and say what it does below it"
                )
        for flag in re.findall(r"(?<![\w-])--[a-z][a-z-]*", text):
            assert flag in known, f"moot {path}: the synopsis has {flag}, which --help does not"
    root = typer.main.get_command(app)
    for param in root.params:
        if "--help" not in param.opts:
            assert param.opts[0] in entries[""], f"moot: {param.opts[0]} is not in the synopsis"


def test_readme_sends_users_to_no_document_they_do_not_have() -> None:
    for pattern in (
        r"\bseed \d{3}\b",
        r"\bseed's\b",
        r"\bseeds'",
        r"ADR-\d",
        r"\bSPEC [A-Z]",
        r"FIELD-NOTES",
    ):
        found = re.findall(rf".{{0,40}}{pattern}.{{0,20}}", README)
        assert not found, f"the README refers to internal design documents: {found}"
    for target in re.findall(r"\]\((?!https?:|#)([^)#]+)", README):
        assert (ROOT / target).exists(), f"the README links to a missing {target}"


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    monkeypatch.setenv("MOOT_MODEL", "test")
    monkeypatch.chdir(tmp_path)
    yield tmp_path


@pytest.mark.parametrize(
    ("page", "index", "code"),
    [pytest.param(*block, id=f"{block[0]}:{block[1]}") for block in _page_blocks("python")],
)
def test_python_snippets_run(page: str, index: int, code: str, offline: Path) -> None:
    code = code.replace('model="local"', 'model="test"')
    code = re.sub(r'"(openai|anthropic):[^"]*"', '"test"', code)
    _exec(code, f"{page} python block {index}")


def _exec(code: str, name: str) -> dict[str, Any]:
    """Run ``code`` as a module of its own (LangGraph reads a TypedDict's hints from its module)."""
    module = types.ModuleType("readme_snippet")
    sys.modules[module.__name__] = module
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(code, name, "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    return module.__dict__


def _moot_lines() -> list[list[str]]:
    lines = []
    for _page, _index, block in _page_blocks("sh"):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line.split("  #")[0]) if line.strip() else []
            if not words or words[0] not in ("moot", ".venv/bin/moot"):
                continue  # make, servers and lines with environment settings run in integration
            lines.append(words[1:])
    return lines


@pytest.mark.parametrize("argv", _moot_lines(), ids=lambda a: " ".join(a)[:60])
def test_sh_commands_run(argv: list[str], offline: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = []
    for i, word in enumerate(argv):
        if i and argv[i - 1] in ("--model", "--role-model"):
            word = "test" if argv[i - 1] == "--model" else word.split("=")[0] + "=test"
        args.append(word.replace("examples/inputs/", f"{ROOT}/examples/inputs/"))
    if args[0] == "bench" and "--n" in args:
        args[args.index("--n") + 1] = "3"  # the same command on fewer items
    if args[:2] == ["bench", "--resume"]:
        first = ["bench", "--task", "arithmetic", "--methods", "single", "--n", "2", "--model", "test"]
        assert main([*first, "--out", args[2]]) == 0
    code = main(args)
    captured = capsys.readouterr()
    assert code == 0, f"moot {shlex.join(args)} exited {code}: {captured.err[-500:]}"


# -- the same, as written, on the embedded model and on a real server (slow) -------------------


@pytest.mark.integration
def test_first_python_snippet_runs_a_full_answer_debate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MOOT_MODEL", raising=False)
    result = _exec(_blocks("python")[0], "README python block 0")["result"]
    assert result.fallback is None and result.usage.calls == 5 and result.failed_turns == 0
    assert result.final_answer


def _demo_topic() -> str:
    """The topic of the one bare ``moot run`` that ``make demo`` runs."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = re.search(r"^demo: \$\(STAMP\)\n\t(.*)$", makefile, flags=re.M)
    assert recipe, "make demo must depend on the install stamp: it installs what it runs"
    words = shlex.split(recipe.group(1))
    assert words[:2] == ["$(BIN)/moot", "run"] and len(words) == 3, "make demo is one bare moot run"
    return words[2]


def test_quickstart_is_make_demo_then_make_test() -> None:
    commands = [line.split("#")[0].strip() for line in _blocks("sh")[0].splitlines()]
    assert commands == ["make demo", "make test"]
    assert _demo_topic() in README, "the README says which debate make demo runs"


@pytest.mark.integration
def test_quickstart_runs_a_full_answer_debate(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("MOOT_MODEL", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["run", _demo_topic()]) == 0
    out = capsys.readouterr().out
    assert "5 calls" in out and "0 failed turns" in out and "demo model" in out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.integration
def test_server_quickstart_runs_as_written(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp.server", reason="the server extra (llama-cpp-python[server]) is needed")
    (block,) = [b for b in _blocks("sh") if "llama_cpp.server" in b]
    port = str(_free_port())
    venv = Path(sys.executable).parent
    script = block.replace("8011", port).replace(".venv/bin/", f"{venv}/")
    server_line, client_line = script.strip().splitlines()
    env = {k: v for k, v in os.environ.items() if k not in ("MOOT_MODEL", "OPENAI_API_KEY")}
    env["PYTHONPATH"] = f"{ROOT / 'src'}{os.pathsep}{env.get('PYTHONPATH', '')}"
    server = subprocess.Popen(
        ["bash", "-c", f"exec {server_line.rstrip(' &')}"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", int(port)), 1):
                break
            time.sleep(0.5)
        run = subprocess.run(
            ["bash", "-c", client_line + " --no-store"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "5 calls" in run.stdout and "0 failed turns" in run.stdout
