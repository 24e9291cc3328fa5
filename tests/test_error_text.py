"""One error class per message where moot passes a failure along (structured calls, bench units, the CLI)."""

from __future__ import annotations

from moot.errors import ModelConnectionError, RunError, error_text


def test_a_failure_passed_along_names_each_class_once() -> None:
    err = ModelConnectionError("connection refused")
    assert error_text(err) == "ModelConnectionError: connection refused"
    passed_on = RunError(error_text(err))
    assert error_text(passed_on) == "RunError: ModelConnectionError: connection refused"
    assert error_text(RunError("RunError: already said")) == "RunError: already said"
