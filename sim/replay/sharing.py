"""Several gateways in one replay sharing their routing state, each change reaching the rest late.

Each `SimGateway` has its own `Mirror` (`scoring.state.mirror`) over its own prefix index and TTFT
model, as a live gateway does. A dispatch is the `Placement` a live gateway sends (routing block
hashes and block size, predicted uncached prompt tokens; only the tokens for a trace request
without block ids), a first token the `TtftPoints` it taught; load changes go beside them
(`sim.replay.shared_load`). Each change reaches every other gateway `delay_s` virtual seconds
later, in order (at 0: at once), where `Mirror.apply` makes it through the hooks:
- a placement is recorded through the receiver's prefix feed, bounded by the replica's KV size
  as known when it was made (every simulated gateway scrapes alike);
- a late placement goes to `PrefixFeed.remote_dispatch` (at 0 none is late);
- TTFT points teach the receiver's model when the models learn (`routing.ttft.learn`).
The hooks take a change's time from its delivery, in virtual seconds, not from the events'
`at_ms` (seconds → ms → seconds is not always the same float).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from functools import partial

from routing.types import RoutingRequest
from scoring.state.events import Event, EventCounters, Placement, TtftPoints
from scoring.state.mirror import Mirror
from scoring.state.prefix_feed import PrefixFeed
from sim.replay.gateways import SimGateway
from sim.replay.shared_load import LoadChange, SharedLoad

Change = Event | LoadChange


class StateSharing:
    """Each gateway's changes, on their way to the other gateways' mirrors and counters."""

    __slots__ = ("_at", "_changes", "_delay", "_due", "_ids", "_kv_tokens", "load", "mirrors")

    def __init__(
        self,
        gateways: Sequence[SimGateway],
        delay_s: float,
        learn: bool,
        due: Callable[[float], None],
        kv_tokens: Callable[[str, float], int | None],
    ) -> None:
        """`learn`: the gateways' TTFT models learn (`routing.ttft.learn`), so learn from each
        other's points too; `due(t)`: call `deliver` at virtual time t (the replay's event
        queue); `kv_tokens(replica id, t)`: its KV capacity in tokens as the gateways know
        it at t (None: not scraped yet)."""
        if not delay_s >= 0:
            raise ValueError("the sync delay must be >= 0")
        self._delay = delay_s
        self._due = due
        self._kv_tokens = kv_tokens
        self._changes: deque[tuple[int, float, Change]] = deque()  # (source, made at, change)
        self._at = 0.0  # when the change being applied was made
        self._ids = [v.id for v in gateways[0].views]  # by replica position
        known = frozenset(self._ids).__contains__
        self.mirrors = [
            Mirror(
                _gateway_id(g),
                EventCounters(),
                gateway.stack.index,
                None,  # each trace request's hashes are cut in its own block size
                known,
                ttft_model=gateway.stack.ttft_model if learn else None,
                remote_dispatch=partial(self._late, gateway.stack.feed) if delay_s > 0 else None,
                record=partial(self._record, gateway.stack.feed),
            )
            for g, gateway in enumerate(gateways)
        ]
        self.load = SharedLoad([g.views for g in gateways])

    def placed(
        self,
        now: float,
        source: int,
        position: int,
        request: RoutingRequest,
        uncached: int,
        *,
        record: bool = True,
    ) -> None:
        """Gateway `source` sent `request`, of `uncached` predicted uncached prompt tokens,
        to the replica at `position` (`record=False`: a P/D decode leg to a replica that keeps
        no prefix cache, whose load alone changes)."""
        if not record:
            self._send(now, source, LoadChange(position, 1, uncached))
            return
        placement = Placement(
            _gateway_id(source),
            self._ids[position],
            request.prefix_block_chars,
            request.prefix_hashes,
            now * 1000,
            uncached,
        )
        self._send(now, source, placement)
        self._send(now, source, LoadChange(position, 1, uncached))

    def first_token(
        self,
        now: float,
        source: int,
        position: int,
        uncached: int,
        point: tuple[int, float] | None,
    ) -> None:
        """A request gateway `source` sent to the replica at `position` had its first token
        (or ended before one): its `uncached` tokens are prefilled; `point`: the (work
        tokens, TTFT) it taught, if any."""
        self._send(now, source, LoadChange(position, pending_prefill_tokens=-uncached))
        if point is not None:
            points = ((self._ids[position], *point),)
            self._send(now, source, TtftPoints(_gateway_id(source), points, now * 1000))

    def ended(self, now: float, source: int, position: int) -> None:
        """A request gateway `source` sent to the replica at `position` is over."""
        self._send(now, source, LoadChange(position, in_flight=-1))

    def deliver(self) -> None:
        """Apply the oldest change not yet delivered to every other gateway."""
        self._apply(*self._changes.popleft())

    def pending(self) -> int:
        """Changes made and not yet delivered."""
        return len(self._changes)

    def _send(self, now: float, source: int, change: Change) -> None:
        if self._delay == 0:
            self._apply(source, now, change)
            return
        self._changes.append((source, now, change))
        self._due(now + self._delay)

    def _apply(self, source: int, at: float, change: Change) -> None:
        if isinstance(change, LoadChange):
            self.load.apply(source, change)
            return
        self._at = at
        for mirror in self.mirrors:
            mirror.apply(change)  # the source's own mirror skips it

    def _record(
        self, feed: PrefixFeed, replica_id: str, hashes: Sequence[int], block_chars: int
    ) -> None:
        feed.record(replica_id, hashes, block_chars, self._kv_tokens(replica_id, self._at))

    def _late(self, feed: PrefixFeed, replica_id: str, _at_ms: float, tokens: int | None) -> None:
        feed.remote_dispatch(replica_id, self._at, tokens)


def _gateway_id(g: int) -> str:
    return f"gateway-{g}"
