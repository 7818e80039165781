"""Which prompt tokens each endpoint would serve from cache: exact from KV events, else estimated.

For endpoint e and a request:

- **precise**, when the `PreciseIndex` follows e's events and the request carries token keys
  for e's block size B (`RoutingRequest.keys_for(B)`): with d_e leading keys held (or sent to
  e within the speculation window), `cached_e = cached_tokens(d_e, prompt_tokens, B)`,
  `share_e = d_e ÷ len(keys)`;
- **approximate** otherwise (no events from e, no tokenizer for the model, a `cache_salt`):
  with m_e leading prefix blocks in the `PrefixIndex`, `cached_e = covered_chars(m_e) ÷
  chars_per_token`, `share_e = covered_chars(m_e) ÷ covered_chars(n)`.

The prompt's length is `prompt_tokens` when a tokenizer counted it, else `token_estimate`.
`source_list` says which answered for each endpoint (shown by `/admin/route`).
"""

from __future__ import annotations

from collections.abc import Sequence

from routing.types import RoutingRequest
from scoring.state.precise_index import PreciseIndex, cached_tokens
from scoring.state.prefix_hash import covered_chars
from scoring.state.prefix_index import PrefixIndex

PRECISE = "precise"
APPROXIMATE = "approximate"


class CacheView:
    """Predicted cached prompt tokens per endpoint, from the precise index or the approximate."""

    def __init__(self, approx: PrefixIndex, precise: PreciseIndex) -> None:
        self.approx = approx
        self.precise = precise

    def _precise_keys(self, request: RoutingRequest, endpoint: str) -> tuple[int, ...] | None:
        if not request.token_keys or request.prompt_tokens <= 0:
            return None
        size = self.precise.block_size(endpoint)
        return request.keys_for(size) if size is not None else None

    def source_list(self, request: RoutingRequest, ids: Sequence[str]) -> list[str]:
        return [PRECISE if self._precise_keys(request, e) is not None else APPROXIMATE for e in ids]

    def prompt_tokens(self, request: RoutingRequest) -> int:
        return request.prompt_tokens or request.token_estimate

    def cached_list(
        self, request: RoutingRequest, ids: Sequence[str], chars_per_token: float, now: float
    ) -> list[float]:
        """Predicted cached prompt tokens for each of `ids`, in order."""
        out: list[float] = []
        depths: list[int] | None = None
        for i, e in enumerate(ids):
            keys = self._precise_keys(request, e)
            if keys is not None:
                size = self.precise.block_size(e) or 1
                depth = self.precise.depth(e, keys, now)
                out.append(float(cached_tokens(depth, request.prompt_tokens, size)))
                continue
            if depths is None:
                hashes = request.prefix_hashes
                depths = self.approx.match_list(hashes, ids) if hashes else [0] * len(ids)
            chars = covered_chars(depths[i], request.prefix_block_chars)
            out.append(min(chars / chars_per_token, float(self.prompt_tokens(request))))
        return out

    def share_list(self, request: RoutingRequest, ids: Sequence[str], now: float) -> list[float]:
        """The prompt's cached share for each of `ids` (by blocks), in [0, 1]."""
        out: list[float] = []
        depths: list[int] | None = None
        hashes = request.prefix_hashes
        for i, e in enumerate(ids):
            keys = self._precise_keys(request, e)
            if keys is not None:
                out.append(self.precise.depth(e, keys, now) / len(keys) if keys else 0.0)
                continue
            if not hashes:
                out.append(0.0)
                continue
            if depths is None:
                depths = self.approx.match_list(hashes, ids)
            base = request.prefix_block_chars
            out.append(covered_chars(depths[i], base) / covered_chars(len(hashes), base))
        return out
