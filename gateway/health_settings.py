"""The `health:` section as the objects health checking runs with, at start-up and reloads."""

from __future__ import annotations

from health.prober import ProbeSettings
from health.scraper import ScrapeSettings
from health.state import HealthPolicy
from routing.config.schema import HealthSection


def health_policy(h: HealthSection) -> HealthPolicy:
    return HealthPolicy(
        fail_threshold=h.fail_threshold,
        success_threshold=h.success_threshold,
        passive_fail_threshold=h.passive_fail_threshold,
        ejection_base_s=h.ejection_base_s,
        ejection_max_s=h.ejection_max_s,
    )


def probe_settings(h: HealthSection) -> ProbeSettings:
    return ProbeSettings(
        h.probe_interval_s, h.probe_timeout_s, h.model_refresh_s, h.max_scrape_bytes
    )


def scrape_settings(h: HealthSection) -> ScrapeSettings:
    return ScrapeSettings(
        h.scrape_interval_s, h.scrape_timeout_s, h.metrics_stale_after_s, h.max_scrape_bytes
    )


def probe_readmit_s(h: HealthSection) -> float:
    """The fastest return of a backend down by probes (the router's Retry-After)."""
    return h.probe_interval_s * h.success_threshold
