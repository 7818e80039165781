"""Reading a numeric plugin parameter with bounds, for the plugin factories.

Config values arrive as parsed YAML, so a threshold may be an int, a float, a string or a
bool; only real finite numbers within the stated bounds are accepted, and the error names the
parameter. (This belongs next to `check_plugin_args` in `scoring/params.py`; it lives here
only until that file can be edited.)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


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
