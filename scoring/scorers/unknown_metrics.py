"""How the engine-metric scorers score an endpoint whose metric is unknown.

A metric is unknown when the snapshot has `metrics=None` (never scraped, or the health layer
judged the last scrape stale) or when the engine does not report that field (a generic OpenAI
server reports nothing). Staleness itself is decided upstream: the scheduler sees snapshots
only.

Rule: an endpoint whose metric is unknown gets the worst score among the candidates whose
metric is known; when no candidate's metric is known, every candidate gets NO_INFORMATION
(0.5).

Why the worst known score: metrics go missing exactly when they matter (a busy engine answers
scrapes late, and bursts pile onto a replica between scrapes), so an unknown endpoint must never
outrank a known one on that signal. It ties the worst instead of scoring 0.0 so that it is not
judged worse than any evidence shows; the fresh `in-flight-scorer` and the other scorers then
decide between them. With nothing known the scorer carries no information: any constant leaves
the ranking unchanged, and the midpoint neither inflates nor deflates the totals that the
sampling pickers draw from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from routing import EndpointSnapshot

NO_INFORMATION = 0.5


def fill_unknown(
    endpoints: Sequence[EndpointSnapshot], known: Mapping[str, float]
) -> dict[str, float]:
    """Scores for every candidate: `known[id]` where present, else the conservative fill."""
    fill = min(known.values(), default=NO_INFORMATION)
    return {e.id: known.get(e.id, fill) for e in endpoints}
