"""One polling task per backend of a pool, following the pool's membership.

`run_per_backend(pool, loop, wanted)` starts `loop(backend)` for every backend `wanted`
accepts, starts one for each backend added later and cancels the task of each backend
removed; once per member (a data-parallel engine's ranks share its loop). Probes and metric
scrapes both run this way, so a discovered pod is polled like a configured one and a deleted
pod stops being polled.

A backend's loop that raises (it should not: probes and scrapes keep their errors) is
restarted after a backoff (1 s doubling to 60 s), its traceback logged the first time, and
no other backend's loop is disturbed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from health.pool import Backend, BackendPool

log = logging.getLogger(__name__)
_FIRST_RESTART_S = 1.0
_MAX_RESTART_S = 60.0


async def run_per_backend(
    pool: BackendPool,
    loop: Callable[[Backend], Awaitable[None]],
    wanted: Callable[[Backend], bool] = lambda _: True,
) -> None:
    """Run forever; cancel to stop (the loops are cancelled with it)."""
    running: dict[str, tuple[Backend, asyncio.Task[None]]] = {}
    async with asyncio.TaskGroup() as tg:
        while True:
            current = {b.id: b for b in pool.engines() if wanted(b)}
            for backend_id, (backend, task) in list(running.items()):
                if current.get(backend_id) is not backend:  # removed, or replaced
                    task.cancel()
                    del running[backend_id]
            for backend_id, backend in current.items():
                if backend_id not in running:
                    task = tg.create_task(_call(loop, backend), name=f"poll-{backend_id}")
                    running[backend_id] = (backend, task)
            await pool.wait_changed()


async def _call(loop: Callable[[Backend], Awaitable[None]], backend: Backend) -> None:
    delay, crashes = _FIRST_RESTART_S, 0
    while True:
        try:
            await loop(backend)
            return
        except Exception:  # CancelledError (removal, shutdown) passes
            crashes += 1
            log.error(
                "backend %s: polling loop crashed (%d times), restarting in %.0f s",
                backend.id,
                crashes,
                delay,
                exc_info=crashes == 1,
            )
        await asyncio.sleep(delay)
        delay = min(delay * 2, _MAX_RESTART_S)
