"""Without --ray, Ray is never imported; with it but without Ray installed, one line names the extra."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from moot.errors import UsageError
from moot.scale import RAY_EXTRA, RayOptions, import_ray

_SCRIPT = """
import sys
from moot.cli import main
code = main(["bench", "--model", "test", "--methods", "single", "--n", "2", "--no-plots",
             "--out", sys.argv[1], "--no-store"])
print("exit", code, "ray imported" if "ray" in sys.modules else "ray not imported")
"""


def test_a_bench_without_ray_never_imports_it(tmp_path: Path) -> None:
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = os.environ | {"PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.stdout.strip().splitlines()[-1] == "exit 0 ray not imported", done.stderr
    assert (tmp_path / "out" / "report.md").is_file()


def test_missing_ray_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    with pytest.raises(UsageError, match=r"moot\[ray\]") as err:
        import_ray()
    assert RAY_EXTRA in str(err.value)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"address": " "}, "empty address"),
        ({"workers": 0}, "--ray-workers"),
        ({"concurrency": 0}, "per-worker"),
    ],
)
def test_bad_options_are_usage_errors(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        RayOptions(**kwargs)  # type: ignore[arg-type]


def test_an_address_nothing_answers_at_fails_at_once() -> None:
    from moot.scale._cluster import _check_reachable

    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(UsageError, match="no Ray cluster answers there"):
        _check_reachable(f"127.0.0.1:{port}")
    assert time.monotonic() - started < 5
    with pytest.raises(UsageError, match="expected local, auto, HOST:PORT"):
        _check_reachable("somewhere")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        _check_reachable(f"ray://127.0.0.1:{server.getsockname()[1]}")  # answers: no error


def test_starting_a_cluster_keeps_the_callers_sigterm_handler() -> None:
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'moot[ray]')")
    from moot.scale import connect

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # what moot bench installs: save the finished units, print the hint

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        with connect(RayOptions(address="local", workers=1)) as connected:
            assert connected.is_initialized()
            assert signal.getsignal(signal.SIGTERM) is handler  # ray.init's own would exit at once
        assert not ray.is_initialized()  # the cluster started for the run is stopped after it
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["bench", "--ray"], ["bench", "--ray", "auto"]),
        (["bench", "--ray", "--ray-workers", "2"], ["bench", "--ray", "auto", "--ray-workers", "2"]),
        (["bench", "--ray", "local", "--n", "3"], ["bench", "--ray", "local", "--n", "3"]),
        (["bench", "--ray", "10.0.0.5:6379"], ["bench", "--ray", "10.0.0.5:6379"]),
        (["run", "--", "--ray"], ["run", "--", "--ray"]),  # after --, an argument, not an option
    ],
)
def test_ray_without_an_address_means_auto(args: list[str], expected: list[str]) -> None:
    from moot.cli._ray_options import default_ray_address

    assert default_ray_address(args) == expected
