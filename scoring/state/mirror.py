"""The other gateways' events applied to this gateway's own routing state.

Decisions read this process's `PrefixIndex` and `OnlineTtftModel` synchronously; the channels
(`gateway.state.stream` through Redis, `gateway.state.local` between workers, the simulator's
`sim.replay.sharing` after its sync delay) hand each event received to `Mirror.apply`, which
makes the change the other gateway made to its own state (`gateway.state.codec` lists them).

- Skipped and counted: this gateway's own events, backends not in its pool, and hashes cut in
  another block size, which first make it look again (`refresh_block_chars`: a gateway that has
  not routed yet takes its peers'). Without `block_chars`, hashes of any size are taken.
- A placement goes through `record` when given (the prefix feed's, bounded by the replica's KV
  size as this gateway scraped it), else straight into the index. Applied live, it also goes to
  `remote_dispatch` (backend, wall ms, predicted uncached tokens or None); one without hashes
  (a prompt shorter than a block) is only that (docs/decisions/0026-mirror-bounded-by-kv-size.md).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

from scoring.state.events import (
    Event,
    EventCounters,
    Eviction,
    Forget,
    Placement,
    TtftPoints,
    Withdrawal,
)
from scoring.state.prefix_index import PrefixIndex
from scoring.state.ttft_model import OnlineTtftModel


class Mirror:
    """Applies the other gateways' events to the local index and TTFT model."""

    def __init__(
        self,
        gateway_id: str,
        counters: EventCounters,
        index: PrefixIndex,
        block_chars: Callable[[], int] | None,
        known_backend: Callable[[str], bool],
        *,
        ttft_model: OnlineTtftModel | None = None,
        refresh_block_chars: Callable[[], int] | None = None,
        remote_dispatch: Callable[[str, float, int | None], None] | None = None,
        record: Callable[[str, Sequence[int], int], None] | None = None,
        lag_samples: int = 4096,
        clock_ms: Callable[[], float] | None = None,
    ) -> None:
        self.gateway_id = gateway_id
        self.counters = counters
        self._index = index
        self._block_chars = block_chars
        self._refresh = refresh_block_chars
        self._known = known_backend
        self._ttft = ttft_model
        self._remote_dispatch = remote_dispatch
        self._record = record or (lambda backend, hashes, chars: index.record(backend, hashes))
        self._clock_ms = clock_ms  # the events' clock (wall ms); None: lags not measured
        # Recent (made elsewhere → applied here) lags in ms, for measurement.
        self.lags_ms: deque[float] = deque(maxlen=lag_samples)

    def apply(self, event: Event, *, live: bool = True) -> None:
        """`live`: the event is new (not history read at start), so its lag means something."""
        if event.gateway == self.gateway_id:
            return
        c = self.counters
        c.received += 1
        if not self._apply(event):
            c.skipped += 1
            return
        c.applied += 1
        if live:
            if self._clock_ms is not None:
                c.lag_ms_last = lag = self._clock_ms() - event.at_ms
                self.lags_ms.append(lag)
            if self._remote_dispatch is not None and isinstance(event, Placement):
                self._remote_dispatch(event.backend, event.at_ms, event.tokens)

    def _apply(self, e: Event) -> bool:
        if isinstance(e, TtftPoints):
            return self._learn(e)
        if not self._known(e.backend):
            return False
        if isinstance(e, Forget):
            self._index.remove_replica(e.backend)
            return True
        if isinstance(e, Placement) and not e.hashes:
            return True  # nothing to record, but a dispatch all the same
        if not e.hashes or not self._same_size(e.block_chars):
            return False
        if isinstance(e, Placement):
            self._record(e.backend, e.hashes, e.block_chars)
        elif isinstance(e, Withdrawal):
            self._index.drop(e.backend, e.hashes, e.start)
        elif isinstance(e, Eviction):
            self._index.evict_oldest(e.backend, e.weight, e.hashes)
        return True

    def _same_size(self, block_chars: int) -> bool:
        if self._block_chars is None or block_chars == self._block_chars():
            return True
        return self._refresh is not None and block_chars == self._refresh()

    def _learn(self, e: TtftPoints) -> bool:
        model = self._ttft
        if model is None:
            return False
        known = self._known
        for backend, work, ttft in e.points:
            if known(backend):
                model.observe(backend, work, ttft)
        return True
