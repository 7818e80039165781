"""How the engine-metric scorers score an endpoint whose metric is unknown.

A metric is unknown when the snapshot has `metrics=None` (never scraped, or the health layer
judged the last scrape stale) or when the engine does not report that field (a generic OpenAI
server reports nothing).

Rule: an endpoint whose metric is unknown gets the worst score among the candidates whose
metric is known; when no candidate's metric is known, every candidate gets NO_INFORMATION
(0.5).

Why: metrics go missing exactly when they matter (a busy engine answers scrapes late), so an
unknown endpoint must never outrank a known one; it ties the worst rather than scoring 0.0, so
it is not judged worse than the evidence shows, and the fresh `in-flight-scorer` and the other
scorers decide between them. With nothing known any constant leaves the ranking unchanged;
the midpoint neither inflates nor deflates the totals the sampling pickers draw from.
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
