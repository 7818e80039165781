"""`kvgate sim sweep`: one trace replayed over a grid of configurations, the best one named.

- `command`: `run_sweep` (plan, run, rank, report, with progress lines), `open_runner`
- `grid`: policies × scorer weights × replica counts × rate scales, and weight overrides
- `rank`: objectives, SLO constraints, tie-breaks; the best run
- `report`: the ranked table, the best run as a `routing:` snippet, sweep.json, sweep.png
- `runners`: where runs execute — this process or `--jobs N` worker processes — and
  `ray_runner`, tasks on a Ray cluster (`--ray`; imports Ray only when used)
"""

from sim.replay.sweep.command import DEFAULT_OBJECTIVE, DEFAULT_POLICIES, run_sweep

__all__ = ["DEFAULT_OBJECTIVE", "DEFAULT_POLICIES", "run_sweep"]
