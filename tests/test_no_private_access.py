"""moot's source uses other packages only through their public API, and never rewrites them.

An ``ast`` pass over every module of ``src/moot`` fails on:

* ``x._name``: an attribute whose name starts with one underscore (not a dunder) on anything but
  ``self``, ``cls``, ``super()``, a name bound to a moot import or defined at the module's top;
* ``getattr`` / ``setattr`` / ``hasattr`` / ``delattr`` with such a name as a literal, on the same;
* ``from pkg import _name``, and any import of a private module (``pkg._mod``) of another package;
* a private module of another package named in a string given to ``importlib.import_module`` or
  looked up in ``sys.modules`` (``sys.modules.get("pkg._mod")``);
* writing to ``sys.modules`` (``sys.modules[...] = ...``, ``del``, ``update``, ``setdefault``...);
* writing to another package's module or class: ``setattr(mod, ...)``, ``mod.attr = ...``.

A private name of another package is an implementation detail: a release renames it and moot
breaks, or worse, silently stops doing what it did (issue 33). moot's own privates reached from
another of its modules are listed below, each where it is used: a short list, kept honest (an entry
no longer found in its file fails the test).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "moot"

# moot's own private names used across its objects: (path under src/, the expression).
ALLOWED = {
    ("moot/bench/methods.py", "ctx._first_round"),  # the bench's method context, same package
    ("moot/bench/methods.py", "ctx._ask"),
    ("moot/absa/config.py", "out._protocol"),  # the config's own cached protocol (same class)
    ("moot/serve/service.py", "self._service._admitted"),  # the admission of the same module
    ("moot/serve/service.py", "self._service._slots"),
    ("moot/models/limits.py", "ep._open_until"),  # the endpoint class of the same module
    ("moot/observe.py", "handle._call"),  # RunHandle of the same module
    ("moot/runs/recording.py", "rec._seq"),  # Recording of the same module
}

_ATTR_FUNCTIONS = {"getattr", "setattr", "hasattr", "delattr"}
_SYS_MODULES_WRITES = {"update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__"}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _is_moot(module: str) -> bool:
    return module == "moot" or module.startswith("moot.")


def _private_module(dotted: str) -> bool:
    return not _is_moot(dotted) and any(_private(part) for part in dotted.split("."))


def _is_sys_modules(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "modules"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    )


class _Scan(ast.NodeVisitor):
    """Finds the uses above in one module: (line, what) pairs in ``found``."""

    def __init__(self, tree: ast.Module) -> None:
        self.found: list[tuple[int, str]] = []
        self.foreign: set[str] = set()  # names bound to another package's modules or objects
        self.own: set[str] = {"self", "cls"}  # names bound to moot's, or defined at the top
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    bound = alias.asname or alias.name.split(".")[0]
                    (self.own if _is_moot(alias.name) else self.foreign).add(bound)
            elif isinstance(node, ast.ImportFrom):
                internal = node.level > 0 or _is_moot(node.module or "")
                for alias in node.names:
                    (self.own if internal else self.foreign).add(alias.asname or alias.name)
        for node in tree.body:
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                self.own.add(node.name)
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                self.own.update(t.id for t in targets if isinstance(t, ast.Name))
        self.foreign -= self.own

    def _say(self, node: ast.AST, what: str) -> None:
        self.found.append((getattr(node, "lineno", 0), what))

    def _ours(self, base: ast.expr) -> bool:
        if isinstance(base, ast.Name):
            return base.id in self.own
        return isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "super"

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if _private_module(alias.name):
                self._say(node, f"import {alias.name}")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level == 0 and not _is_moot(module):
            if _private_module(module):
                self._say(node, f"from {module} import ...")
            for alias in node.names:
                if _private(alias.name):
                    self._say(node, f"from {module} import {alias.name}")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if _private(node.attr) and not self._ours(node.value):
            self._say(node, ast.unparse(node))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id in _ATTR_FUNCTIONS and len(node.args) >= 2:
            target, name = node.args[0], node.args[1]
            if isinstance(name, ast.Constant) and isinstance(name.value, str) and _private(name.value):
                if not self._ours(target):
                    self._say(node, ast.unparse(node))
            if (
                func.id in ("setattr", "delattr")
                and isinstance(target, ast.Name)
                and target.id in self.foreign
            ):
                self._say(node, ast.unparse(node))
        if isinstance(func, ast.Attribute):
            if _is_sys_modules(func.value) and func.attr in _SYS_MODULES_WRITES:
                self._say(node, ast.unparse(node))
            looks_up = (_is_sys_modules(func.value) and func.attr == "get") or func.attr == "import_module"
            if looks_up and node.args:
                name = node.args[0]
                if (
                    isinstance(name, ast.Constant)
                    and isinstance(name.value, str)
                    and _private_module(name.value)
                ):
                    self._say(node, ast.unparse(node))
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if _is_sys_modules(node.value):
            key = node.slice
            if not isinstance(node.ctx, ast.Load):
                self._say(node, f"{ast.unparse(node)} (written)")
            elif isinstance(key, ast.Constant) and isinstance(key.value, str) and _private_module(key.value):
                self._say(node, ast.unparse(node))
        self.generic_visit(node)

    def _assigned(self, target: ast.expr) -> None:
        # mod.attr = ... (or mod.a.b = ...) where mod is another package's module or class.
        base = target
        while isinstance(base, ast.Attribute):
            base = base.value
        if target is not base and isinstance(base, ast.Name) and base.id in self.foreign:
            self._say(target, f"{ast.unparse(target)} = ...")

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._assigned(target)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._assigned(node.target)
        self.generic_visit(node)


def scan(source: str) -> list[tuple[int, str]]:
    """The private uses in one module's source (see the module docstring)."""
    tree = ast.parse(source)
    visitor = _Scan(tree)
    visitor.visit(tree)
    return visitor.found


def test_src_uses_no_private_name_of_another_package() -> None:
    found, seen = [], set()
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC.parent).as_posix()
        for line, what in scan(path.read_text(encoding="utf-8")):
            if (rel, what) in ALLOWED:
                seen.add((rel, what))
            else:
                found.append(f"{rel}:{line}: {what}")
    assert not found, "private access (see tests/test_no_private_access.py):\n" + "\n".join(found)
    # An entry whose file is still there but no longer uses it goes from the list (a deleted file's
    # entries are left alone: another branch may delete it).
    stale = {(rel, what) for rel, what in ALLOWED - seen if (SRC.parent / rel).exists()}
    assert not stale, f"allow-list entries no longer used: {sorted(stale)}"


@pytest.mark.parametrize(
    "source",
    [
        "import rich.console\nrich.console.Console._render_buffer",
        "from rich.console import Console\nclass C(Console):\n    def f(self, c): return c._render_buffer",
        "import llama_cpp._utils",
        "from opentelemetry.sdk._configuration import x",
        "from opentelemetry.sdk.trace import _Span",
        "import sys\nsys.modules['opentelemetry.x'] = object()",
        "import sys\ndel sys.modules['x']",
        "import sys\nsys.modules.setdefault('x', None)",
        "import sys\nu = sys.modules.get('llama_cpp._utils')",
        "import importlib\nimportlib.import_module('a._b')",
        "import exporter_mod\nexporter_mod.encode_spans = len",
        "import exporter_mod\nsetattr(exporter_mod, 'encode_spans', len)",
        "def f(x):\n    return getattr(x, '_client')",
        "import logging\nlogging.root.manager._clear_cache()",
    ],
)
def test_the_scan_finds(source: str) -> None:
    assert scan(source), source


@pytest.mark.parametrize(
    "source",
    [
        "class A:\n    def f(self):\n        return self._x, super()._y",
        "from . import store\nstore._private",
        "import moot.redact as redact\nredact._PATTERNS",
        "_cache = {}\n_cache.clear()",
        "import sys\nm = sys.modules.get('opentelemetry.trace')",
        "from .base import Model\nModel._registry",
        "class A:\n    pass\nA._x = 1",
    ],
)
def test_the_scan_leaves_alone(source: str) -> None:
    assert scan(source) == [], source
