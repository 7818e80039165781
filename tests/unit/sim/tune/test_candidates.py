from __future__ import annotations

import pytest

from routing.config.profiles import BUILTIN_PROFILES, RoutingSection
from sim.tune.candidates import Candidate, candidate_set, named, variants

DEFAULT = Candidate("prefix-aware", BUILTIN_PROFILES["prefix-aware"], "live")


def test_variants_change_one_knob_each() -> None:
    found = variants(DEFAULT)
    # 5 scorers × (halved, doubled) + the imbalance filter's threshold × 2.
    assert len(found) == 12
    assert {v.origin for v in found} == {"search"}
    names = [v.name for v in found]
    assert "prefix-aware~prefix-match=4" in names
    assert "prefix-aware~load-imbalance.abs_threshold=8" in names
    for v in found:
        differing = [
            a for a, b in zip(v.profile.scorers, DEFAULT.profile.scorers, strict=True) if a != b
        ] + [a for a, b in zip(v.profile.filters, DEFAULT.profile.filters, strict=True) if a != b]
        assert len(differing) == 1, v.name


def test_a_variant_of_a_variant_names_both_knobs() -> None:
    first = next(v for v in variants(DEFAULT) if v.name.endswith("prefix-match=4"))
    second = [v.name for v in variants(first)]
    assert "prefix-aware~prefix-match=4~prefix-match=8" in second


def test_candidate_set_puts_the_live_profile_first_and_bounds_the_search() -> None:
    others = named(RoutingSection(), ["prefix-aware", "least-load", "round-robin"])
    picked = candidate_set(DEFAULT, others, search=3, seed=1)
    assert picked[0] is DEFAULT
    assert [c.name for c in picked[1:3]] == ["least-load", "round-robin"]  # live dropped
    assert len(picked) == 6 and all(c.origin == "search" for c in picked[3:])
    assert picked == candidate_set(DEFAULT, others, search=3, seed=1)  # seeded
    assert picked != candidate_set(DEFAULT, others, search=3, seed=2)


def test_unknown_named_profiles_are_refused() -> None:
    with pytest.raises(ValueError, match="nope"):
        named(RoutingSection(), ["prefix-aware", "nope"])
