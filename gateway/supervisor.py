"""Supervision of the gateway's background loops (probes, scrapes, recorder, pod discovery).

Each loop is a coroutine factory that runs until cancelled. `Supervisor.run()` runs them all
side by side; a loop that raises is logged (its traceback the first time, one line after)
and started again after a backoff of `first_backoff_s`, doubling to `max_backoff_s`, reset
once the loop has run for `max_backoff_s` without failing. One loop's crash never cancels
another (a bare task group would cancel every sibling). A loop that returns is not started
again: these loops are meant to run forever, so it shows `failed`.

Loops can come and go while `run()` runs (a discovered pod's KV-event subscriber): `add`
starts the new loop at once, `remove` cancels it and drops it from the report.

State per loop, for `/ready` and `/admin/backends`: `running`, `restarting` (waiting out its
backoff) or `failed`. Cancelling `run()` cancels every loop; `CancelledError` is never
swallowed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Literal

log = logging.getLogger(__name__)

LoopState = Literal["running", "restarting", "failed"]
LoopFactory = Callable[[], Coroutine[Any, Any, None]]


@dataclass(slots=True)
class _Loop:
    """One supervised loop; a removed loop's record is dropped, so its task's last writes
    never reach a loop added later under the same name."""

    factory: LoopFactory
    state: LoopState = "restarting"  # not started yet counts as restarting
    task: asyncio.Task[None] | None = None


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
        self._loops: dict[str, _Loop] = {}
        self._group: asyncio.TaskGroup | None = None  # while `run()` runs

    def add(self, name: str, factory: LoopFactory) -> None:
        """Supervise `factory()` under `name`; started at once if `run()` is running."""
        if name in self._loops:
            raise ValueError(f"loop {name!r} is already supervised")
        loop = self._loops[name] = _Loop(factory)
        if self._group is not None:
            self._start(name, loop, self._group)

    def remove(self, name: str) -> None:
        """Stop supervising `name`: its task is cancelled and it leaves the report (no-op
        for an unknown name)."""
        loop = self._loops.pop(name, None)
        if loop is not None and loop.task is not None:
            loop.task.cancel()

    def states(self) -> dict[str, LoopState]:
        """Each loop's state; a loop not started yet is reported `restarting`."""
        return {name: loop.state for name, loop in self._loops.items()}

    def running(self, name: str) -> bool:
        loop = self._loops.get(name)
        return loop is not None and loop.state == "running"

    async def run(self) -> None:
        """Run every loop until cancelled."""
        try:
            async with asyncio.TaskGroup() as tg:
                self._group = tg
                for name, loop in self._loops.items():
                    self._start(name, loop, tg)
                await asyncio.Event().wait()  # the group stays open for loops added later
        finally:
            self._group = None

    def _start(self, name: str, loop: _Loop, tg: asyncio.TaskGroup) -> None:
        loop.task = tg.create_task(self._supervise(name, loop), name=name)

    async def _supervise(self, name: str, loop: _Loop) -> None:
        backoff, crashes = self._first_backoff_s, 0
        while True:
            loop.state = "running"
            started = self._clock()
            try:
                await loop.factory()
            except Exception:  # CancelledError is not an Exception: it passes
                if self._clock() - started >= self._max_backoff_s:
                    backoff = self._first_backoff_s  # it had recovered: start over
                crashes += 1
                loop.state = "restarting"
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
            loop.state = "failed"
            log.error("background loop %s ended on its own; not restarted", name)
            return
