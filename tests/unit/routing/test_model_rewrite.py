"""ModelRewrites: exact before generic, config before cluster, weighted draws (seeded RNG)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from routing.model_rewrite import ModelRewrites, RewriteRule


def rule(models: tuple[str, ...], *targets: tuple[str, int], source: str = "config") -> RewriteRule:
    return RewriteRule(frozenset(models), tuple(targets), source)


def test_no_rule_leaves_the_model() -> None:
    rewrites = ModelRewrites([rule(("a",), ("a-v2", 1))], random.Random(0))
    assert rewrites.target("b") is None
    assert rewrites.rule("b") is None
    assert bool(rewrites)
    assert not ModelRewrites([], random.Random(0))


def test_an_exact_rule_beats_a_generic_one_and_the_config_beats_the_cluster() -> None:
    generic = rule((), ("base", 1))
    rewrites = ModelRewrites([generic, rule(("a",), ("a-config", 1))], random.Random(0))
    rewrites.watched([rule(("a", "b"), ("cluster", 1), source="ns/x"), rule((), ("other", 1))])
    assert rewrites.target("a") == "a-config"
    assert rewrites.target("b") == "cluster"
    assert rewrites.target("c") == "base"  # the config's generic rule comes first
    rewrites.watched([])
    assert rewrites.target("b") == "base"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_weighted_targets_get_their_share(seed: int) -> None:
    rewrites = ModelRewrites(
        [rule(("m",), ("v1", 50), ("v2", 50)), rule(("n",), ("x", 1), ("y", 3))],
        random.Random(seed),
    )
    halves = Counter(rewrites.target("m") for _ in range(4000))
    quarters = Counter(rewrites.target("n") for _ in range(4000))
    assert abs(halves["v1"] / 4000 - 0.5) < 0.03
    assert abs(quarters["y"] / 4000 - 0.75) < 0.03


def test_a_seeded_rng_draws_the_same_targets_and_weight_zero_is_never_drawn() -> None:
    rules = [rule(("m",), ("v1", 1), ("v2", 1), ("never", 0))]
    first = [ModelRewrites(rules, random.Random(7)).target("m") for _ in range(1)]
    a = ModelRewrites(rules, random.Random(7))
    b = ModelRewrites(rules, random.Random(7))
    draws = [a.target("m") for _ in range(200)]
    assert draws == [b.target("m") for _ in range(200)]
    assert draws[:1] == first
    assert "never" not in draws and {"v1", "v2"} <= set(draws)


def test_targets_without_weights_share_equally() -> None:
    rewrites = ModelRewrites([rule(("m",), ("v1", 0), ("v2", 0))], random.Random(3))
    assert set(rewrites.target("m") for _ in range(100)) == {"v1", "v2"}


def test_every_sum_of_weights_requests_split_exactly_in_random_order() -> None:
    rewrites = ModelRewrites(
        [rule(("m",), ("v1", 50), ("v2", 50)), rule(("n",), ("a", 90), ("b", 10))],
        random.Random(11),
    )
    halves = [rewrites.target("m") for _ in range(400)]
    assert Counter(halves) == {"v1": 200, "v2": 200}
    assert halves[:8] != ["v1", "v2"] * 4 and halves[:8] != ["v2", "v1"] * 4  # not alternating
    for _ in range(5):  # weights 9:1 after the gcd: every 10 requests, 9 and 1
        assert Counter(rewrites.target("n") for _ in range(10)) == {"a": 9, "b": 1}


def test_weights_beyond_the_deck_are_drawn_independently() -> None:
    rewrites = ModelRewrites([rule(("m",), ("v1", 999_999), ("v2", 2))], random.Random(5))
    draws = Counter(rewrites.target("m") for _ in range(2000))
    assert draws["v1"] >= 1990


def test_a_changed_rule_starts_a_new_deck() -> None:
    rewrites = ModelRewrites([], random.Random(2))
    rewrites.watched([rule(("m",), ("v1", 1), ("v2", 1), source="ns/a")])
    first = rewrites.target("m")
    rewrites.watched([rule(("m",), ("v3", 1), source="ns/a")])
    assert first in {"v1", "v2"} and rewrites.target("m") == "v3"
