"""Whether a command runs on Ray, and how: the choice ``--ray``/``--ray-workers`` ask for."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import UsageError

if TYPE_CHECKING:  # pragma: no cover - moot.scale is imported only when Ray is asked for
    from ..scale import RayOptions

__all__ = ["ray_options"]


def ray_options(address: str | None, workers: int | None, concurrency: int) -> RayOptions | None:
    """The :class:`moot.scale.RayOptions` the options ask for, or None without ``--ray``.

    Raises:
        UsageError: ``--ray-workers`` without ``--ray``, or a bad value.
    """
    if address is None:
        if workers is not None:
            raise UsageError("--ray-workers needs --ray ADDRESS (e.g. --ray local)")
        return None
    from ..scale import RayOptions

    return RayOptions(address=address, workers=workers, concurrency=concurrency)
