"""Offline replay: a trace through the gateway's own routing code onto simulated engines.

- `simulator`: `Replay`, the discrete-event loop (virtual clock, event heap, routing)
- `closed_loop`: `ClosedLoop`, users whose next turn follows their last one's answer
- `replica`: one engine model on the clock, and what a metrics scrape of it reads
- `gateways`: several gateways in front of the fleet, their routing state shared or not
- `oracle_index`: the oracle's prefix index, read from the engines' KV caches
- `kv_feed`: the engines' KV-cache events on their way to the precise index (a delay)
- `blocks`: a trace request as engine block hashes and as routing prefix hashes
- `events`, `outcomes`: the event heap; what a replay keeps (per request, ITL, timeline)
- `settings`: fleet, signals and SLO, read from the gateway's config file
- `report`, `cli`: summaries, table, `summary.json`, plots; the `kvgate sim` command
- `sweep`: `kvgate sim sweep`, a grid of configurations replayed here, in worker processes
  or on a Ray cluster, and the best one named
"""

from sim.replay.closed_loop import ClosedLoop
from sim.replay.outcomes import ReplayResult
from sim.replay.report import PolicySummary, summarize
from sim.replay.settings import PolicySpec, SimSettings, load_config
from sim.replay.simulator import Replay

__all__ = [
    "ClosedLoop",
    "PolicySpec",
    "PolicySummary",
    "Replay",
    "ReplayResult",
    "SimSettings",
    "load_config",
    "summarize",
]
