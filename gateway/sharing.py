"""The app's shared routing state and sibling workers, wired (`state:`, `--workers N`).

`build_sharing` gives the `SharedState` (Redis with `state.backend: redis`; the workers'
own channel between the workers of one `kvgate serve --workers N`; nothing for a lone
in-memory gateway) and, in a worker, its `WorkerPeers`. The cache ledger tells the shared
state its changes only when something is shared, so a lone gateway's request path pays
nothing for it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any

from gateway.cache_ledger import CacheLedger, backend_kv_tokens
from gateway.state import SharedState
from gateway.state.load import Counts
from gateway.state.outbox import now_ms
from gateway.workers.context import WorkerContext
from gateway.workers.peers import WorkerPeers
from health.pool import BackendPool
from routing.config.schema import GatewayConfig
from scoring.stack import RoutingStack
from scoring.state.prefix_feed import PrefixFeed


def build_sharing(
    config: GatewayConfig,
    stack: RoutingStack,
    pool: BackendPool,
    ledger: CacheLedger,
    *,
    workers: WorkerContext | None,
    own_metrics: Callable[[], bytes],
    apply_admin: Callable[[Mapping[str, Any]], Awaitable[dict[str, Any]]],
    clock: Callable[[], float] = time.monotonic,
    own_response_owner: Callable[[str], str | None] = lambda response_id: None,
) -> tuple[SharedState, WorkerPeers | None]:
    peers = None
    if workers is not None:
        peers = WorkerPeers(
            workers,
            lambda frame: shared.receive_local(frame),  # noqa: PLW0108 (built below)
            own_metrics,
            apply_admin,
            own_response_owner=own_response_owner,
        )
    shared = SharedState(
        config.state,
        config.discovery.pool or "static",
        stack.index,
        lambda: stack.feed.block_chars(()),
        lambda backend_id: pool.find(backend_id) is not None,
        ttft_model=stack.ttft_model,
        local_load=lambda: {b.id: (b.in_flight, b.pending_prefill_tokens) for b in pool},
        on_remote_load=partial(set_remote_load, pool),
        siblings=peers.siblings if peers is not None else None,
        refresh_block_chars=lambda: stack.feed.block_chars(pool.snapshots()),
        remote_dispatch=partial(late_dispatch, stack.feed, clock),
        record_placement=partial(remote_placement, stack.feed, pool),
    )
    if shared.active:
        ledger.sink = shared
    return shared, peers


def late_dispatch(
    feed: PrefixFeed, clock: Callable[[], float], backend: str, at_ms: float, tokens: int | None
) -> None:
    """Another gateway dispatched `tokens` uncached prompt tokens (None: not known) to
    `backend` at wall time `at_ms`: the feed's dispatches there since then (on the app's
    `clock`) did not count that prefill."""
    feed.remote_dispatch(backend, clock() - max(0.0, now_ms() - at_ms) / 1000, tokens)


def remote_placement(
    feed: PrefixFeed, pool: BackendPool, backend: str, hashes: Sequence[int], block_chars: int
) -> None:
    """Another gateway sent `backend` these blocks: recorded as this gateway's own dispatch
    records them, bounded by the backend's KV size as this gateway last scraped it."""
    b = pool.find(backend)
    feed.record(backend, hashes, block_chars, backend_kv_tokens(b) if b is not None else None)


def set_remote_load(pool: BackendPool, remote: Counts) -> None:
    """The other gateways' in-flight requests and queued prefill per backend, as the pool's
    backends show them to the scheduler."""
    for b in pool:
        n, p = remote.get(b.id, (0, 0))
        if b.remote_in_flight != n:
            b.remote_in_flight = n
        if b.remote_pending_prefill_tokens != p:
            b.remote_pending_prefill_tokens = p
