"""Argument checks shared by the plugin factories.

A typo in the config file must fail at start-up, so factories name every parameter they do
not accept instead of silently ignoring it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any


def check_plugin_args(
    name: str,
    params: Mapping[str, Any],
    accepted: Collection[str] = (),
) -> None:
    """Raise ValueError unless `name` is non-empty and `params` has only `accepted` keys."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"plugin name must be a non-empty string, got {name!r}")
    if not isinstance(params, Mapping):
        raise ValueError(f"params must be a mapping, got {type(params).__name__}")
    unknown = sorted(repr(key) for key in params if key not in accepted)
    if unknown:
        allowed = ", ".join(sorted(accepted)) or "none"
        raise ValueError(f"unknown parameter(s) {', '.join(unknown)} (accepted: {allowed})")
