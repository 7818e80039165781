"""Which backend the engine tokenizer asks: `healthy_backend_picker(pool)` makes the
`pick_backend(model)` callable from the gateway's backend pool.

Rule: among the healthy backends serving `model` (listed by its `/v1/models` or configured),
the one with the fewest requests in flight (ties: pool order); None when there is none. It
is called only on a cache miss.
"""

from __future__ import annotations

from gateway.tokens.engine import PickBackend
from health.pool import Backend, BackendPool


def healthy_backend_picker(pool: BackendPool) -> PickBackend:
    """`model -> base URL | None` over `pool`'s healthy backends serving `model`."""

    def pick(model: str) -> str | None:
        best: Backend | None = None
        for backend in pool.healthy():
            if model in backend.models and (best is None or backend.in_flight < best.in_flight):
                best = backend
        return best.spec.url if best is not None else None

    return pick
