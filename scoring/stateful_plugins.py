"""Registration of the plugins that read state the composition root owns and feeds.

`prefix-match-scorer` and `cache-headroom-scorer` read the `PrefixIndex`;
`estimated-ttft-scorer` reads the index and the `OnlineTtftModel` (and, with `cache_view:
precise`, the `CacheView`); `precise-prefix-scorer` reads the `CacheView` over the
`PreciseIndex` fed by the engines' KV-cache events. The gateway and the
simulator each create those objects, feed them, and register these plugins with them.
"""

from __future__ import annotations

from routing import PluginRegistry
from scoring.scorers.cache_headroom import CacheHeadroomScorer
from scoring.scorers.estimated_ttft import EstimatedTtftScorer
from scoring.scorers.precise_prefix import PrecisePrefixScorer
from scoring.scorers.prefix_match import PrefixMatchScorer
from scoring.state.cache_view import CacheView
from scoring.state.precise_index import PreciseIndex
from scoring.state.prefix_index import PrefixIndex
from scoring.state.ttft_model import OnlineTtftModel


def register_stateful_plugins(
    registry: PluginRegistry,
    index: PrefixIndex,
    ttft_model: OnlineTtftModel,
    precise: PreciseIndex | None = None,
) -> None:
    view = CacheView(index, PreciseIndex() if precise is None else precise)
    registry.register_scorer("prefix-match-scorer", PrefixMatchScorer, deps=(index,))
    registry.register_scorer("cache-headroom-scorer", CacheHeadroomScorer, deps=(index,))
    registry.register_scorer(
        "estimated-ttft-scorer", EstimatedTtftScorer, deps=(index, ttft_model, view)
    )
    registry.register_scorer("precise-prefix-scorer", PrecisePrefixScorer, deps=(view,))
