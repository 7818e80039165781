"""A profile's filter, scorers and picker computed in one compiled pass, when it is built from
the plugins the pass knows: the default profile and its variants.

`fused_path` looks at a built profile: a `max-score-picker`, at most a `load-imbalance-filter`,
and scorers among `estimated-ttft-scorer` (approximate cache view), `prefix-match-scorer`,
`in-flight-scorer`, `kv-utilization-scorer` and `cache-headroom-scorer`, each at most once,
over one prefix index. For such a profile it returns a `routing.scheduler.FastPath`: the
index and the TTFT model are asked what the plugins ask them; the per-candidate arithmetic
and the max-score order run in `scoring.fused_native` (tied totals go to the picker's
shuffle). The decision is the plugins' (same columns to the last bit, same ranking, same
draws from the RNG); where a candidate is not a plain snapshot, or a plugin would take a
rare branch (unknown KV usage, a NaN estimate), the path answers None and the plugins
decide. Without the compiled module there is no fast path.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from routing import Decision, EndpointSnapshot, EngineMetrics, RoutingRequest, SchedulingContext
from routing.scheduler import FastPath, Profile, filtered_out
from routing.types import ScoreTable
from scoring.filters.load_imbalance import LoadImbalanceFilter
from scoring.pickers.max_score import TIE_TOLERANCE, MaxScorePicker, rank_by_total
from scoring.scorers.cache_headroom import CacheHeadroomScorer
from scoring.scorers.estimated_ttft import EstimatedTtftScorer, displaced_tokens, uncached_tokens
from scoring.scorers.in_flight import InFlightScorer
from scoring.scorers.kv_utilization import KvUtilizationScorer
from scoring.scorers.prefix_match import PrefixMatchScorer, cached_share
from scoring.state.prefix_hash import covered_chars
from scoring.state.prefix_index import PrefixIndex
from scoring.state.ttft_model import OnlineTtftModel, TtftCoefficients

try:
    from scoring import fused_native
except ImportError:  # not built (no C compiler): the plugins run
    fused_native = None  # type: ignore[assignment]
else:  # its columns are read-only sequences of floats
    Sequence.register(fused_native.Column)

_KINDS: dict[type, int] = (
    {}
    if fused_native is None
    else {
        EstimatedTtftScorer: fused_native.TTFT,
        PrefixMatchScorer: fused_native.PREFIX,
        InFlightScorer: fused_native.IN_FLIGHT,
        KvUtilizationScorer: fused_native.KV,
        CacheHeadroomScorer: fused_native.HEADROOM,
    }
)
_MAX_SCORERS = 8


def compiled() -> bool:
    """Whether this install has the compiled pass (else every profile runs its plugins)."""
    return fused_native is not None


def fused_path(profile: Profile) -> FastPath | None:
    """The profile's fast path, or None when it has a plugin the pass does not know."""
    if fused_native is None or type(profile.picker) is not MaxScorePicker:
        return None
    if not 0 < len(profile.scorers) <= _MAX_SCORERS:
        return None
    flt: LoadImbalanceFilter | None = None
    if profile.filters:
        if len(profile.filters) > 1 or type(profile.filters[0]) is not LoadImbalanceFilter:
            return None
        flt = profile.filters[0]
    kinds = [_KINDS.get(type(ws.scorer), -1) for ws in profile.scorers]
    if -1 in kinds or len(set(kinds)) != len(kinds):
        return None
    by_kind = {k: ws.scorer for k, ws in zip(kinds, profile.scorers, strict=True)}
    ttft = by_kind.get(fused_native.TTFT)
    if isinstance(ttft, EstimatedTtftScorer) and ttft._view is not None:  # precise view
        return None
    indexes = {id(s._index): s._index for s in by_kind.values() if hasattr(s, "_index")}
    if len(indexes) > 1:
        return None
    index = next(iter(indexes.values()), None)
    return _FusedPath(profile, kinds, by_kind, flt, index)


class _FusedPath:
    """A profile's `FastPath` over `scoring.fused_native.Kernel`."""

    def __init__(
        self,
        profile: Profile,
        kinds: list[int],
        by_kind: dict[int, Any],
        flt: LoadImbalanceFilter | None,
        index: PrefixIndex | None,
    ) -> None:
        self._name = profile.name
        self._names = [ws.scorer.name for ws in profile.scorers]
        self._filter_name = flt.name if flt is not None else ""
        ttft: EstimatedTtftScorer | None = by_kind.get(fused_native.TTFT)
        self._depths = fused_native.TTFT in by_kind or fused_native.PREFIX in by_kind
        self._fills = fused_native.HEADROOM in by_kind
        self._index = index
        self._model: OnlineTtftModel | None = ttft._model if ttft is not None else None
        self._cpt = ttft._cpt if ttft is not None else 1.0
        eviction = ttft._eviction_weight if ttft is not None else 0.0
        self._eviction = eviction
        self._lock = threading.Lock()  # one decision at a time on the kernel's buffers
        self._kernel = fused_native.Kernel(
            EndpointSnapshot,
            EngineMetrics,
            TtftCoefficients,
            flt is not None,
            flt.abs_threshold if flt is not None else 0.0,
            flt.rel_threshold if flt is not None else 1.0,
            kinds,
            [ws.weight for ws in profile.scorers],
            eviction,
            TIE_TOLERANCE,
        )

    def __call__(
        self,
        request: RoutingRequest,
        endpoints: Sequence[EndpointSnapshot],
        ctx: SchedulingContext,
    ) -> Decision | None:
        given = endpoints if type(endpoints) is list else list(endpoints)
        if not given or not self._lock.acquire(False):
            return None  # the kernel's buffers are another thread's for now: the plugins run
        try:
            return self._decide(request, given, ctx)
        finally:
            self._lock.release()

    def _decide(
        self, request: RoutingRequest, given: list[EndpointSnapshot], ctx: SchedulingContext
    ) -> Decision | None:
        kernel = self._kernel
        gathered = kernel.gather(given)
        if gathered is None:
            return None
        kept, ids, dropped = gathered
        hashes = request.prefix_hashes
        index = self._index
        depths = index.match_list(hashes, ids) if hashes and self._depths and index else None
        lines = self._model.lines(ids) if self._model is not None else None
        fills = index.fill_list(ids) if self._fills and index is not None else None
        displaced = None
        if self._eviction and hashes and depths is not None and index is not None:
            displaced = displaced_tokens(
                index,
                hashes,
                depths=depths,
                replicas=ids,
                block_chars=request.prefix_block_chars,
                chars_per_token=self._cpt,
            )
        got = kernel.columns(ids, depths, lines, fills, displaced, _Terms(request, self._cpt))
        if got is None:
            return None
        columns, totals, order = got
        if order is None:  # totals tie: the picker shuffles them with the RNG
            table = ScoreTable(ids, self._names, columns, list(totals))
            order = rank_by_total(table, ctx.rng)
        else:
            table = ScoreTable(ids, self._names, columns, totals)
        ranked = tuple(order)
        steps = [(list(given), kept, self._filter_name)] if dropped else []
        return Decision(self._name, ranked, table, filtered_out(steps))


class _Terms:
    """A match depth's uncached tokens (the TTFT scorer's) and cached share (the prefix
    scorer's), as those plugins compute them."""

    __slots__ = ("_base", "_cpt", "_tokens", "_total")

    def __init__(self, request: RoutingRequest, chars_per_token: float) -> None:
        self._tokens = request.token_estimate
        self._base = request.prefix_block_chars
        self._cpt = chars_per_token
        hashes = request.prefix_hashes
        self._total = covered_chars(len(hashes), self._base) if hashes else 0

    def __call__(self, depth: int) -> tuple[float, float]:
        base = self._base
        share = cached_share(depth, base, self._total) if self._total else 0.0
        return uncached_tokens(self._tokens, depth, base, self._cpt), share
