"""Polling helpers for state that another thread (a server) updates."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


def wait_until(condition: Callable[[], bool], within: float = 5.0, step: float = 0.01) -> None:
    """Poll ``condition`` until true; AssertionError after ``within`` seconds."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition still false after {within} s")
        time.sleep(step)


async def async_wait_until(
    condition: Callable[[], bool], within: float = 5.0, step: float = 0.01
) -> None:
    """``wait_until`` for async tests: sleeps without blocking the test's loop."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition still false after {within} s")
        await asyncio.sleep(step)
