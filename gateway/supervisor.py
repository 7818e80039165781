"""Supervision of the gateway's background loops (probes, scrapes, recorder, pod discovery).

Each loop is a coroutine factory that runs until cancelled. `Supervisor.run()` runs them all
side by side; a loop that raises is logged (its traceback the first time, one line after)
and started again after a backoff of `first_backoff_s`, doubling to `max_backoff_s`, reset
once the loop has run for `max_backoff_s` without failing. One loop's crash never cancels
another (a bare task group would cancel every sibling). A loop that returns is not started
again: these loops are meant to run forever, so it shows `failed`.

State per loop, for `/ready` and `/admin/backends`: `running`, `restarting` (waiting out its
backoff) or `failed`. Cancelling `run()` cancels every loop; `CancelledError` is never
swallowed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any, Literal

log = logging.getLogger(__name__)

LoopState = Literal["running", "restarting", "failed"]
LoopFactory = Callable[[], Coroutine[Any, Any, None]]


class Supervisor:
    """Runs named background loops, restarting a crashed one without disturbing the rest."""

    def __init__(
        self,
        first_backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._first_backoff_s = first_backoff_s
        self._max_backoff_s = max_backoff_s
        self._clock = clock
        self._loops: dict[str, LoopFactory] = {}
        self._states: dict[str, LoopState] = {}

    def add(self, name: str, factory: LoopFactory) -> None:
        """Supervise `factory()` under `name` (before `run`)."""
        if name in self._loops:
            raise ValueError(f"loop {name!r} is already supervised")
        self._loops[name] = factory

    def states(self) -> dict[str, LoopState]:
        """Each loop's state; a loop not started yet is reported `restarting`."""
        return {name: self._states.get(name, "restarting") for name in self._loops}

    def running(self, name: str) -> bool:
        return self._states.get(name) == "running"

    async def run(self) -> None:
        """Run every loop until cancelled."""
        async with asyncio.TaskGroup() as tg:
            for name, factory in self._loops.items():
                tg.create_task(self._supervise(name, factory), name=name)

    async def _supervise(self, name: str, factory: LoopFactory) -> None:
        backoff, crashes = self._first_backoff_s, 0
        while True:
            self._states[name] = "running"
            started = self._clock()
            try:
                await factory()
            except Exception:  # CancelledError is not an Exception: it passes
                if self._clock() - started >= self._max_backoff_s:
                    backoff = self._first_backoff_s  # it had recovered: start over
                crashes += 1
                self._states[name] = "restarting"
                log.error(
                    "background loop %s crashed (%d times), restarting in %.1f s",
                    name,
                    crashes,
                    backoff,
                    exc_info=crashes == 1,
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self._max_backoff_s)
                continue
            self._states[name] = "failed"
            log.error("background loop %s ended on its own; not restarted", name)
            return
