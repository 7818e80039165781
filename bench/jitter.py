"""Seeded arrival jitter: the same schedule with a fresh draw of its ms-scale timing.

Live runs never repeat their timing to the millisecond, and near saturation (or with several
gateways) that timing decides where requests go. `jittered` sends every request of a
schedule `uniform(0, max_s)` later (`random.Random(seed)`), in the new order of their
times: the fidelity check gives both sides each repetition's draw (`bench.fidelity`), the
live regime map's open loops take one per jitter seed (`bench.regime.live`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace
from operator import attrgetter
from typing import Any, TypeVar

T = TypeVar("T")


def jittered(items: Sequence[T], max_s: float, seed: int, *, at: str = "arrival_s") -> list[T]:
    """Each of `items` (frozen dataclasses timed by their field `at`, seconds) up to `max_s`
    later, sorted by the new times (a stable sort: below the gap between two of them their
    order stays)."""
    rng = random.Random(seed)
    shift: dict[str, Any] = {}
    shifted = []
    for item in items:
        shift[at] = getattr(item, at) + rng.uniform(0, max_s)
        shifted.append(replace(item, **shift))  # type: ignore[type-var]  # a dataclass
    return sorted(shifted, key=attrgetter(at))
