"""Shared fixtures: unit tests never reach a real model."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from moot import models
from moot.models import base
from moot.models.base import Model

RegisterProvider = Callable[[str, Callable[[str], Model]], None]


@pytest.fixture(autouse=True)
def _block_model_requests(request: pytest.FixtureRequest) -> Iterator[None]:
    """Disable real model calls unless the test is marked ``integration``."""
    allowed = request.node.get_closest_marker("integration") is not None
    old = base.ALLOW_MODEL_REQUESTS
    base.ALLOW_MODEL_REQUESTS = allowed
    yield
    base.ALLOW_MODEL_REQUESTS = old


@pytest.fixture(autouse=True)
def _private_run_store(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """CLI runs record into a store of their own, never into ``./.moot`` of the checkout."""
    monkeypatch.setenv("MOOT_STORE", str(tmp_path_factory.mktemp("store") / "runs.db"))
    # The same for the response cache of --cache / cache=True.
    monkeypatch.setenv("MOOT_CACHE", str(tmp_path_factory.mktemp("cache") / "cache.db"))
    # moot's own cache folder (structured modes endpoints refused): never the user's.
    monkeypatch.setenv("MOOT_CACHE_DIR", str(tmp_path_factory.mktemp("moot-cache")))


@pytest.fixture
def fake_provider() -> Iterator[RegisterProvider]:
    """``register(name, factory)``: a provider for this test only.

    Afterwards the provider and every model resolved through it (``name:...`` in the
    process-wide cache) are removed, so no test sees another's instances.
    """
    names: list[str] = []

    def register(name: str, factory: Callable[[str], Model]) -> None:
        models.register_provider(name, factory)
        names.append(name)

    yield register
    for name in names:
        models._PROVIDERS.pop(name, None)
        for key in [k for k in models._CACHE if k.startswith(f"{name}:")]:
            del models._CACHE[key]


@pytest.fixture
def filled(
    tmp_path: Path, fake_provider: RegisterProvider, capsys: pytest.CaptureFixture[str]
) -> dict[str, str]:
    """The run store filled by real CLI runs of every kind (``runs/filled.py``): run ids by name."""
    from runs.filled import fill  # imported here: it loads the bench helpers, which most tests never need

    ids = fill(fake_provider, tmp_path)
    capsys.readouterr()  # the runs' own output is not what the tests look at
    return ids
