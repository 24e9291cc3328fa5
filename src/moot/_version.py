"""The package version (one place, so modules below ``moot`` need not import the package)."""

__version__ = "0.1.0"
