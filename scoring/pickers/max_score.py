"""`max-score-picker`: rank by weighted total, best first; ties broken at random.

Formula: sort candidates by `total` descending. Walking down that order, a run of candidates
whose totals are within TIE_TOLERANCE (1e-9) of the run's first total is a tie group; each
group is shuffled with `ctx.rng`, so tied endpoints share the load instead of the
lexicographically first one always winning. A NaN total ranks last.

Parameters: none.

Beware: with scores that change slowly (e.g. between metric scrapes) max-score sends every
request to the same endpoint; pair it with a load scorer, or use `power-of-two-picker`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from itertools import repeat
from operator import gt, neg, sub

from routing import EndpointScores, RoutingRequest, SchedulingContext, ScoreTable

_compiled_order: Callable[[list[float], float], tuple[list[int], bool]] | None
_compiled_ids: Callable[[Sequence[str], list[float], float], list[str] | None] | None
try:
    from routing.columns_native import rank_order as _compiled_order
    from routing.columns_native import ranked_ids as _compiled_ids
except ImportError:  # not built (no C compiler): the reference runs
    _compiled_order = _compiled_ids = None

TIE_TOLERANCE = 1e-9


def rank_by_total(scored: Sequence[EndpointScores], rng: random.Random) -> list[str]:
    """Endpoint ids by total descending, each tie group shuffled with `rng`."""
    if isinstance(scored, ScoreTable):  # the scheduler's columns: no per-endpoint objects
        ids, totals = scored.ids, scored.totals
    else:
        ids, totals = [s.endpoint_id for s in scored], [s.total for s in scored]
    # Sort keys, ascending: −total, and +inf for NaN so that it ranks last (as −inf would).
    if math.isnan(sum(totals)):
        keys = [math.inf if math.isnan(t) else -t for t in totals]
        order = sorted(range(len(ids)), key=keys.__getitem__)
        ordered = list(map(neg, map(keys.__getitem__, order)))  # totals best first
    elif _compiled_order is not None and _compiled_ids is not None and type(totals) is list:
        ranked = _compiled_ids(ids, totals, TIE_TOLERANCE)  # `_order` and the ids, in C
        if ranked is not None:  # no two totals tie
            return ranked
        order, _ = _compiled_order(totals, TIE_TOLERANCE)
        ordered = list(map(totals.__getitem__, order))
    else:
        order, ordered = _order(totals)
    if all(map(gt, map(sub, ordered, ordered[1:]), repeat(TIE_TOLERANCE))):
        return list(map(ids.__getitem__, order))  # no two totals tie: nothing to shuffle
    keys = [math.inf if math.isnan(t) else -t for t in totals]
    return _shuffle_ties(ids, keys, order, ordered, rng)


def _order(totals: Sequence[float]) -> tuple[list[int], list[float]]:
    """Positions by total descending, equal totals in input order, and the totals in that
    order (no NaN). The reference for `routing.columns_native.rank_order`."""
    # The same order as sorting by (−total) ascending without the keys: a stable sort,
    # reversed, keeps equal totals in input order.
    order = sorted(range(len(totals)), key=totals.__getitem__, reverse=True)
    return order, list(map(totals.__getitem__, order))


def _shuffle_ties(
    ids: Sequence[str],
    keys: list[float],
    order: list[int],
    ordered: list[float],
    rng: random.Random,
) -> list[str]:
    # A tie group runs while totals are within TIE_TOLERANCE of its first one. Equal totals
    # never straddle two groups, so sorting each group by (key, id) gives the order a sort
    # by (−total, id) would have, and the result does not depend on the input order.
    ranked: list[str] = []
    start, n = 0, len(order)
    while start < n:
        head = ordered[start]
        end = start + 1
        while end < n and _tied(head, ordered[end]):
            end += 1
        if end - start == 1:
            ranked.append(ids[order[start]])
        else:
            group = sorted(order[start:end], key=lambda k: (keys[k], ids[k]))
            names = [ids[k] for k in group]
            rng.shuffle(names)
            ranked.extend(names)
        start = end
    return ranked


def _tied(head: float, other: float) -> bool:
    return head == other or head - other <= TIE_TOLERANCE


class MaxScorePicker:
    """Picks the endpoint with the highest weighted total; the rest follow by total."""

    def __init__(self, name: str) -> None:
        self.name = name

    def pick(
        self,
        request: RoutingRequest,
        scored: Sequence[EndpointScores],
        ctx: SchedulingContext,
    ) -> Sequence[str]:
        return rank_by_total(scored, ctx.rng)
