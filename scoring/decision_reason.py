"""Why a decision chose its target, as one word from a small fixed set (`REASONS`).

Every decision gets one reason, for metrics (`kvgate_routing_decisions_total{reason}`) and the
dry run, so the label stays bounded whatever the profiles. With w the chosen endpoint and r the
runner-up (the other candidate with the highest total):

- `only_candidate`: one candidate scored, none filtered out; `filtered`: filters cut several
  candidates to one; `affinity`: none scored, the request was pinned (`gateway.router`).
- `picker`: total(w) ≤ total(r): a tie the picker broke, or a picker that does not take the
  best (round-robin, random, power-of-two, softmax).
- otherwise the kind of the scorer with the largest weighted lead weight_s × (score_s(w) −
  score_s(r)): `prefix` (prefix-match, precise-prefix), `session`, `lora`, `load` (in-flight,
  queue depth, running requests, KV utilisation, cache headroom); estimated TTFT counts as
  `prefix` when w holds more of the prompt's leading blocks than r, else `load`; a scorer type
  not listed gives `other`. Weights and kinds are worked out once per profile object.
"""

from __future__ import annotations

from collections.abc import Sequence

from routing.scheduler import Profile
from routing.types import Decision, RoutingRequest, ScoreTable
from scoring.scorers.cache_headroom import CacheHeadroomScorer
from scoring.scorers.estimated_ttft import EstimatedTtftScorer
from scoring.scorers.in_flight import InFlightScorer
from scoring.scorers.kv_utilization import KvUtilizationScorer
from scoring.scorers.lora_affinity import LoraAffinityScorer
from scoring.scorers.precise_prefix import PrecisePrefixScorer
from scoring.scorers.prefix_match import PrefixMatchScorer
from scoring.scorers.queue_depth import QueueDepthScorer
from scoring.scorers.running_requests import RunningRequestsScorer
from scoring.scorers.session_affinity import SessionAffinityScorer
from scoring.state.prefix_index import PrefixIndex

REASONS = (
    "only_candidate",
    "filtered",
    "picker",
    "prefix",
    "session",
    "lora",
    "load",
    "affinity",
    "other",
)
_MIXED = "cache-or-load"  # estimated TTFT: split by the prefix match, see the docstring
_KIND_OF: dict[type, str] = {
    PrefixMatchScorer: "prefix",
    PrecisePrefixScorer: "prefix",
    SessionAffinityScorer: "session",
    LoraAffinityScorer: "lora",
    InFlightScorer: "load",
    QueueDepthScorer: "load",
    RunningRequestsScorer: "load",
    KvUtilizationScorer: "load",
    CacheHeadroomScorer: "load",
    EstimatedTtftScorer: _MIXED,
}
_Kinds = tuple[tuple[float, str], ...]  # per score column: (weight, kind)


class DecisionReasons:
    """Names the reason of each decision (module docstring) from its score table."""

    def __init__(self, index: PrefixIndex) -> None:
        self._index = index
        self._kinds: dict[str, tuple[Profile, _Kinds]] = {}

    def reason(
        self, decision: Decision, profile: Profile, request: RoutingRequest, candidates: int
    ) -> str:
        """`decision`'s reason; `candidates`: how many endpoints the profile was given."""
        table = decision.scores
        if len(table) < 2:
            return "filtered" if candidates > 1 else "only_candidate"
        if type(table) is not ScoreTable or not decision.ranked:
            return "other"
        ids, totals = table.ids, table.totals
        w = ids.index(decision.ranked[0])
        r = _runner_up(totals, w)
        if not totals[w] > totals[r]:  # NaN totals too: nothing decided by the scores
            return "picker"
        best, kind = 0.0, "other"
        for (weight, k), column in zip(self._kinds_of(profile), table.columns, strict=True):
            lead = weight * (column[w] - column[r])
            if lead > best:
                best, kind = lead, k
        if kind == _MIXED:
            kind = "prefix" if self._deeper(request, ids[w], ids[r]) else "load"
        return kind

    def _kinds_of(self, profile: Profile) -> _Kinds:
        cached = self._kinds.get(profile.name)
        if cached is None or cached[0] is not profile:
            kinds = tuple(
                (ws.weight, _KIND_OF.get(type(ws.scorer), "other")) for ws in profile.scorers
            )
            cached = self._kinds[profile.name] = (profile, kinds)
        return cached[1]

    def _deeper(self, request: RoutingRequest, chosen: str, other: str) -> bool:
        """Whether `chosen` holds more of the prompt's leading blocks than `other`."""
        hashes = request.prefix_hashes
        if not hashes:
            return False
        depth = self._index.match(hashes, (chosen, other))
        return depth[chosen] > depth[other]


def _runner_up(totals: Sequence[float], chosen: int) -> int:
    """The index of the highest total other than `chosen`'s (the first of equals)."""
    best_i, best = -1, float("-inf")
    for i, t in enumerate(totals):
        if i != chosen and (t > best or best_i < 0):
            best_i, best = i, t
    return best_i
