"""Admission control in the gateway: who goes to the fleet now, who waits, who is turned away.

The decisions are made by the pure core in `routing.admission`; this package binds it to
requests (identity, futures, client disconnects), to Prometheus and to the config
(`build_admission`).
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry

from gateway.admission.controller import AdmissionController
from gateway.admission.metrics import AdmissionMetrics
from health.pool import BackendPool
from routing.admission.capacity import Capacity, InFlightCap, SaturationBudget
from routing.admission.objectives import Objectives
from routing.config.schema import GatewayConfig
from routing.scheduler import Scheduler
from scoring.filters.saturation import SaturationFilter

__all__ = ["AdmissionController", "build_admission"]


def build_admission(
    config: GatewayConfig,
    pool: BackendPool,
    scheduler: Scheduler,
    clock: Callable[[], float],
    registry: CollectorRegistry,
    *,
    objectives: Objectives | None = None,
) -> AdmissionController:
    """The controller for `config.admission` (bands from `objectives` too), its capacity rule
    from the cap or from the thresholds of the default profile's `saturation-filter` (without
    one: more than 5 waiting, KV usage not counted)."""
    section = config.admission
    capacity: Capacity
    if section.max_in_flight_per_backend is not None:
        capacity = InFlightCap(section.max_in_flight_per_backend)
    else:
        params = _saturation_params(scheduler)
        capacity = SaturationBudget(params.queue_threshold, params.kv_threshold)
    return AdmissionController(
        section,
        pool,
        capacity,
        clock,
        AdmissionMetrics(registry, section.bands),
        chars_per_token=config.routing.prefix.chars_per_token,
        tick_s=config.health.scrape_interval_s,
        objectives=objectives,
    )


def _saturation_params(scheduler: Scheduler) -> SaturationFilter.Params:
    profile = scheduler.profiles[scheduler.default_profile]
    for flt in profile.filters:
        if isinstance(flt, SaturationFilter):
            return SaturationFilter.Params(flt.queue_threshold, flt.kv_threshold)
    # No filter to agree with: saturated means a long queue only. A full KV cache with a short
    # queue is the prefix cache at work (under KV pressure every engine reports it); when
    # blocks really run out the engine queues, and the queue says so.
    return SaturationFilter.Params(kv_threshold=1.0)
