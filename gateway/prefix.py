"""Prefix tracking at the edge: hash each request's prompt, and teach the index where it went.

The hashed block size is `routing.prefix.block_tokens × chars_per_token` bytes; without a
configured `block_tokens` it follows the engines' own KV block size (the smallest reported,
16 until one is known). If that size changes, every hash changes, so the index starts over.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gateway.inference_request import InferenceRequest
from gateway.prompt_bytes import prompt_bytes
from health.pool import Backend
from routing.types import EndpointSnapshot, RoutingRequest
from scoring.prefix_hash import covered_chars, hash_blocks, prefix_seed
from scoring.prefix_index import PrefixIndex
from scoring.profiles import PrefixSection
from scoring.ttft_model import OnlineTtftModel

DEFAULT_BLOCK_TOKENS = 16


@dataclass(slots=True)
class Dispatch:
    """One request sent to one backend, as far as prefill accounting goes."""

    backend: Backend
    at: float  # when it was sent (the gateway's clock)
    uncached_tokens: int  # predicted at dispatch
    work_tokens: int  # its own plus the backend's earlier pending prefill
    settled: bool = False


class PrefixTracker:
    def __init__(
        self,
        section: PrefixSection,
        index: PrefixIndex,
        ttft_model: OnlineTtftModel | None = None,
    ) -> None:
        self._section = section
        self.index = index
        self._ttft_model = ttft_model  # None: do not learn
        self._block_chars = self._chars(section.block_tokens or DEFAULT_BLOCK_TOKENS)

    def _chars(self, tokens: int) -> int:
        return max(1, round(tokens * self._section.chars_per_token))

    def block_chars(self, endpoints: Sequence[EndpointSnapshot]) -> int:
        if self._section.block_tokens is None:
            sizes = {
                size for e in endpoints if (m := e.metrics) is not None and (size := m.block_size)
            }
            if sizes:
                chars = self._chars(min(sizes))
                if chars != self._block_chars:
                    self.index.clear()
                    self._block_chars = chars
        return self._block_chars

    def hashes(self, req: InferenceRequest, block_chars: int) -> tuple[tuple[int, ...], int]:
        """The prompt's block hashes and its estimated length in tokens."""
        data = prompt_bytes(req.api, req.prompt, req.instructions)
        hashes = hash_blocks(data, prefix_seed(req.model, req.cache_salt), block_chars)
        return hashes, int(len(data) / self._section.chars_per_token)

    def dispatch(self, backend: Backend, request: RoutingRequest, now: float) -> Dispatch:
        """`request` goes to `backend`: count its predicted prefill there, teach the index."""
        hashes = request.prefix_hashes
        matched = self.index.match(hashes, (backend.id,))[backend.id] if hashes else 0
        cached = covered_chars(matched, request.prefix_block_chars) / self._section.chars_per_token
        uncached = max(0, int(request.token_estimate - cached))
        work = uncached + backend.pending_prefill_tokens
        backend.pending_prefill_tokens += uncached
        self._record(backend, hashes)
        return Dispatch(backend, now, uncached, work)

    def first_token(self, d: Dispatch, ttft_s: float | None) -> None:
        """The backend answered (`ttft_s` measured from dispatch when streaming): its prefill
        for this request is done."""
        if d.settled:
            return
        d.settled = True
        d.backend.pending_prefill_tokens -= d.uncached_tokens
        if ttft_s is not None and self._ttft_model is not None:
            self._ttft_model.observe(d.backend.id, d.work_tokens, ttft_s)

    def _record(self, backend: Backend, hashes: Sequence[int]) -> None:
        if not hashes:
            return
        m = backend.metrics
        if self._section.capacity_blocks is not None:
            capacity = self._section.capacity_blocks
        elif m is not None and m.num_blocks and m.block_size:
            kv_chars = m.num_blocks * m.block_size * self._section.chars_per_token
            capacity = int(kv_chars // self._block_chars)
        else:
            capacity = None
        if capacity is not None and capacity != self.index.capacity(backend.id):
            self.index.set_capacity(backend.id, capacity)
        self.index.record(backend.id, hashes)

    def forget(self, backend_id: str) -> None:
        self.index.remove_replica(backend_id)
