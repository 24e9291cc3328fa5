"""The resume policy of ``moot bench --resume DIR|RUN_ID`` (the application's, not the CLI's).

A resume loads the recorded task, methods, model, n, seed and limits; an option
given on the command line must agree with the record, except that ``--n`` may
grow the run and ``--methods`` may add methods (the runner supports both). Any
other difference is an error naming both values, never a silent change.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import moot.redact as redact

from ..bench.runner import RUN_FILE, BenchConfig, read_run_file
from ..errors import UsageError
from ..runs import RunStore

__all__ = [
    "RECORDED_OPTIONS",
    "Resumed",
    "find_resume",
    "merge_resume",
]


RECORDED_OPTIONS = {
    "task": "task",
    "methods": "methods",
    "model": "model",
    "n": "n",
    "seed": "seed",
    "temperature": "temperature",
    "max_tokens": "max-tokens",
    "matched": "matched",
    "matched_by": "matched-by",
    "max_errors": "max-errors",
    "exclude_conflict": "exclude-conflict",
}
"""Config field -> its option name (without ``--``): what a resume takes from the record."""


@dataclass
class Resumed:
    """What ``--resume`` found: the recorded config fields, the output folder and the store run."""

    config: dict[str, Any]
    out: Path
    run_id: str | None


def _config_fields(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k in BenchConfig.model_fields}


def find_resume(target: str, store: RunStore | None, flag: str = "--resume") -> Resumed:
    """Resolve ``--resume TARGET`` (or ``--replay``): a bench output folder, or a bench run id in the store.

    Raises:
        UsageError: neither, or the run is not a bench run.
    """
    path = Path(target)
    if path.is_dir():
        meta = path / RUN_FILE
        if not meta.is_file():
            raise UsageError(f"{flag} {target}: no {RUN_FILE} in that folder, so nothing to resume")
        data = read_run_file(meta)
        run_id = None
        if store is not None:  # continue the store's record of this folder, if it has one
            where = str(path.resolve())
            found = [r for r in store.list(kind="bench") if r.config.get("out") == where]
            run_id = found[0].id if found else None
        return Resumed(_config_fields(data), path, run_id)
    if store is None:
        raise UsageError(f"{flag} {target}: no such folder (and the run store is off, so no run id either)")
    try:
        record = store.get(target)
    except UsageError:
        raise UsageError(
            f"{flag} {target}: neither a bench output folder nor a run id in {store.path}"
        ) from None
    if record.kind != "bench":
        raise UsageError(f"{flag} {target}: run {record.id[:8]} is a {record.kind!r} run, not a bench run")
    return Resumed(_config_fields(record.config), Path(record.config["out"]), record.id)


def merge_resume(resumed: Resumed, given: dict[str, Any]) -> dict[str, Any]:
    """The recorded config with the options ``given`` on the command line checked against it.

    Raises:
        UsageError: an option contradicts the record (both values named).
    """
    cfg = dict(resumed.config)
    for key, value in given.items():
        old = cfg.get(key)
        if value == old:
            continue
        if key == "model" and isinstance(value, str) and redact.text(value) == old:
            cfg[key] = value  # the record masks the spec's credentials; the command line brings them back
            continue
        if key == "n" and old is not None and (value is None or value > old):
            cfg[key] = value  # a larger sample: the item order is prefix-stable
            continue
        if key == "methods" and isinstance(old, list) and set(old) <= set(value):
            cfg[key] = value  # more methods on the same items
            continue
        name = RECORDED_OPTIONS[key]
        raise UsageError(
            f"--resume: --{name} {value!r} contradicts the recorded run ({name} {old!r}); "
            f"drop --{name} to continue it, or start a new run with another --out"
        )
    model = cfg.get("model")
    if isinstance(model, str) and redact.MASK in model and "model" not in given:
        raise UsageError(
            f"--resume: the recorded model spec {model!r} held a credential, which is never recorded; "
            "give --model again with it"
        )
    return cfg
