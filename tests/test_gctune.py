"""moot.tuned_gc: the collector set for many calls in flight, by the moot command and on request."""

from __future__ import annotations

import gc
import subprocess
import sys
from collections.abc import Iterator

import pytest

from conftest import RegisterProvider
from moot import tuned_gc
from moot.cli import main
from moot.gctune import GEN0_THRESHOLD
from moot.models import FunctionModel, ModelRequest


@pytest.fixture(autouse=True)
def python_defaults() -> Iterator[None]:
    """Each test starts from CPython's defaults and leaves the process as it found it."""
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*saved)


def test_tuned_gc_raises_the_thresholds_and_restores_them() -> None:
    with tuned_gc():
        assert gc.get_threshold() == (GEN0_THRESHOLD, 20, 20)
        with tuned_gc(threshold0=50):  # nested: the outer settings stay, and are restored once
            assert gc.get_threshold() == (GEN0_THRESHOLD, 20, 20)
        assert gc.get_threshold() == (GEN0_THRESHOLD, 20, 20)
    assert gc.get_threshold() == (700, 10, 10)


def test_tuned_gc_keeps_higher_thresholds_and_restores_after_an_error() -> None:
    gc.set_threshold(200_000, 30, 5)
    with pytest.raises(RuntimeError), tuned_gc():
        assert gc.get_threshold() == (200_000, 30, 20)
        raise RuntimeError("boom")
    assert gc.get_threshold() == (200_000, 30, 5)


def _thresholds_seen(fake_provider: RegisterProvider) -> list[tuple[int, int, int]]:
    seen: list[tuple[int, int, int]] = []

    def reply(request: ModelRequest) -> str:
        seen.append(gc.get_threshold())
        return "Because."

    fake_provider("gcseen", lambda rest: FunctionModel(reply))
    return seen


def test_the_moot_command_runs_under_it(
    fake_provider: RegisterProvider, capsys: pytest.CaptureFixture[str]
) -> None:
    seen = _thresholds_seen(fake_provider)
    assert main(["run", "Why?", "--model", "gcseen:x", "--json", "--no-store"]) in (0, 1)
    assert seen and set(seen) == {(GEN0_THRESHOLD, 20, 20)}
    assert gc.get_threshold() == (700, 10, 10)  # an in-process call hands the defaults back


def test_moot_gc_default_leaves_the_collector_alone(
    fake_provider: RegisterProvider, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MOOT_GC", "default")
    seen = _thresholds_seen(fake_provider)
    assert main(["run", "Why?", "--model", "gcseen:x", "--json", "--no-store"]) in (0, 1)
    assert seen and set(seen) == {(700, 10, 10)}


def test_the_moot_process_skips_the_last_full_collection_and_an_in_process_call_does_not(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    frozen: list[int] = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(1))
    assert main(["--version"]) == 0
    assert frozen == []  # a program calling main() lives on: its collector is left whole
    monkeypatch.setattr("sys.argv", ["moot", "--version"])
    assert main() == 0
    assert frozen == [1]  # the console script: the process ends with this call


def test_the_moot_command_exits_with_its_objects_frozen() -> None:
    code = (
        "import gc, sys; from moot.cli import main; sys.argv = ['moot', '--version']; "
        "main(); print(gc.get_freeze_count())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert int(out.split()[-1]) > 10_000  # every object of the imports, spared the exit's last pass
