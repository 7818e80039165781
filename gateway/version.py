"""The installed kvgate's version (`kvgate --version`, `kvgate_build_info`, the trace's scope)."""

from __future__ import annotations

import importlib.metadata


def installed_version() -> str | None:
    """The installed distribution's version; None when run from a source tree."""
    try:
        return importlib.metadata.version("kvgate")
    except importlib.metadata.PackageNotFoundError:
        return None
