"""`cache-headroom-scorer`: prefer replicas whose KV cache (as the prefix index sees it) has room.

Formula: score(e) = 1 − fill(e), where fill is the share of the replica's capacity the
`PrefixIndex` believes is taken by tracked prefix blocks.

Why: when no replica holds a request's prefix (a new tenant, a new document), every prefix
score is 0 and, on an idle pool, every load signal ties too; a random pick then packs new
prefixes onto already-full replicas while others sit empty, evicting what is there. Sending a
new prefix where there is room spreads distinct prefixes over the pool, which is both better
balance and a better hit rate later. With a small weight it only decides near-ties: a real
prefix match outweighs it.

Parameters: none (the index is injected at registration).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from routing import EndpointSnapshot, RoutingRequest, SchedulingContext, ScoreColumn, endpoint_ids
from scoring.state.prefix_index import PrefixIndex


class CacheHeadroomScorer:
    """Scores endpoints by the free share of their tracked prefix cache."""

    def __init__(self, name: str, index: PrefixIndex) -> None:
        self.name = name
        self._index = index

    def score(
        self,
        request: RoutingRequest,
        endpoints: Sequence[EndpointSnapshot],
        ctx: SchedulingContext,
    ) -> Mapping[str, float]:
        ids = endpoint_ids(endpoints)
        # Not marked `unit`: an index subclass may answer its own fills, so the scheduler checks.
        return ScoreColumn(ids, [1.0 - fill for fill in self._index.fill_list(ids)])
