"""Rate-limited warnings per key (a backend id), so a failing backend costs a few log lines.

A backend whose scrape fails 20 times a second must not write 20 lines a second, nor a
traceback each time. `LogLimit.warn(key, ...)` logs the first failure of a key at once and
then at most one line per `every_s` seconds while it keeps failing, counting the failures it
held back; `clear(key)` (on recovery) says whether the key had been failing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(slots=True)
class _Streak:
    logged_at: float
    held_back: int = 0


class LogLimit:
    """Per-key warnings on `logger`, at most one per `every_s` seconds of `clock`."""

    def __init__(
        self, logger: logging.Logger, clock: Callable[[], float], every_s: float = 60.0
    ) -> None:
        self._log = logger
        self._clock = clock
        self._every_s = every_s
        self._streaks: dict[str, _Streak] = {}

    def warn(self, key: str, msg: str, *args: object) -> None:
        now = self._clock()
        streak = self._streaks.get(key)
        if streak is None:
            self._streaks[key] = _Streak(now)
            self._log.warning(msg, *args)
        elif now - streak.logged_at >= self._every_s:
            self._log.warning(msg + " (%d more since the last report)", *args, streak.held_back)
            streak.logged_at, streak.held_back = now, 0
        else:
            streak.held_back += 1

    def failing(self, key: str) -> bool:
        return key in self._streaks

    def clear(self, key: str) -> bool:
        """Forget `key`'s failures; True if it had any."""
        return self._streaks.pop(key, None) is not None


def describe(
    exc: BaseException, expected: tuple[type[BaseException], ...], limit: int = 300
) -> str:
    """The message of an `expected` error, else `Type: message` (an unexpected one, whose
    message alone may say little); cut to `limit` characters (it may quote a whole page)."""
    text = str(exc) if isinstance(exc, expected) else f"{type(exc).__name__}: {exc}"
    return text if len(text) <= limit else text[: limit - 1] + "…"
