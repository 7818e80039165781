"""The gateway's cache ledger: what it tells the shared prefix feed and what the engines'
answers tell it back.

The feed (`scoring.state.prefix_feed`, shared with the simulator) keeps the prefix index,
pending prefill and TTFT lines. The ledger is the gateway's side: it cuts prompts into the
feed's blocks (and token-block keys for the precise index), hands each dispatch to the feed
with the backend's scraped KV size, withdraws failed attempts, grades the index's and the
precise index's predictions against each answer's cached tokens (correcting an evident
eviction), and tells every change to the shared-state `sink` when one is set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from gateway.inference_request import InferenceRequest
from gateway.prompt_bytes import prompt_bytes
from gateway.usage import Usage
from health.pool import Backend
from routing.types import EndpointSnapshot, RoutingRequest
from scoring.state.cache_check import CacheCheck
from scoring.state.precise_index import PreciseIndex, cached_tokens
from scoring.state.prefix_feed import Dispatch, PrefixFeed, kv_tokens
from scoring.state.prefix_hash import hash_blocks, prefix_seed
from scoring.state.token_blocks import root_key, token_block_keys


@dataclass(slots=True)
class CacheHits:
    """One backend's requests whose cached prompt tokens were observed, summed."""

    requests: int = 0
    prompt_tokens: int = 0
    predicted_tokens: int = 0
    observed_tokens: int = 0
    corrections: int = 0  # evident evictions, each correcting the index
    dropped_entries: int = 0  # index entries those corrections evicted


@dataclass(slots=True)
class PreciseHits:
    """One backend's precise predictions of cached prompt tokens, graded by its answers."""

    requests: int = 0
    exact: int = 0
    over: int = 0  # predicted more cached tokens than the engine reported
    under: int = 0
    predicted_tokens: int = 0
    observed_tokens: int = 0
    events_only_exact: int = 0  # the events alone (no speculation) predicted exactly


class StateSink(Protocol):
    """Where the tracker tells its changes to the routing state (`gateway.state.SharedState`);
    none of these may do I/O."""

    def placed(self, backend_id: str, request: RoutingRequest, uncached_tokens: int) -> None: ...

    def withdrawn(self, backend_id: str, request: RoutingRequest, start: int) -> None: ...

    def evicted(self, backend_id: str, request: RoutingRequest, weight: int) -> None: ...

    def forgotten(self, backend_id: str) -> None: ...

    def ttft(self, backend_id: str, work_tokens: float, ttft_s: float) -> None: ...

    def load_changed(self) -> None: ...


def backend_kv_tokens(backend: Backend) -> int | None:
    """The backend's KV capacity in tokens as last scraped (None: not reported yet): what
    bounds its entries in the prefix index, for this gateway's dispatches and the others'."""
    m = backend.metrics
    return kv_tokens(m.num_blocks, m.block_size) if m is not None else None


class CacheLedger:
    """The gateway's side of the prefix feed (see the module docstring)."""

    def __init__(self, feed: PrefixFeed, precise: PreciseIndex | None = None) -> None:
        self.feed = feed
        self.index = feed.index
        self.precise = PreciseIndex() if precise is None else precise
        self._precise_hits: dict[str, PreciseHits] = {}
        self._hits: dict[str, CacheHits] = {}
        # Backends seen reporting cached tokens: vLLM then leaves the details null for none.
        self._reporting: set[str] = set()
        self.sink: StateSink | None = None  # shared state: told every change

    @property
    def cache_hits(self) -> Mapping[str, CacheHits]:
        return self._hits

    @property
    def precise_hits(self) -> Mapping[str, PreciseHits]:
        return self._precise_hits

    def token_keys(
        self, token_ids: Sequence[int], adapter: str | None
    ) -> tuple[tuple[int, tuple[int, ...]], ...]:
        """The prompt's token-block keys in each block size the precise index follows (none
        while no backend's events have arrived)."""
        root = root_key(adapter or "")
        return tuple(
            (size, token_block_keys(token_ids, size, root))
            for size in sorted(self.precise.block_sizes())
        )

    def block_chars(self, endpoints: Sequence[EndpointSnapshot]) -> int:
        return self.feed.block_chars(endpoints)

    def hashes(self, req: InferenceRequest, block_chars: int) -> tuple[tuple[int, ...], int]:
        """The prompt's block hashes and its estimated length in tokens."""
        data = prompt_bytes(req.api, req.prompt, req.instructions)
        hashes = hash_blocks(data, prefix_seed(req.model, req.cache_salt), block_chars)
        return hashes, int(len(data) / self.feed.chars_per_token)

    def dispatch(
        self,
        backend: Backend,
        request: RoutingRequest,
        now: float,
        *,
        leg: str = "whole",
        record: bool = True,
    ) -> Dispatch[Backend]:
        """`request` goes to `backend`: count its predicted prefill there, teach the index
        (a P/D leg: `PrefixFeed.dispatch`)."""
        kv = backend_kv_tokens(backend)
        queued = backend.remote_pending_prefill_tokens
        d = self.feed.dispatch(backend, request, now, kv, queued, leg=leg, record=record)
        if self.sink is not None:
            if record:
                self.sink.placed(backend.id, request, d.uncached_tokens)
            else:
                self.sink.load_changed()
        size = self.precise.block_size(backend.id)
        if size is not None and request.prompt_tokens > 0 and record:
            keys = request.keys_for(size)
            if keys is not None:
                events_depth, depth = self.precise.depths(backend.id, keys, now)
                d.precise_cached = cached_tokens(depth, request.prompt_tokens, size)
                d.precise_cached_events = cached_tokens(events_depth, request.prompt_tokens, size)
                self.precise.speculate(backend.id, keys, now)
        return d

    def first_token(self, d: Dispatch[Backend], ttft_s: float | None) -> None:
        """`d`'s first token came: its predicted prefill left the backend's queue, which the
        other gateways hear now (with the TTFT point it teaches, if any), not with this
        gateway's next event or load interval (up to 50 ms later)."""
        settling = not d.settled
        point = self.feed.first_token(d, ttft_s)
        if self.sink is None:
            return
        if point is not None:
            self.sink.ttft(d.endpoint.id, *point)
        elif settling:
            self.sink.load_changed()

    def ended(self, d: Dispatch[Backend]) -> None:
        """`d`'s request is over (its in-flight count already taken back): its prefill, if
        not yet settled, is; and the shared state hears that the load changed."""
        self.feed.first_token(d, None)
        if self.sink is not None:
            self.sink.load_changed()

    def withdraw(self, d: Dispatch[Backend]) -> None:
        """`d` failed (or was refused): the backend did not take the prompt."""
        dropped = self.feed.withdraw(d)
        if self.sink is not None and dropped and d.request is not None:
            self.sink.withdrawn(d.endpoint.id, d.request, d.matched)

    def observe(self, d: Dispatch[Backend], usage: Usage | None) -> CacheCheck | None:
        """The backend answered `d` with `usage`: check the index's prediction, correcting it
        on an evident eviction. None when the answer did not tell the cached tokens."""
        if usage is None or usage.prompt_tokens is None:
            return None
        self.feed.observe_prompt(d, usage.prompt_tokens)
        backend = d.endpoint
        cached = usage.cached_tokens
        if cached is not None:
            self._reporting.add(backend.id)
        elif backend.id in self._reporting:
            cached = 0
        else:
            return None
        if d.precise_cached is not None:
            self._grade(backend.id, d.precise_cached, cached, d.precise_cached_events)
        m = backend.metrics
        block = m.block_size if m is not None else None
        check = self.feed.observe_cached(d, usage.prompt_tokens, cached, block)
        if check is None:
            return None
        hits = self._hits.get(backend.id)
        if hits is None:
            hits = self._hits[backend.id] = CacheHits()
        hits.requests += 1
        hits.prompt_tokens += usage.prompt_tokens
        hits.predicted_tokens += check.predicted_tokens
        hits.observed_tokens += check.observed_tokens
        if check.evicted_weight:
            hits.corrections += 1
            hits.dropped_entries += check.dropped_entries
            if self.sink is not None and d.request is not None and self.feed.current(d):
                self.sink.evicted(backend.id, d.request, check.evicted_weight)
        return check

    def _grade(
        self, backend_id: str, predicted: int, observed: int, events_only: int | None
    ) -> None:
        h = self._precise_hits.get(backend_id)
        if h is None:
            h = self._precise_hits[backend_id] = PreciseHits()
        h.requests += 1
        h.events_only_exact += events_only == observed
        h.predicted_tokens += predicted
        h.observed_tokens += observed
        if predicted == observed:
            h.exact += 1
        elif predicted > observed:
            h.over += 1
        else:
            h.under += 1

    def forget(self, backend_id: str) -> None:
        self.feed.forget(backend_id)
        if self.sink is not None:
            self.sink.forgotten(backend_id)
