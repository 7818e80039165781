"""The `tuning:` section: the self-tuning loop that replays recent traffic in the simulator
and proposes (`shadow`) or switches to (`apply`) a better routing profile (docs/self-tuning.md).

    tuning:
      mode: shadow          # off (default) | shadow | apply
      interval_s: 60        # one evaluation this often
      window_s: 120         # of the most recently recorded traffic
      lead_in_s: 120        # replayed before it, unmeasured (default window_s; 0: none)
      min_gain: 0.05        # apply: switch only for >= 5% lower predicted mean TTFT ...
      confidence: 0.8       # ... and a lower TTFT in >= 80% of the seeds
      candidates: [prefix-aware, least-load, estimated-ttft]
      search: 6             # plus up to this many variants of the live profile's weights
      seeds: 3
      engine_profile: demo
      engine_timing: named  # or fitted: scaled to the observed TTFTs
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

TUNING_MODES = ("off", "shadow", "apply")
DEFAULT_CANDIDATES = ("prefix-aware", "least-load", "estimated-ttft", "session")
MAX_LEAD_IN_S = 3600.0  # an hour of traffic replayed before each window at most


class TuningSection(BaseModel):
    """How the tuner evaluates recent traffic and what it may do with its proposal."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["off", "shadow", "apply"] = Field(
        "off", description="off; shadow: propose only; apply: switch the live profile"
    )
    spawn: bool = Field(
        True,
        description="kvgate serve starts `kvgate tune` beside itself and restarts it if it "
        "exits; false: run `kvgate tune` yourself (e.g. on another machine)",
    )
    interval_s: float = Field(60.0, gt=0, description="seconds between evaluations")
    window_s: float = Field(120.0, gt=0, description="seconds of recent traffic replayed")
    lead_in_s: float | None = Field(
        None,
        ge=0,
        le=MAX_LEAD_IN_S,
        description="seconds of traffic before the window replayed first and not measured, "
        "so the window starts on the queues and caches it inherited (default: window_s; "
        "0: the window starts cold; at most 3600)",
    )
    min_requests: int = Field(50, ge=1, description="fewer in the window: no proposal")
    min_gain: float = Field(
        0.05, ge=0, lt=1, description="apply: least predicted mean-TTFT gain (fraction)"
    )
    confidence: float = Field(
        0.8, gt=0, le=1, description="apply: least share of seeds in which the candidate wins"
    )
    rollback_tolerance: float = Field(
        0.2,
        ge=0,
        description="roll back when the next window's observed mean TTFT exceeds the "
        "prediction by more than this fraction",
    )
    check_windows: int = Field(
        2,
        ge=1,
        description="windows in a row that must miss before a rollback while their replays "
        "still rank the new profile first (1: the first miss rolls back)",
    )
    candidates: list[str] = Field(
        default_factory=lambda: list(DEFAULT_CANDIDATES),
        description="profiles evaluated beside the live one (built-in or from routing.profiles)",
    )
    search: int = Field(
        6, ge=0, description="variants of the live profile's weights and thresholds tried"
    )
    seeds: int = Field(3, ge=1, le=32, description="replays per candidate (perturbed arrivals)")
    min_new_requests: int = Field(
        1, ge=0, description="fewer recorded since the last evaluation: skip this one"
    )
    engine_profile: str = Field(
        "demo", min_length=1, description="the simulator's engine timing (a named profile)"
    )
    engine_timing: Literal["named", "fitted"] = Field(
        "named",
        description="named: engine_profile as is; fitted: engine_profile scaled to the "
        "window's observed TTFTs",
    )
    fit_min_requests: int = Field(
        30, ge=2, description="fitted: fewer observed TTFTs in the window: the named profile"
    )
    ray_address: str | None = Field(
        None, description='run the replays on this Ray cluster ("" for a local instance)'
    )

    @property
    def lead_in(self) -> float:
        """The lead-in in seconds (`lead_in_s`, by default `window_s`)."""
        return self.window_s if self.lead_in_s is None else self.lead_in_s

    @field_validator("mode", mode="before")
    @classmethod
    def _yaml_off(cls, value: Any) -> Any:
        return "off" if value is False else value  # YAML 1.1 reads a bare `off` as false


def tuner_lease_key(namespace: str, pool: str | None) -> str:
    """The Redis key of the pool's tuner lease (`kvgate tune --redis`: one tuner evaluates)."""
    return f"{namespace}:tuner:{pool or 'default'}"


def published_profile_key(namespace: str, pool: str | None) -> str:
    """The Redis key where the pool's tuner (`kvgate tune --redis`) publishes the profile it
    switched the pool to, and where gateways of the pool in mode `apply` read it."""
    return f"{namespace}:tuning:{pool or 'default'}:profile"
