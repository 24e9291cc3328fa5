"""The CLI follows OpenTelemetry's environment: a provider from OTEL_* variables, or one warning."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("opentelemetry.sdk")


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run(
        [sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True, timeout=60
    )


BLOCK_OTEL = "import sys; sys.modules['opentelemetry'] = None; "  # as if the extra were not installed


def test_endpoint_set_without_the_extra_is_one_warning_line() -> None:
    done = _python(
        BLOCK_OTEL + "from moot.cli import main; sys.exit(main(['protocols']))",
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"},
    )
    assert done.returncode == 0 and "answer" in done.stdout
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("moot: warning:") and "moot[otel]" in lines[0]


def test_no_variable_no_warning_and_no_import() -> None:
    code = (
        "import sys; from moot.cli import main; rc = main(['run', 'q', '--model', 'test', '--no-store']); "
        "assert not [m for m in sys.modules if m.startswith('opentelemetry')]; sys.exit(rc)"
    )
    done = _python(code, {})
    assert done.returncode == 0 and done.stderr == ""


@pytest.mark.parametrize("var", ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"])
def test_the_variable_installs_an_sdk_provider_named_from_the_environment(var: str) -> None:
    code = (
        "from moot.app.tracing import install_from_env, active_tracer; flush = install_from_env(); "
        "from opentelemetry import trace; p = trace.get_tracer_provider(); "
        "print(type(p).__name__, p.resource.attributes['service.name'], active_tracer() is not None); flush()"
    )
    done = _python(code, {var: "http://127.0.0.1:9/v1/traces"})
    assert done.stdout.split() == ["TracerProvider", "moot", "True"], done.stderr
    named = _python(code, {var: "http://127.0.0.1:9", "OTEL_SERVICE_NAME": "pipeline-x"})
    assert named.stdout.split()[1] == "pipeline-x"


def test_an_application_provider_is_left_alone() -> None:
    code = (
        "from opentelemetry import trace; from opentelemetry.sdk.trace import TracerProvider; "
        "mine = TracerProvider(); trace.set_tracer_provider(mine); "
        "from moot.app.tracing import install_from_env; print(install_from_env() is None, "
        "trace.get_tracer_provider() is mine)"
    )
    done = _python(code, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"})
    assert done.stdout.split() == ["True", "True"], done.stderr


def test_traces_exporter_none_installs_nothing() -> None:
    code = "from moot.app.tracing import install_from_env; print(install_from_env() is None)"
    done = _python(
        code, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_TRACES_EXPORTER": "none"}
    )
    assert done.stdout.split() == ["True"] and done.stderr == ""


BLOCK_GRPC = "import sys; sys.modules['opentelemetry.exporter.otlp.proto.grpc'] = None; "  # extra missing


@pytest.mark.parametrize("var", ["OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"])
def test_grpc_without_its_exporter_is_one_warning_naming_the_extra(var: str) -> None:
    done = _python(
        BLOCK_GRPC + "from moot.cli import main; sys.exit(main(['protocols']))",
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", var: "grpc"},
    )
    assert done.returncode == 0 and "answer" in done.stdout
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("moot: warning:") and "moot[otel-grpc]" in lines[0]


def test_an_exporter_that_is_not_installed_is_one_warning() -> None:
    code = "from moot.app.tracing import install_from_env; print(install_from_env() is None)"
    done = _python(code, {"OTEL_TRACES_EXPORTER": "no-such-exporter"})
    lines = done.stderr.splitlines()
    assert done.stdout.split() == ["True"] and len(lines) == 1 and "'no-such-exporter'" in lines[0]


def test_the_console_exporter_prints_spans_on_stderr_not_stdout() -> None:
    code = (
        "from moot.cli import main; import sys; "
        "sys.exit(main(['run', 'q', '--model', 'test', '--no-store', '--json']))"
    )
    done = _python(code, {"OTEL_TRACES_EXPORTER": "console"})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["final_answer"]  # stdout is the command's output only
    assert '"name": "invoke_workflow answer"' in done.stderr and '"name": "chat schema"' in done.stderr


def test_the_sampler_comes_from_the_environment() -> None:
    code = (
        "from moot.app.tracing import install_from_env; flush = install_from_env(); "
        "from opentelemetry import trace; "
        "print(trace.get_tracer_provider().sampler.get_description()); flush()"
    )
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0.25",
    }
    done = _python(code, env)
    assert "TraceIdRatioBased{0.25}" in done.stdout, done.stderr
