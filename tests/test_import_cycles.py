"""moot has no run-time import cycle (tests/import_cycles.py counts them; make lint runs it too)."""

from __future__ import annotations

from pathlib import Path

from import_cycles import cycles, graph, modules


def test_no_run_time_import_cycle() -> None:
    assert cycles(graph(modules())) == []


def test_the_count_sees_cycles_through_functions_and_package_inits(tmp_path: Path) -> None:
    pkg = tmp_path / "moot"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .a import x\n")
    (pkg / "a.py").write_text("def f():\n    from . import b\nx = 1\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import x\n")
    (pkg / "sub" / "__init__.py").write_text("from .c import y\n")
    (pkg / "sub" / "c.py").write_text("from . import helper\ny = 1\n")
    (pkg / "sub" / "helper.py").write_text("")
    found = cycles(graph(modules(tmp_path)))
    # a -> moot (a name of the package) -> a; sub -> sub.c -> sub; b's import is TYPE_CHECKING only
    assert found == [["moot", "moot.a"], ["moot.sub", "moot.sub.c"]]
