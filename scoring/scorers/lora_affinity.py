"""`lora-affinity-scorer`: prefer the endpoints that have the requested LoRA adapter loaded.

Formula (GIE's LoRA affinity scorer), for the adapter a = `request.lora_adapter` and a
candidate with `running_loras` R, `waiting_loras` W and `max_loras` M:

    1.0  if a is in R                       (loaded: no adapter swap)
    0.8  else if M is known and |R ∪ W| < M (a free slot; adapters waiting take slots first)
    0.6  else if a is in W                  (queued to load: served once a slot frees)
    0.0  otherwise                          (every slot taken by other adapters)

No adapter requested (None or ""): every candidate scores 1.0 (neutral). `metrics` None: the
worst score among the candidates with metrics, or 0.5 if none has any
(`scoring.scorers.unknown_metrics`).

Parameters: none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from routing import EndpointSnapshot, EngineMetrics, RoutingRequest, SchedulingContext
from scoring.scorers.unknown_metrics import fill_unknown

LOADED = 1.0
FREE_SLOT = 0.8
QUEUED = 0.6


def adapter_score(adapter: str, metrics: EngineMetrics) -> float:
    """The affinity of one engine, as reported in `metrics`, for `adapter`."""
    if adapter in metrics.running_loras:
        return LOADED
    in_use = len(metrics.running_loras | metrics.waiting_loras)
    if metrics.max_loras is not None and in_use < metrics.max_loras:
        return FREE_SLOT
    if adapter in metrics.waiting_loras:
        return QUEUED
    return 0.0


class LoraAffinityScorer:
    """Scores candidates by whether the requested adapter is loaded, loadable or queued."""

    def __init__(self, name: str) -> None:
        self.name = name

    def score(
        self,
        request: RoutingRequest,
        endpoints: Sequence[EndpointSnapshot],
        ctx: SchedulingContext,
    ) -> Mapping[str, float]:
        adapter = request.lora_adapter
        if not adapter:
            return {e.id: 1.0 for e in endpoints}
        known = {
            e.id: adapter_score(adapter, e.metrics) for e in endpoints if e.metrics is not None
        }
        return fill_unknown(endpoints, known)
