"""The grid of `kvgate sim sweep`: policies × scorer weights × replica counts × rate scales.

`--weights 'prefix-match-scorer=1,3,5;queue-depth-scorer=1,2'` names scorers by instance
name (the plugin type unless the profile renamed it). A policy is swept over the weights
of the scorers its profile has; the others leave it alone, so round-robin runs once per
replica count and rate scale, not once per weight combination. A weight override replaces
the policy's profile in the `routing:` section under the same name, which is exactly what
the replay's scheduler then builds.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from routing.config.profiles import ProfileSpec, RoutingSection, effective_profiles
from sim.replay.settings import PolicySpec

Weights = tuple[tuple[str, float], ...]  # (scorer instance name, weight), in --weights order


@dataclass(frozen=True, slots=True)
class WeightAxis:
    """One scorer's weights to try."""

    scorer: str
    values: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class GridPoint:
    """One run of the sweep: a policy with weight overrides, a fleet size and a rate scale."""

    policy: str
    weights: Weights
    replicas: int
    rate_scale: float

    @property
    def oracle(self) -> bool:
        return PolicySpec.parse(self.policy).oracle

    def weights_label(self) -> str:
        return ",".join(f"{_short(s)}={w:g}" for s, w in self.weights) or "-"


def _short(scorer: str) -> str:
    return scorer.removesuffix("-scorer")


def parse_names(text: str, option: str) -> list[str]:
    """Comma-separated names, duplicates dropped, order kept."""
    names = list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names:
        raise ValueError(f"{option}: expected at least one name")
    return names


def parse_numbers(text: str, option: str, *, integer: bool = False) -> list[float]:
    """Comma-separated positive numbers (integers with `integer`), duplicates dropped."""
    values: list[float] = []
    for item in (i.strip() for i in text.split(",")):
        try:
            value = float(int(item)) if integer else float(item)
        except ValueError:
            kind = "integers" if integer else "numbers"
            raise ValueError(f"{option}: expected comma-separated {kind}, got {item!r}") from None
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{option}: values must be > 0, got {item!r}")
        if value not in values:
            values.append(value)
    return values


def parse_weights(text: str) -> list[WeightAxis]:
    """`SCORER=W1,W2;SCORER=W3` as axes; an empty text means no weight overrides."""
    axes: list[WeightAxis] = []
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        scorer, sep, values = part.partition("=")
        scorer = scorer.strip()
        if not sep or not scorer:
            raise ValueError(f"--weights: expected SCORER=W1,W2,... in {part!r}")
        if any(a.scorer == scorer for a in axes):
            raise ValueError(f"--weights: scorer {scorer!r} is listed twice")
        weights: list[float] = []
        for item in (v.strip() for v in values.split(",")):
            try:
                weight = float(item)
            except ValueError:
                raise ValueError(f"--weights: {scorer}: not a number: {item!r}") from None
            if not (math.isfinite(weight) and weight >= 0):
                raise ValueError(f"--weights: {scorer}: weights must be >= 0, got {item!r}")
            if weight not in weights:
                weights.append(weight)
        axes.append(WeightAxis(scorer, tuple(weights)))
    return axes


def policy_profile(section: RoutingSection, policy: str) -> tuple[str, ProfileSpec]:
    """The name and spec of the profile a policy runs; ValueError for an unknown policy."""
    name = PolicySpec.parse(policy).profile
    profiles = effective_profiles(section)
    if name not in profiles:
        known = ", ".join(sorted(profiles))
        raise ValueError(f"unknown policy {policy!r} (profiles: {known}; or oracle[:PROFILE])")
    return name, profiles[name]


def expand_grid(
    section: RoutingSection,
    policies: Sequence[str],
    axes: Sequence[WeightAxis],
    replicas: Sequence[int],
    rate_scales: Sequence[float],
) -> tuple[list[GridPoint], list[str]]:
    """Every run, policy-major, and notes on the weights a policy does not have."""
    scorers_of = {
        p: [s.instance_name for s in policy_profile(section, p)[1].scorers] for p in policies
    }
    every = {s for names in scorers_of.values() for s in names}
    for axis in axes:
        if axis.scorer not in every:
            known = ", ".join(sorted(every)) or "none"
            raise ValueError(
                f"--weights: no swept policy has a scorer named {axis.scorer!r} "
                f"(their scorers: {known})"
            )
    points: list[GridPoint] = []
    notes: list[str] = []
    for policy in policies:
        mine = [a for a in axes if a.scorer in scorers_of[policy]]
        missing = [a.scorer for a in axes if a not in mine]
        if missing:
            notes.append(
                f"note: {policy} has no {', '.join(missing)}: its weights are not swept there"
            )
        combos = itertools.product(*(a.values for a in mine))
        for combo, n, scale in itertools.product(combos, replicas, rate_scales):
            weights = tuple((a.scorer, w) for a, w in zip(mine, combo, strict=True))
            points.append(GridPoint(policy, weights, n, scale))
    return points, notes


def with_weights(section: RoutingSection, policy: str, weights: Weights) -> RoutingSection:
    """The routing section in which the policy's profile has these scorer weights."""
    if not weights:
        return section
    name, spec = policy_profile(section, policy)
    wanted = dict(weights)
    scorers = [
        s.model_copy(update={"weight": wanted[s.instance_name]}) if s.instance_name in wanted else s
        for s in spec.scorers
    ]
    profile = spec.model_copy(update={"scorers": scorers})
    return section.model_copy(update={"profiles": {**section.profiles, name: profile}})
