"""A request in flight in the replay, from its arrival at a gateway to its last token.

`Flight.replica` and `Flight.dispatch` are the replica and the gateway's dispatch the client's
tokens come from: a whole request's, or a split P/D request's decode leg once it is sent
(before that, its prefill leg's); `Flight.engine` is where it runs, the replica itself or the
rank its data-parallel engine chose. `Flight.split` holds the rest of a split request
(`sim.replay.disaggregation`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from routing.types import RoutingRequest
from scoring.state.prefix_feed import Dispatch
from sim.replay.gateways import Counters


@dataclass(slots=True)
class Split:
    """A request that a prefill replica P computes and a decode replica D continues."""

    prefill: int  # P's position in the fleet
    decode: int  # D's
    request: RoutingRequest  # as routed: D's leg is dispatched with it
    prefill_dispatch: Dispatch[Counters]
    engine_hashes: Sequence[int]  # the prompt's, for P's engine, D's lookup and D's engine
    moved_tokens: int  # what the planner expects D to receive (the transfer line's x)
    prefilled: bool = False  # P's token came: the KV is on its way to D
    decode_ready_at: float = 0.0  # SGLang: D's API server has the request (it joins the room)


@dataclass(slots=True)
class Flight:
    """A request between its arrival and its last token."""

    replica: int
    arrival: float
    dispatch: Dispatch[Counters]
    output_tokens: int
    gateway: int
    hashes: Sequence[int] = ()  # its prompt's engine block hashes, until it reaches the engine
    first_at: float = math.nan
    last_at: float = math.nan
    split: Split | None = None  # a split P/D request
    # The engine's position (a data-parallel rank the engine chose; -1: `replica`'s own).
    engine: int = -1

    def __post_init__(self) -> None:
        if self.engine < 0:
            self.engine = self.replica
