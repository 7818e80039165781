"""Argument checks shared by the plugin factories.

A typo in the config file must fail at start-up, so factories name every parameter they do
not accept instead of silently ignoring it. Config values arrive as parsed YAML, so a numeric
parameter may be an int, a float, a string or a bool: `number_param` accepts only real finite
numbers within the stated bounds, and its error names the parameter.
"""

from __future__ import annotations

import math
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


def number_param(
    params: Mapping[str, Any],
    key: str,
    default: float,
    *,
    gt: float | None = None,
    ge: float | None = None,
    le: float | None = None,
) -> float:
    """`params[key]` (or `default`) as a float; ValueError unless finite and within bounds.

    `gt`, `ge` and `le` are the bounds `value > gt`, `value >= ge` and `value <= le`.
    """
    value = params.get(key, default)
    # bool is an int subclass: `true` in YAML must not read as 1.
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # an int too large for a float
            number = math.nan
        if (
            math.isfinite(number)
            and (gt is None or number > gt)
            and (ge is None or number >= ge)
            and (le is None or number <= le)
        ):
            return number
    bounds = [f"{op} {b:g}" for op, b in ((">", gt), (">=", ge), ("<=", le)) if b is not None]
    expected = " and ".join(["a finite number", *bounds])
    raise ValueError(f"parameter {key!r} must be {expected}, got {value!r}")
