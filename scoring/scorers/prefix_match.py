"""`prefix-match-scorer`: the share of the prompt's prefix an endpoint probably has cached.

Formula: with the request's chained block hashes h_0..h_{n−1} and m_e the number of leading
blocks the `PrefixIndex` holds for endpoint e,

    score(e) = covered_chars(m_e) / covered_chars(n)

(the fraction of the hashed prompt, by length, that would be a cache hit). A request without
hashes scores 0 everywhere (neutral). The index is built by the composition root and fed from
routing decisions; this scorer only reads it.

Parameters: none (the index is injected at registration).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from routing import EndpointSnapshot, RoutingRequest, SchedulingContext, ScoreColumn, endpoint_ids
from scoring.state.prefix_hash import covered_chars
from scoring.state.prefix_index import PrefixIndex


class PrefixMatchScorer:
    """Scores endpoints by the cached share of the request's prompt prefix."""

    def __init__(self, name: str, index: PrefixIndex) -> None:
        self.name = name
        self._index = index

    def score(
        self,
        request: RoutingRequest,
        endpoints: Sequence[EndpointSnapshot],
        ctx: SchedulingContext,
    ) -> Mapping[str, float]:
        hashes = request.prefix_hashes
        ids = endpoint_ids(endpoints)
        if not hashes:
            return ScoreColumn(ids, [0.0] * len(ids), True)  # unit
        depths = self._index.match_list(hashes, ids)
        base = request.prefix_block_chars
        total = covered_chars(len(hashes), base)
        # Endpoints share few distinct depths: compute each depth's share once.
        share = {m: cached_share(m, base, total) for m in set(depths)}
        return ScoreColumn(ids, list(map(share.__getitem__, depths)), True)  # unit; depth <= n


def cached_share(depth: int, block_chars: int, total_chars: int) -> float:
    """The share of a prompt hashed over `total_chars` covered by its first `depth` blocks."""
    return covered_chars(depth, block_chars) / total_chars
