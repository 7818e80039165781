"""`estimated-ttft-scorer`: cache affinity and load traded in one unit, seconds of TTFT.

For endpoint e, with its TTFT line's `overhead_s(e)` and `prefill_token_s(e)` from the
`OnlineTtftModel` (the prior until learnt) and m_e blocks the `PrefixIndex` says it holds:

    uncached_e = max(0, token_estimate − covered_chars(m_e) / chars_per_token)
    work_e     = uncached_e + pending_e     (prefill queued on e by the gateways, in tokens)
    cost_e     = overhead_s(e) + prefill_token_s(e) × (work_e + eviction_weight × displaced_e)
    score(e)   = min_e' cost_e' / cost_e    (1 for the fastest)

displaced_e is what storing the uncached blocks would evict on e, in tokens, each entry valued
r ÷ (r + 1) for r reuses (`PrefixIndex.displaced`; 0 where e has room). Parameters:
`chars_per_token` (> 0, default 4.0), `eviction_weight` (≥ 0, default 0: off), `cache_view`
(`approximate`, the default, or `precise`: uncached_e exact where e's KV events reach the
`PreciseIndex`, see `scoring.state.cache_view`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import truediv
from typing import Annotated, Literal

from routing import EndpointSnapshot, RoutingRequest, SchedulingContext, ScoreColumn, endpoint_ids
from routing.params import Bounds
from scoring.state.cache_view import CacheView
from scoring.state.prefix_hash import covered_chars
from scoring.state.prefix_index import PrefixIndex
from scoring.state.ttft_model import OnlineTtftModel


class EstimatedTtftScorer:
    """Scores endpoints by predicted time to first token (lower is better)."""

    @dataclass(frozen=True, slots=True)
    class Params:
        """An `estimated-ttft-scorer`'s config `params` (stated in the module docstring)."""

        chars_per_token: Annotated[float, Bounds(gt=0.0)] = 4.0
        eviction_weight: Annotated[float, Bounds(ge=0.0)] = 0.0
        cache_view: Literal["approximate", "precise"] = "approximate"

    def __init__(self, name: str, index: PrefixIndex, model: OnlineTtftModel,
                 view: CacheView | None = None, params: Params = Params()) -> None:  # fmt: skip
        if params.chars_per_token <= 0:
            raise ValueError("chars_per_token must be > 0")
        self.name = name
        self._index = index
        self._model = model
        self._cpt = params.chars_per_token
        self._eviction_weight = params.eviction_weight
        self._view = view if params.cache_view == "precise" else None

    def estimate(self, request: RoutingRequest, endpoints: Sequence[EndpointSnapshot],
                 now: float = 0.0) -> dict[str, float]:  # fmt: skip
        """Predicted TTFT in seconds per endpoint."""
        ids = endpoint_ids(endpoints)
        return dict(zip(ids, self._estimates(request, endpoints, ids, now), strict=True))

    def _estimates(self, request: RoutingRequest, endpoints: Sequence[EndpointSnapshot],
                   ids: Sequence[str], now: float) -> list[float]:  # fmt: skip
        hashes = request.prefix_hashes
        lines = self._model.lines(ids)
        view = self._view
        if view is not None and request.token_keys:
            total = view.prompt_tokens(request)
            cached = view.cached_list(request, ids, self._cpt, now)
            work = [max(0.0, total - c) for c in cached]
            depths: list[int] | None = None
        else:
            depths = self._index.match_list(hashes, ids) if hashes else [0] * len(ids)
            # Endpoints share few distinct match depths: each one's uncached tokens once.
            tokens, block_chars, cpt = request.token_estimate, request.prefix_block_chars, self._cpt
            uncached = {
                depth: uncached_tokens(tokens, depth, block_chars, cpt) for depth in set(depths)
            }
            work = list(map(uncached.__getitem__, depths))
        # predict(work), inlined: this runs per endpoint per request.
        est = [
            c.overhead_s
            + c.prefill_token_s * (u + e.pending_prefill_tokens + e.remote_pending_prefill_tokens)
            for c, u, e in zip(lines, work, endpoints, strict=True)
        ]
        block_chars = request.prefix_block_chars
        if self._eviction_weight and hashes:
            if depths is None:
                depths = self._index.match_list(hashes, ids)
            displaced = displaced_tokens(
                self._index,
                hashes,
                depths=depths,
                replicas=ids,
                block_chars=block_chars,
                chars_per_token=self._cpt,
            )
            if any(displaced):  # else each estimate gains (k × slope) × 0.0: itself
                k = self._eviction_weight
                triples = zip(est, lines, displaced, strict=True)
                est = [t + k * c.prefill_token_s * d for t, c, d in triples]
        return est

    def score(
        self,
        request: RoutingRequest,
        endpoints: Sequence[EndpointSnapshot],
        ctx: SchedulingContext,
    ) -> Mapping[str, float]:
        ids = endpoint_ids(endpoints)
        est = self._estimates(request, endpoints, ids, ctx.clock())
        best = min(est, default=0.0)
        if best > 0.0 and not math.isnan(sum(est)):  # 0 < best <= every estimate
            return ScoreColumn(ids, list(map(truediv, repeat(best), est)), True)  # unit
        return ScoreColumn(ids, [(best / t if t > 0 else 1.0) for t in est])


def uncached_tokens(tokens: int, depth: int, block_chars: int, chars_per_token: float) -> float:
    """The prompt's tokens (of `tokens`) left to prefill where its first `depth` blocks are
    cached."""
    return max(0.0, tokens - covered_chars(depth, block_chars) / chars_per_token)


def displaced_tokens(
    index: PrefixIndex,
    hashes: Sequence[int],
    *,
    depths: Sequence[int],
    replicas: Sequence[str],
    block_chars: int,
    chars_per_token: float,
) -> list[float]:
    """Per replica (matching `depths[i]` leading blocks of `hashes`), the reuse-valued tokens
    that storing the rest of the prompt there would evict (`PrefixIndex.displaced`)."""
    whole = covered_chars(len(hashes), block_chars)
    if not depths or index.fits_everywhere(
        (whole - covered_chars(min(depths), block_chars)) // block_chars  # the widest
    ):
        return [0.0] * len(depths)  # room everywhere: what `displaced_list` answers
    base_tokens = block_chars / chars_per_token  # tokens per base block
    # Candidates share few distinct depths: each one's new weight once.
    new = {d: (whole - covered_chars(d, block_chars)) // block_chars for d in set(depths)}
    new_weights = list(map(new.__getitem__, depths))
    values = index.displaced_list(replicas, new_weights, hashes, depths)
    return [base_tokens * v for v in values] if any(values) else values
