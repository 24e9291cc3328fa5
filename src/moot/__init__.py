"""moot: multi-agent LLM debate with an auditable decision.

Quick start::

    from moot import Debate

    result = Debate("answer", model="local").run_sync("Is coffee bad for you?")
    print(result.final_answer, result.usage)

The public API is listed in ``__all__``; everything else may change.
"""

from __future__ import annotations

import logging

from . import app as _app  # noqa: F401  (registers the run store's recorder: moot.observe)
from ._version import __version__
from .engine import Debate, DebateRun, EventCallback
from .errors import (
    BudgetExceeded,
    ConfigError,
    DebateTimeout,
    MissingCredentialsError,
    MissingDependencyError,
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelRequestsBlocked,
    ModelResponseError,
    ModelTimeoutError,
    MootError,
    OutputValidationError,
    RunError,
    UnknownProviderError,
    UsageError,
)
from .gctune import tuned_gc
from .models import FunctionModel, Model, ModelRequest, ModelResponse, ScriptedModel, Usage, resolve_model
from .protocol import Protocol, load_protocol, presets
from .structured import ask
from .transcript import DebateResult, Decision, Event, Persona, Round, Turn

# Failed turns and backend errors are logged under "moot" (they are in the results too); a
# library stays quiet unless the application configures logging, so no stray stderr lines.
logging.getLogger("moot").addHandler(logging.NullHandler())

__all__ = [
    "BudgetExceeded",
    "ConfigError",
    "Debate",
    "DebateResult",
    "DebateRun",
    "DebateTimeout",
    "Decision",
    "Event",
    "EventCallback",
    "FunctionModel",
    "MissingCredentialsError",
    "MissingDependencyError",
    "Model",
    "ModelConnectionError",
    "ModelError",
    "ModelHTTPError",
    "ModelRequest",
    "ModelRequestsBlocked",
    "ModelResponse",
    "ModelResponseError",
    "ModelTimeoutError",
    "MootError",
    "OutputValidationError",
    "Persona",
    "Protocol",
    "Round",
    "RunError",
    "ScriptedModel",
    "Turn",
    "UnknownProviderError",
    "Usage",
    "UsageError",
    "__version__",
    "ask",
    "load_protocol",
    "presets",
    "resolve_model",
    "tuned_gc",
]
