"""Prefix tracking at the edge: the gateway's side of the shared `scoring.prefix_feed`.

The gateway hashes each request's prompt bytes (`gateway.prompt_bytes`) into routing blocks of
the feed's size, and tells the feed each dispatch with the backend's KV size as last scraped.
Everything else (index, pending prefill, TTFT learning) is the feed's, which the simulator
drives the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.inference_request import InferenceRequest
from gateway.prompt_bytes import prompt_bytes
from health.pool import Backend
from routing.types import EndpointSnapshot, RoutingRequest
from scoring.prefix_feed import Dispatch, PrefixFeed, kv_tokens
from scoring.prefix_hash import hash_blocks, prefix_seed


class PrefixTracker:
    """The shared feed, fed from inference requests and pool backends."""

    def __init__(self, feed: PrefixFeed) -> None:
        self.feed = feed
        self.index = feed.index

    def block_chars(self, endpoints: Sequence[EndpointSnapshot]) -> int:
        return self.feed.block_chars(endpoints)

    def hashes(self, req: InferenceRequest, block_chars: int) -> tuple[tuple[int, ...], int]:
        """The prompt's block hashes and its estimated length in tokens."""
        data = prompt_bytes(req.api, req.prompt, req.instructions)
        hashes = hash_blocks(data, prefix_seed(req.model, req.cache_salt), block_chars)
        return hashes, int(len(data) / self.feed.chars_per_token)

    def dispatch(self, backend: Backend, request: RoutingRequest, now: float) -> Dispatch[Backend]:
        """`request` goes to `backend`: count its predicted prefill there, teach the index."""
        m = backend.metrics
        kv = kv_tokens(m.num_blocks, m.block_size) if m is not None else None
        return self.feed.dispatch(backend, request, now, kv)

    def first_token(self, d: Dispatch[Backend], ttft_s: float | None) -> None:
        self.feed.first_token(d, ttft_s)

    def forget(self, backend_id: str) -> None:
        self.feed.forget(backend_id)
