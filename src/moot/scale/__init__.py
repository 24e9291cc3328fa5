"""Scale-out: ``moot bench`` units and ABSA batches on a Ray cluster.

Importing this package does not import Ray; Ray is imported when a run asks for it
(``--ray``), and a missing install fails with one line naming the ``moot[ray]`` extra.
"""

from __future__ import annotations

from ._cluster import RAY_EXTRA, RayOptions, import_ray

__all__ = ["RAY_EXTRA", "RayOptions", "import_ray"]
