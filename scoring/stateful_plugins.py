"""Registration of the plugins that read state the composition root owns and feeds.

`prefix-match-scorer` and `cache-headroom-scorer` read the `PrefixIndex`;
`estimated-ttft-scorer` reads the index and the `OnlineTtftModel`. The gateway and the
simulator each create those objects, feed them, and register these plugins with them.
"""

from __future__ import annotations

from routing import PluginRegistry
from scoring.cache_headroom import CacheHeadroomScorer
from scoring.estimated_ttft import EstimatedTtftScorer
from scoring.prefix_index import PrefixIndex
from scoring.prefix_match import PrefixMatchScorer
from scoring.ttft_model import OnlineTtftModel


def register_stateful_plugins(
    registry: PluginRegistry, index: PrefixIndex, ttft_model: OnlineTtftModel
) -> None:
    registry.register_scorer("prefix-match-scorer", PrefixMatchScorer, deps=(index,))
    registry.register_scorer("cache-headroom-scorer", CacheHeadroomScorer, deps=(index,))
    registry.register_scorer("estimated-ttft-scorer", EstimatedTtftScorer, deps=(index, ttft_model))
