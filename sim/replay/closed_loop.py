"""Closed-loop arrivals for a replay: users who send a chat's next turn after the last one.

See `sim.replay.simulator` (its module docstring) for how a replay runs them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ClosedLoop:
    """Arrivals made by users instead of the trace (see `sim.replay.simulator`)."""

    users: int
    chats: tuple[tuple[int, ...], ...]  # each chat's turns as trace indices, in turn order
    think_s: float = 0.0

    def __post_init__(self) -> None:
        if self.users < 1:
            raise ValueError("a closed loop needs users >= 1")
        if not self.think_s >= 0:
            raise ValueError("think_s must be >= 0")


def turns_of(loop: ClosedLoop | None, requests: int) -> dict[int, tuple[int, int]]:
    """A closed loop's trace index → (chat, turn); every index must be listed once."""
    if loop is None:
        return {}
    turn_of = {i: (c, k) for c, turns in enumerate(loop.chats) for k, i in enumerate(turns)}
    if len(turn_of) != requests:
        raise ValueError("a closed loop's chats must list every trace index once")
    return turn_of
