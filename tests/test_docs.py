"""The docs and the example input files cannot drift from the code.

Every file in ``examples/inputs`` is read by the reader of the command it is for; every
``moot ...`` command written in ``docs/`` names a real subcommand and real options; every
relative link in ``docs/`` and the README points at a file that exists.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer

from moot.absa import load_config
from moot.absa.dataset import load_dataset
from moot.bench.tasks import make_task
from moot.cli import load_commands
from moot.cli.absa import read_inputs
from moot.cli.arbitrate import load_reports
from moot.cli.run import load_context
from moot.cli.run_batch import read_topics
from moot.protocol import load_protocol

ROOT = Path(__file__).resolve().parents[1]
INPUTS = ROOT / "examples" / "inputs"
DOCS = sorted((ROOT / "docs").rglob("*.md"))


def test_every_example_input_is_read_by_its_command() -> None:
    assert load_context(INPUTS / "context.json")["docs"][0]["id"] == "optics"
    assert "invoice export" in load_context(INPUTS / "context.txt")
    annotation = load_context(INPUTS / "annotation.json")
    sentence = "The pasta was great but the service was slow."
    assert all(sentence[a["start"] : a["end"]] == a["term"] for a in annotation["ate"]["aspects"])
    assert load_protocol(INPUTS / "protocol.yaml").name == "two-sides"
    assert load_protocol("panel", load_protocol_overrides("overrides.yaml")).speakers() == [
        "critic",
        "analyst",
    ]
    assert [r.agent for r in load_reports(INPUTS / "reports.json")] == ["LabourEconomist", "NationalStrategy"]
    assert [i for i, _ in read_inputs(INPUTS / "sentences.jsonl")] == ["s1", "s2", "3"]
    assert [t.key for t in read_topics(INPUTS / "topics.jsonl")][:2] == ["tests-first", "sky"]
    assert len(load_dataset(INPUTS / "absa_labelled.jsonl")) == 3
    assert load_config(INPUTS / "absa_config.yaml").max_tokens == 128
    for spec, count in (("gsm8k", 2), ("mcq", 2), ("absa", 5)):
        suffix = "absa_labelled" if spec == "absa" else spec
        assert len(make_task(f"{spec}:{INPUTS / suffix}.jsonl").items(None, 0)) == count


def load_protocol_overrides(name: str) -> dict[str, object]:
    from moot.protocol import read_yaml_file

    return dict(read_yaml_file(INPUTS / name))


def _commands(text: str) -> list[str]:
    """``moot ...`` command lines of the fenced sh/bash blocks (continuation lines joined)."""
    out = []
    for block in re.findall(r"```(?:sh|bash)\n(.*?)```", text, flags=re.S):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            line = line.split(" #")[0].strip()
            words = shlex.split(line) if line else []
            while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):  # VAR=value prefixes
                words.pop(0)
            if words and words[0] in ("moot", ".venv/bin/moot"):
                out.append(shlex.join(words[1:]))
    return out


def check_command(argv: list[str]) -> None:
    """Fail unless ``argv`` (after ``moot``) names a real subcommand and only its real options."""
    command: Any = typer.main.get_command(load_commands())
    args = list(argv)
    # hasattr, not isinstance(click.Group): newer typer vendors its own click.
    while hasattr(command, "commands") and args and not args[0].startswith("-"):
        name = args.pop(0)
        assert name in command.commands, f"moot has no subcommand {name!r}: moot {shlex.join(argv)}"
        command = command.commands[name]
    known = {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)}
    for word in args:
        if word.startswith("--"):
            flag = word.split("=")[0]
            assert flag in known, f"{flag} is not an option of: moot {shlex.join(argv)}"


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_commands_and_links_are_real(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    for command in _commands(text):
        check_command(shlex.split(command))
    for target in re.findall(r"\]\((?!https?:|#)([^)#]+)", text):
        assert (page.parent / target).resolve().exists(), f"{page.name} links to a missing {target}"
    for path in re.findall(r"examples/inputs/[\w.]+", text):
        assert (ROOT / path).is_file(), f"{page.name} names a missing {path}"


def test_license_matches_pyproject() -> None:
    license_text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'license = { text = "MIT" }' in pyproject and license_text.startswith("MIT License")


def test_no_log_file_is_committed() -> None:
    """A server's log is output, not source (``.langgraph-dev.log`` was committed at the root once).

    ``tests/test_langgraph_server.py`` writes the ``langgraph dev`` log under a temporary folder, and
    ``.gitignore`` leaves out ``*.log``.
    """
    import shutil
    import subprocess

    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(
        [git, "ls-files", "--", "*.log"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert tracked == [], f"log files are committed: {tracked}"
    ignored = subprocess.run([git, "check-ignore", "-q", ".langgraph-dev.log"], cwd=ROOT, check=False)
    assert ignored.returncode == 0, ".gitignore must leave out .langgraph-dev.log"
