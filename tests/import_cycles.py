"""Run-time import cycles among moot's modules, found with an AST pass (no import executed).

Every ``import``/``from ... import`` counts, at module level and inside functions, except those
under ``if TYPE_CHECKING:``. ``from pkg import name`` counts as importing ``pkg`` and, when
``name`` is a submodule, ``pkg.name``; ``import pkg.mod`` counts as importing ``pkg.mod``. A
package's ``__init__`` is the package itself. A cycle is a strongly connected group of two or
more modules. Run: ``python tests/import_cycles.py`` (``make lint`` does).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def modules(root: Path = SRC, package: str = "moot") -> dict[str, Path]:
    """Every module of ``package`` under ``root``, by dotted name."""
    out: dict[str, Path] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements, skipping ``if TYPE_CHECKING:`` bodies (their ``else`` counts)."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the moot modules it imports at run time."""
    edges: dict[str, set[str]] = {name: set() for name in mods}
    for name, path in mods.items():
        is_pkg = path.name == "__init__.py"
        here = name if is_pkg else name.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = here
                for _ in range(max(node.level - 1, 0)):
                    base = base.rpartition(".")[0]
                mod = node.module or ""
                source = (f"{base}.{mod}" if mod else base) if node.level else mod
                # The package runs first (its __init__), then the submodule, if the name is one.
                targets = [source] + [f"{source}.{alias.name}" for alias in node.names]
            for target in targets:
                while target and target not in mods:  # `import a.b.c` of a name: its module
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges[name].add(target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of two or more modules (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    sys.setrecursionlimit(10_000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(out, key=len, reverse=True)


def main() -> int:
    found = cycles(graph(modules()))
    for group in found:
        print(f"cycle of {len(group)}: {', '.join(group)}")
    print(f"{len(found)} run-time import cycles")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
