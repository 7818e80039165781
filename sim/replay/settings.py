"""What one replay needs besides the trace: fleet, engine profile, gateway signals, SLO.

`load_config` reads the gateway's own YAML file: its `routing:` section (validated by the
same `RoutingSection` schema the gateway uses) and, from `health:`, the two settings that
shape what routing sees, `scrape_interval_s` and `metrics_stale_after_s`. Other sections
are the gateway's business and are ignored here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from scoring.profiles import RoutingSection

ORACLE = "oracle"
ORACLE_PROFILE = "prefix-aware"


@dataclass(frozen=True, slots=True)
class SimSettings:
    """Everything a replay needs besides the trace and the engine profile."""

    replicas: int = 8
    routing: RoutingSection = field(default_factory=RoutingSection)
    scrape_interval_s: float = 0.05  # the gateway's health.scrape_interval_s
    stale_after_s: float = 0.2  # health.metrics_stale_after_s: older metrics are unknown
    slo_ttft_s: float = 2.0
    slo_itl_s: float = 0.1  # bound on a request's mean inter-token latency
    seed: int = 0
    fast_forward: bool = True  # False: step every engine one step at a time (for checks)
    timeline_points: int = 200  # samples per replica for the plots over time

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError("replicas must be >= 1")
        for name in ("scrape_interval_s", "stale_after_s", "slo_ttft_s", "slo_itl_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0")


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
    """SimSettings keyword arguments from the gateway's config file (empty without one)."""
    if path is None:
        return {}
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: cannot read the config: {exc}") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a mapping at the top level")
    out: dict[str, Any] = {}
    try:
        out["routing"] = RoutingSection.model_validate(raw.get("routing") or {})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(['routing', *(str(p) for p in err['loc'])])}: {err['msg']}"
            for err in exc.errors()
        )
        raise ValueError(f"{path}: {problems}") from None
    health = raw.get("health") or {}
    if not isinstance(health, dict):
        raise ValueError(f"{path}: health: expected a mapping")
    for key, target in (
        ("scrape_interval_s", "scrape_interval_s"),
        ("metrics_stale_after_s", "stale_after_s"),
    ):
        if key in health:
            value = health[key]
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ValueError(f"{path}: health.{key}: expected a number > 0, got {value!r}")
            out[target] = float(value)
    return out
