"""What one replay needs besides the trace: fleet, engine profile, gateway signals, SLO.

`load_config` reads the gateway's own YAML file with the gateway's own schema and loader
(`routing.config.schema`): its `routing:` and `disaggregation:` sections and, from `health:`, the
two settings that shape what routing sees, `scrape_interval_s` and `metrics_stale_after_s` (their
defaults are the gateway's). Other sections are validated but are the gateway's business.

The fleet: `replicas` of role `both` (whole requests), then `prefill` and `decode` replicas of a
disaggregated P/D pool (`sim.replay.disaggregation`); a fleet with prefill replicas needs some
replica that decodes, and decode replicas need prefill replicas. With `data_parallel_size` N
each of them is N ranks, routed to by the gateway or balanced by the engine (`dp_routing`;
`sim.replay.data_parallel`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from routing.config.disaggregation import DisaggregationSection
from routing.config.profiles import RoutingSection
from routing.config.schema import HealthSection
from routing.config.schema import load_config as load_gateway_config

_HEALTH = HealthSection()  # the gateway's defaults for the scrape cadence and staleness
ORACLE = "oracle"
ORACLE_PROFILE = "prefix-aware"
DEFAULT_KV_EVENT_DELAY_S = 0.005  # a step's end to its KV-cache events in the precise index
DP_ROUTINGS = ("rank", "engine")  # who picks a data-parallel rank (`sim.replay.data_parallel`)
SPREADS = ("request", "session")  # how requests reach the gateways (`sim.replay.gateways`)
DEFAULT_SYNC_DELAY_S = 0.05  # a gateway's dispatch to the others' mirrors of it


@dataclass(frozen=True, slots=True)
class SimSettings:
    """Everything a replay needs besides the trace and the engine profile."""

    replicas: int = 8  # of role both; the P/D pool's prefill and decode replicas follow them
    routing: RoutingSection = field(default_factory=RoutingSection)
    prefill: int = 0
    decode: int = 0
    disaggregation: DisaggregationSection = field(default_factory=DisaggregationSection)
    data_parallel_size: int = 1  # ranks behind each replica's endpoint
    dp_routing: str = "rank"  # rank: the gateway routes to ranks; engine: the engine balances
    scrape_interval_s: float = _HEALTH.scrape_interval_s
    stale_after_s: float = _HEALTH.metrics_stale_after_s  # older metrics are unknown
    slo_ttft_s: float = 2.0
    slo_itl_s: float = 0.1  # bound on a request's mean inter-token latency
    seed: int = 0
    fast_forward: bool = True  # False: step every engine one step at a time (for checks)
    # The engines' KV cache: None, the compiled one if built; False, the pure-Python
    # reference (the same results, request by request; `sim.engine.kv_store`).
    native: bool | None = None
    timeline_points: int = 200  # samples per replica for the plots over time
    # The engines' KV-cache events reach the precise index this long after the step that
    # made them ends (virtual seconds; `sim.replay.kv_feed`).
    kv_event_delay_s: float = DEFAULT_KV_EVENT_DELAY_S
    # Feed the precise index: None, only when the policy's profile reads it.
    kv_events: bool | None = None
    # Gateway replicas in front of the fleet, how requests reach them, and whether (and how
    # late) each one's routing state reaches the others (`sim.replay.gateways`, `.sharing`).
    gateways: int = 1
    spread: str = "request"
    shared: bool = True
    sync_delay_s: float = DEFAULT_SYNC_DELAY_S
    # What the gateway, the network and the client add to every request's TTFT and latency
    # beyond the engine and its API server (`EngineProfile.frontend`), in seconds, plus so
    # much per prompt token (request bodies parsed, hashed and sent on).
    gateway_overhead_s: float = 0.0
    gateway_overhead_token_s: float = 0.0
    # A lead-in: requests arriving before `measure_from_s` (virtual seconds) run, filling the
    # queues and caches, but are not measured: the summary's requests, rejections, TTFTs,
    # latencies, ITLs and goodput are the later ones', its hit rate counts from the first of
    # them (dispatch shares, makespan and timeline: the whole replay). `lead_in_policy` routes
    # the lead-in's requests (None: the policy itself).
    measure_from_s: float = 0.0
    lead_in_policy: str | None = None

    def __post_init__(self) -> None:
        if min(self.replicas, self.prefill, self.decode) < 0 or self.fleet < 1:
            raise ValueError("replicas must be >= 1 (prefill and decode replicas count too)")
        if self.prefill and not self.replicas + self.decode:
            raise ValueError("prefill replicas need a replica that decodes (decode or both)")
        if self.decode and not self.prefill:
            raise ValueError("decode replicas need prefill replicas")
        for name in ("scrape_interval_s", "stale_after_s", "slo_ttft_s", "slo_itl_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0")
        if not self.kv_event_delay_s >= 0:
            raise ValueError("kv_event_delay_s must be >= 0")
        if self.data_parallel_size < 1:
            raise ValueError("data_parallel_size must be >= 1")
        if self.dp_routing not in DP_ROUTINGS:
            raise ValueError(f"dp_routing must be one of {', '.join(DP_ROUTINGS)}")
        if self.prefill and self.data_parallel_size > 1 and self.dp_routing == "engine":
            raise ValueError("a P/D pool's data-parallel ranks are routed by the gateway (rank)")
        if self.gateways < 1:
            raise ValueError("gateways must be >= 1")
        if self.spread not in SPREADS:
            raise ValueError(f"spread must be one of {', '.join(SPREADS)}")
        for name in (
            "sync_delay_s",
            "gateway_overhead_s",
            "gateway_overhead_token_s",
            "measure_from_s",
        ):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0")

    @property
    def fleet(self) -> int:
        """Every replica (endpoint): both, prefill and decode."""
        return self.replicas + self.prefill + self.decode

    def endpoint_roles(self) -> tuple[str, ...]:
        """Each replica's (endpoint's) role, in fleet order."""
        return ("both",) * self.replicas + ("prefill",) * self.prefill + ("decode",) * self.decode

    def roles(self) -> tuple[str, ...]:
        """Each engine's role, in fleet order: an endpoint's `data_parallel_size` ranks in turn."""
        n = self.data_parallel_size
        return tuple(role for role in self.endpoint_roles() for _ in range(n))


@dataclass(frozen=True, slots=True)
class PolicySpec:
    """A policy as the simulator runs it: a routing profile, with real or perfect signals."""

    name: str  # as the user wrote it: a profile name, `oracle` or `oracle:<profile>`
    profile: str
    oracle: bool

    @classmethod
    def parse(cls, name: str) -> PolicySpec:
        if name == ORACLE:
            return cls(name, ORACLE_PROFILE, True)
        if name.startswith(ORACLE + ":"):
            return cls(name, name.split(":", 1)[1], True)
        return cls(name, name, False)


def load_config(path: str | Path | None) -> dict[str, Any]:
    """SimSettings keyword arguments from the gateway's config file (empty without one).

    The file is validated whole by the gateway's own schema (`routing.config.schema`); the
    simulator takes `routing:`, `disaggregation:` and the two `health:` settings that shape
    what routing sees.
    """
    if path is None:
        return {}
    config = load_gateway_config(path)
    return {
        "routing": config.routing,
        "disaggregation": config.disaggregation,
        "scrape_interval_s": config.health.scrape_interval_s,
        "stale_after_s": config.health.metrics_stale_after_s,
    }
