"""The routing profiles a tuner evaluates: the live one, named ones, and nearby variants.

A variant changes one knob of the live profile: a scorer's weight halved or doubled (0 → 1),
or a numeric filter parameter (e.g. the imbalance filter's `abs_threshold`) halved or
doubled. At most `search` variants are tried in one evaluation, drawn with the evaluation's
own seed, so successive evaluations cover the neighbourhood and an accepted variant moves
the search (a walk, one knob at a time).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from routing.config.profiles import PluginSpec, ProfileSpec, RoutingSection, effective_profiles

FACTORS = (0.5, 2.0)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A profile under a name; `origin` says where it came from (`live`, `named`, `search`)."""

    name: str
    profile: ProfileSpec
    origin: str = "named"


def named(section: RoutingSection, names: Sequence[str]) -> list[Candidate]:
    """The named profiles (built-in or the config's); ValueError for an unknown name."""
    profiles = effective_profiles(section)
    unknown = [n for n in names if n not in profiles]
    if unknown:
        raise ValueError(f"unknown candidate profile(s) {', '.join(unknown)}")
    return [Candidate(n, profiles[n]) for n in names]


def variants(live: Candidate) -> list[Candidate]:
    """Every one-knob variant of `live` (see the module docstring), in profile order."""
    out: list[Candidate] = []
    spec = live.profile
    for i, scorer in enumerate(spec.scorers):
        for factor in FACTORS:
            weight = scorer.weight * factor if scorer.weight > 0 else 1.0
            if weight == scorer.weight:
                continue
            scorers = list(spec.scorers)
            scorers[i] = scorer.model_copy(update={"weight": weight})
            label = f"{_short(scorer.instance_name)}={weight:g}"
            out.append(_variant(live, label, spec.model_copy(update={"scorers": scorers})))
    for i, flt in enumerate(spec.filters):
        for key, value in sorted(flt.params.items()):
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                continue
            for factor in FACTORS:
                new = type(value)(value * factor) if isinstance(value, int) else value * factor
                if new == value or new <= 0:
                    continue
                filters = list(spec.filters)
                filters[i] = _with_param(flt, key, new)
                label = f"{_short(flt.instance_name)}.{key}={new:g}"
                out.append(_variant(live, label, spec.model_copy(update={"filters": filters})))
    return out


def candidate_set(
    live: Candidate,
    others: Sequence[Candidate],
    search: int,
    seed: int,
) -> list[Candidate]:
    """The live profile first, then `others` (duplicates of a profile dropped), then up to
    `search` variants of the live profile drawn with `seed`."""
    out = [live]
    for c in others:
        if all(c.profile != o.profile and c.name != o.name for o in out):
            out.append(c)
    pool = [v for v in variants(live) if all(v.profile != o.profile for o in out)]
    out += random.Random(seed).sample(pool, min(search, len(pool)))
    return out


def _variant(live: Candidate, label: str, profile: ProfileSpec) -> Candidate:
    return Candidate(f"{live.name}~{label}", profile, "search")


def _with_param(plugin: PluginSpec, key: str, value: float) -> PluginSpec:
    return plugin.model_copy(update={"params": {**plugin.params, key: value}})


def _short(name: str) -> str:
    return name.removesuffix("-scorer").removesuffix("-filter")
