"""The `routing:` section of the config file and the built-in profiles.

Loading is two-phase: `RoutingSection.model_validate(raw)` checks the shape (unknown keys
rejected, errors name their field path); `scoring.stack.build_scheduler` then builds the plugins
through the registry, failing with the profile's name on an unknown plugin or a bad parameter.

    routing:
      policy: session                 # default profile
      allow_policy_header: false      # true: honour `x-kvgate-policy: <profile>` on requests
      session_header: x-session-id
      profiles:
        cache-heavy:                  # a user profile; a built-in name would replace it
          scorers:
            - {type: in-flight-scorer, weight: 2}
          picker: {type: max-score-picker}
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

POLICY_HEADER = "x-kvgate-policy"

NonEmpty = Annotated[str, Field(min_length=1)]


class PluginSpec(BaseModel):
    """One plugin in a profile: registered type, instance name (defaults to the type), weight
    (scorers only, >= 0) and the plugin's own parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: NonEmpty
    name: NonEmpty | None = None
    weight: float = Field(default=1.0, ge=0.0, allow_inf_nan=False)
    params: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _name_defaults_to_type(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and data.get("name") is None:
            type_name = data.get("type")
            if isinstance(type_name, str):
                return {**data, "name": type_name}
        return data

    @property
    def instance_name(self) -> str:
        return self.name or self.type


class ProfileSpec(BaseModel):
    """One scheduling pipeline: filters, weighted scorers and a picker."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    filters: list[PluginSpec] = Field(default_factory=list)
    scorers: list[PluginSpec] = Field(default_factory=list)
    picker: PluginSpec

    @model_validator(mode="after")
    def _check_names_and_weights(self) -> ProfileSpec:
        # Decisions key scores and filter verdicts by instance name, so names must be unique.
        for kind, specs in (("filter", self.filters), ("scorer", self.scorers)):
            names = [s.instance_name for s in specs]
            duplicates = sorted({n for n in names if names.count(n) > 1})
            if duplicates:
                raise ValueError(
                    f"duplicate {kind} name(s) {', '.join(map(repr, duplicates))}: "
                    "give each instance a distinct 'name'"
                )
        for kind, spec in [*(("filter", f) for f in self.filters), ("picker", self.picker)]:
            if "weight" in spec.model_fields_set:
                raise ValueError(f"{kind} {spec.instance_name!r}: 'weight' only applies to scorers")
        return self


class PrefixSection(BaseModel):
    """How prompts are cut into hashed blocks, and how much the prefix index remembers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    block_tokens: int | None = Field(default=None, ge=1)  # None: the engines' block size
    chars_per_token: float = Field(default=4.0, gt=0, allow_inf_nan=False)
    capacity_blocks: int | None = Field(default=None, ge=1)  # None: from engine KV size
    # Precise index: a dispatched prompt's blocks count as held on its backend this long,
    # until the backend's KV events store them (0: events only).
    speculative_ttl_s: float = Field(default=2.0, ge=0, allow_inf_nan=False)


class TtftSection(BaseModel):
    """Prior of the per-endpoint TTFT line used by `estimated-ttft-scorer`, and its learning."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    overhead_s: float = Field(default=0.02, ge=0, allow_inf_nan=False)
    prefill_token_s: float = Field(default=2e-4, ge=0, allow_inf_nan=False)
    learn: bool = True  # fit each endpoint's line online from the TTFTs the gateway observes
    decay: float = Field(default=0.98, gt=0, le=1)


class RoutingSection(BaseModel):
    """The `routing:` section: default policy, request overrides, and user profiles."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: NonEmpty = "prefix-aware"
    # Off by default: a client choosing the profile can bypass the load filters (issue 15).
    allow_policy_header: bool = False
    session_header: NonEmpty = "x-session-id"
    prefix: PrefixSection = PrefixSection()
    ttft: TtftSection = TtftSection()
    profiles: dict[NonEmpty, ProfileSpec] = Field(default_factory=dict)

    @field_validator("session_header")
    @classmethod
    def _lower_case(cls, value: str) -> str:
        return value.lower()  # RoutingRequest.headers are lower-case

    @model_validator(mode="after")
    def _policy_is_a_profile(self) -> RoutingSection:
        available = effective_profiles(self)
        if self.policy not in available:
            names = ", ".join(sorted(available))
            error = PydanticCustomError(  # at `routing.policy`, not at `routing`
                "unknown_policy",
                "'{policy}' is not a profile (available: {names})",
                {"policy": self.policy, "names": names},
            )
            details = InitErrorDetails(type=error, loc=("policy",), input=self.policy)
            raise ValidationError.from_exception_data(type(self).__name__, [details])
        return self


def _plugin(type_name: str, weight: float | None = None) -> PluginSpec:
    return (
        PluginSpec(type=type_name) if weight is None else PluginSpec(type=type_name, weight=weight)
    )


def _prefix_aware(**ttft_params: str) -> ProfileSpec:
    """The default profile (below); `ttft_params` are added to its TTFT scorer's."""
    ttft = PluginSpec(
        type="estimated-ttft-scorer", weight=4.0, params={"eviction_weight": 0.5, **ttft_params}
    )
    return ProfileSpec(
        filters=[PluginSpec(type="load-imbalance-filter", params={"abs_threshold": 16})],
        scorers=[
            ttft,
            _plugin("prefix-match-scorer", 2.0),
            _plugin("in-flight-scorer", 1.0),
            _plugin("kv-utilization-scorer", 1.0),
            _plugin("cache-headroom-scorer", 1.0),
        ],
        picker=_plugin("max-score-picker"),
    )


BUILTIN_PROFILES: Mapping[str, ProfileSpec] = MappingProxyType(
    {
        "round-robin": ProfileSpec(picker=_plugin("round-robin-picker")),
        "random": ProfileSpec(picker=_plugin("random-picker")),
        "least-in-flight": ProfileSpec(
            scorers=[_plugin("in-flight-scorer", 1.0)], picker=_plugin("max-score-picker")
        ),
        "power-of-two": ProfileSpec(
            scorers=[_plugin("in-flight-scorer", 1.0)], picker=_plugin("power-of-two-picker")
        ),
        # The affinity target leads its fallbacks by >= 0.5 × 10 while load adds at most 1, so a
        # session stays on its endpoint; without a session key affinity is 0 and load decides.
        "session": ProfileSpec(
            scorers=[
                _plugin("session-affinity-scorer", 10.0),
                _plugin("in-flight-scorer", 1.0),
            ],
            picker=_plugin("max-score-picker"),
        ),
        # Load only, from the engines' own signals plus the gateway's immediate in-flight count.
        "least-load": ProfileSpec(
            scorers=[
                _plugin("queue-depth-scorer", 2.0),
                _plugin("kv-utilization-scorer", 1.0),
                _plugin("in-flight-scorer", 2.0),
            ],
            picker=_plugin("max-score-picker"),
        ),
        # The default: predicted TTFT leads (uncached prompt tokens plus the prefill queued
        # on each replica, in seconds); prefix-match keeps affinity until the TTFT model has
        # learned; in-flight, KV and cache-headroom break ties and spread new prefixes; the
        # imbalance filter drops hot spots. No saturation filter: under KV pressure it cut
        # the replica holding a hot prefix off. Where every replica is full, the TTFT adds
        # half the recomputation the placement's evictions cost later requests. Weights and
        # their measured history: docs/decisions/0002-default-profile-tuning.md.
        "prefix-aware": _prefix_aware(),
        # The default with the engines' own account of their caches: where a backend
        # publishes KV-cache events and the model has a tokenizer, the predicted TTFT counts
        # the cached tokens the precise index knows, elsewhere the approximate index's guess.
        # The approximate prefix match stays as placement memory (a tenant evicted
        # everywhere goes back where it was sent); replacing it by the exact share scattered
        # such tenants, adding the exact share to it over-concentrated them
        # (docs/decisions/0010-precise-index.md).
        "precise-prefix": _prefix_aware(cache_view="precise"),
        # Cache affinity and load in one unit: predicted seconds to first token.
        "estimated-ttft": ProfileSpec(
            filters=[PluginSpec(type="load-imbalance-filter", params={"abs_threshold": 16})],
            scorers=[_plugin("estimated-ttft-scorer", 1.0)],
            picker=_plugin("max-score-picker"),
        ),
    }
)


def effective_profiles(section: RoutingSection) -> dict[str, ProfileSpec]:
    """The built-in profiles overlaid by the user's; a user profile replaces a same-named one."""
    return {**BUILTIN_PROFILES, **section.profiles}
