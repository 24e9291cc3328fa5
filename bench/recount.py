"""Recount a ``moot bench`` run from its ``results.jsonl`` alone and compare with its report.

Usage::

    python bench/recount.py OUT_DIR [OUT_DIR ...]

For each method it counts items, right answers, parse failures and lenient right answers,
computes accuracy, the Wilson 95% interval, lenient accuracy and calls per item, and the
majority-class baseline over the run's items, with none of moot's code: only the standard
library and the stored records. A unit whose debate fell back (``fallback``, or an older
record's ``fallback: ...`` note) is not scored: it is counted under "fell back" and left out
of every other figure; a later line of the same unit (a resume's rerun) replaces it. Each
figure is then looked up in the row of ``report.md``'s results table for that method. Exit
status 1 when any figure differs, so a report that does not match its own records is caught.
"""

from __future__ import annotations

import json
import math
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

Z95 = 1.959963984540054


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _wilson(k: int, n: int) -> tuple[float, float]:
    """Wilson score interval; the bounds are exact at 0/n and n/n, as in the report."""
    p, z2 = k / n, Z95 * Z95
    center = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return (0.0 if k == 0 else center - half, 1.0 if k == n else center + half)


def _same(a: Any, b: Any) -> bool:
    """Gold and answer compare as numbers when both are numbers, else as text."""
    if a is None or b is None:
        return False
    try:
        return math.isclose(float(a), float(b), rel_tol=0, abs_tol=1e-9)
    except ValueError:
        return str(a).strip().lower() == str(b).strip().lower()


def _fell_back(r: dict[str, Any]) -> bool:
    return bool(r.get("fallback")) or str(r.get("note") or "").startswith("fallback: ")


def recount(out: Path) -> list[tuple[str, str, str]]:
    """(row, expected cell text, report cell text) for every figure that was checked."""
    lines = [json.loads(line) for line in (out / "results.jsonl").read_text("utf-8").splitlines() if line]
    units: dict[tuple[str, str], dict[str, Any]] = {}
    for r in lines:
        key = (r["item_id"], r["method"])
        if key not in units or _fell_back(units[key]):
            units[key] = r
    by_method: dict[str, list[dict[str, Any]]] = defaultdict(list)
    fell: Counter[str] = Counter()
    gold: dict[str, str] = {}
    for r in units.values():
        gold[r["item_id"]] = r["gold"]
        if _fell_back(r):
            fell[r["method"]] += 1
        else:
            by_method[r["method"]].append(r)
    table = _report_rows(out / "report.md")
    checks = []
    for method in [*by_method, *(m for m in fell if m not in by_method)]:
        rows = by_method[method]
        cells = table.get(f"`{method}`", [])
        if len(cells) >= 13:  # reports written since the "fell back" column exists
            checks.append((method, str(fell[method]), cells[12]))
        n = len(rows)
        if not n:
            continue
        right = sum(_same(r["final"], r["gold"]) for r in rows)
        if right != sum(bool(r["correct"]) for r in rows):
            checks.append((method, f"{right} right by recount", f"{sum(r['correct'] for r in rows)} flagged"))
        low, high = _wilson(right, n)
        failures = sum(bool(r["parse_failed"]) for r in rows)
        lenient = sum(_same(r["lenient"], r["gold"]) for r in rows)
        calls = sum(r["calls"] for r in rows) / n
        expected = [
            str(n),
            _pct(right / n),
            f"[{_pct(low)}, {_pct(high)}]",
            None,  # round-0 vote: not recounted here
            f"{failures} ({_pct(failures / n)})",
            _pct(lenient / n),
            f"{calls:.2f}",
        ]
        for want, got in zip(expected, cells, strict=False):
            if want is not None:
                checks.append((method, want, got))
    top = Counter(gold.values()).most_common(1)[0][1]
    base = next((cells for row, cells in table.items() if "majority class" in row), [])
    if top < 2:  # every gold answer unique: the report says there is no majority class
        unique = any(row.startswith("no majority baseline") for row in table)
        shown = "(none)" if unique and not base else "(a majority row, or no note)"
        checks.append(("majority-class baseline", "(none)", shown))
    else:
        checks.append(
            ("majority-class baseline", _pct(top / len(gold)), base[1] if len(base) > 1 else "(missing)")
        )
    return checks


def _report_rows(path: Path) -> dict[str, list[str]]:
    """The results table of a report: first cell -> the other cells."""
    rows: dict[str, list[str]] = {}
    for line in path.read_text("utf-8").splitlines():
        if line.startswith("| ") and not line.startswith("| method") and not line.startswith("|--"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows.setdefault(cells[0], cells[1:])
        if line.startswith("## ") and rows:
            break
    return rows


def main(argv: list[str]) -> int:
    """Recount each folder; print every check and return 1 if any differs."""
    bad = 0
    for arg in argv or ["."]:
        for row, want, got in recount(Path(arg)):
            ok = want == got
            bad += not ok
            print(f"{'ok  ' if ok else 'DIFF'} {arg} {row}: recount {want} / report {got}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
