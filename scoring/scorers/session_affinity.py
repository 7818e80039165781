"""`session-affinity-scorer`: keep a session on the same endpoint by rendezvous hashing.

Formula: for session key s and endpoint id e, the weight is

    w(s, e) = blake2b(len(s) || s || len(e) || e, digest_size=8) read as an unsigned integer

(UTF-8, lengths as 8-byte big-endian). Candidates are ranked by w descending (ties by id); the
top one scores 1.0 and the k-th fallback (k ≥ 1, 0-based, of n) 0.5·(1 − k/n). Without a
session key (None or "") every candidate scores 0.0 (neutral). Adding an endpoint moves only
the sessions whose weight for it beats their top (about 1/(n+1)), removing one only its own
sessions; blake2b, unlike `hash()`, is stable across processes, so gateway replicas agree.
The top leads every fallback by at least 0.5, so with weight 10 against a [0,1] load scorer
the affinity decides the target outright.

Parameters: none.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from routing import EndpointSnapshot, RoutingRequest, SchedulingContext


def rendezvous_weight(session_key: str, endpoint_id: str) -> int:
    """The highest-random-weight hash of one (session, endpoint) pair, in [0, 2**64)."""
    digest = hashlib.blake2b(digest_size=8)
    for part in (session_key, endpoint_id):
        data = part.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return int.from_bytes(digest.digest(), "big")


class SessionAffinityScorer:
    """Scores candidates by their rendezvous-hash rank for the request's session key."""

    def __init__(self, name: str) -> None:
        self.name = name

    def score(
        self,
        request: RoutingRequest,
        endpoints: Sequence[EndpointSnapshot],
        ctx: SchedulingContext,
    ) -> Mapping[str, float]:
        key = request.session_key
        if not key:
            return {e.id: 0.0 for e in endpoints}
        ids = sorted({e.id for e in endpoints}, key=lambda i: (-rendezvous_weight(key, i), i))
        n = len(ids)
        return {
            endpoint_id: 1.0 if k == 0 else 0.5 * (1.0 - k / n) for k, endpoint_id in enumerate(ids)
        }
