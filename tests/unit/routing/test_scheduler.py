from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence

import pytest

from routing import (
    Candidates,
    Decision,
    EndpointScores,
    EndpointSnapshot,
    Profile,
    RoutingRequest,
    Scheduler,
    SchedulingContext,
    ScoreColumn,
    WeightedScorer,
    endpoint_ids,
)
from routing.scheduler import UnknownProfileError

REQUEST = RoutingRequest(model="m")


def _endpoints(*ids: str) -> list[EndpointSnapshot]:
    return [EndpointSnapshot(id=i, url=f"http://{i}.test") for i in ids]


class DropFilter:
    """Drops the named endpoints and records what it was shown."""

    def __init__(self, name: str, drop: set[str]) -> None:
        self.name = name
        self.drop = drop
        self.seen: list[list[str]] = []

    def filter(
        self,
        request: RoutingRequest,
        endpoints: Sequence[EndpointSnapshot],
        ctx: SchedulingContext,
    ) -> Sequence[EndpointSnapshot]:
        self.seen.append([e.id for e in endpoints])
        return [e for e in endpoints if e.id not in self.drop]


class FixedScorer:
    def __init__(self, name: str, scores: Mapping[str, float]) -> None:
        self.name = name
        self.scores = scores

    def score(
        self,
        request: RoutingRequest,
        endpoints: Sequence[EndpointSnapshot],
        ctx: SchedulingContext,
    ) -> Mapping[str, float]:
        return {e.id: self.scores[e.id] for e in endpoints if e.id in self.scores}


class ClockScorer:
    """Scores 1.0 iff the injected clock reads `expected` and the RNG is the injected one."""

    def __init__(self, expected: float, rng: random.Random) -> None:
        self.name = "clock"
        self.expected = expected
        self.rng = rng

    def score(
        self,
        request: RoutingRequest,
        endpoints: Sequence[EndpointSnapshot],
        ctx: SchedulingContext,
    ) -> Mapping[str, float]:
        ok = ctx.clock() == self.expected and ctx.rng is self.rng
        return {e.id: 1.0 if ok else 0.0 for e in endpoints}


class TotalPicker:
    """Ranks by total descending, then id; counts its calls."""

    name = "by-total"

    def __init__(self) -> None:
        self.calls = 0

    def pick(
        self,
        request: RoutingRequest,
        scored: Sequence[EndpointScores],
        ctx: SchedulingContext,
    ) -> Sequence[str]:
        self.calls += 1
        return [s.endpoint_id for s in sorted(scored, key=lambda s: (-s.total, s.endpoint_id))]


def _scheduler(*profiles: Profile, clock: Callable[[], float] = lambda: 0.0) -> Scheduler:
    return Scheduler({p.name: p for p in profiles}, profiles[0].name, clock, random.Random(0))


def _totals(decision: Decision) -> dict[str, float]:
    return {s.endpoint_id: s.total for s in decision.scores}


def test_filters_narrow_in_order_and_filtered_out_names_the_filter() -> None:
    first = DropFilter("no-a", {"a"})
    second = DropFilter("no-c", {"c", "a"})
    profile = Profile("p", TotalPicker(), filters=(first, second))
    decision = _scheduler(profile).schedule(REQUEST, _endpoints("a", "b", "c", "d"))
    assert first.seen == [["a", "b", "c", "d"]]
    assert second.seen == [["b", "c", "d"]]
    assert dict(decision.filtered_out) == {"a": "no-a", "c": "no-c"}
    assert decision.ranked == ("b", "d")
    assert {s.endpoint_id for s in decision.scores} == {"b", "d"}


class PassFilter:
    """Removes nobody: returns its input itself, or an equal copy; records what it was shown."""

    def __init__(self, name: str, copy: bool = False) -> None:
        self.name = name
        self.copy = copy
        self.seen: list[Sequence[EndpointSnapshot]] = []

    def filter(
        self,
        request: RoutingRequest,
        endpoints: Sequence[EndpointSnapshot],
        ctx: SchedulingContext,
    ) -> Sequence[EndpointSnapshot]:
        self.seen.append(endpoints)
        return tuple(endpoints) if self.copy else endpoints


def test_a_filter_that_removes_nobody_names_nobody_and_passes_the_list_on() -> None:
    same, copy, last = PassFilter("same"), PassFilter("copy", copy=True), PassFilter("last")
    profile = Profile(
        "p", TotalPicker(), filters=(same, DropFilter("no-b", {"b"}), same, copy, last)
    )
    decision = _scheduler(profile).schedule(REQUEST, _endpoints("a", "b", "c"))
    assert dict(decision.filtered_out) == {"b": "no-b"}
    assert [[e.id for e in seen] for seen in same.seen] == [["a", "b", "c"], ["a", "c"]]
    assert copy.seen[0] is same.seen[1]  # returned as it was
    assert [e.id for e in last.seen[0]] == ["a", "c"]
    assert decision.ranked == ("a", "c")


def test_everything_filtered_gives_an_empty_decision_without_picking() -> None:
    picker = TotalPicker()
    later = DropFilter("later", set())
    profile = Profile("p", picker, filters=(DropFilter("all", {"a", "b"}), later))
    decision = _scheduler(profile).schedule(REQUEST, _endpoints("a", "b"))
    assert decision.ranked == ()
    assert decision.target is None
    assert decision.scores == ()
    assert dict(decision.filtered_out) == {"a": "all", "b": "all"}
    assert picker.calls == 0
    assert later.seen == []


def test_no_endpoints_gives_an_empty_decision() -> None:
    decision = _scheduler(Profile("p", TotalPicker())).schedule(REQUEST, [])
    assert decision.ranked == ()
    assert decision.target is None


@pytest.mark.parametrize(
    ("raw", "clamped"),
    [(1.7, 1.0), (-0.2, 0.0), (math.nan, 0.0), (math.inf, 1.0), (-math.inf, 0.0), (0.4, 0.4)],
)
def test_scores_are_clamped_to_unit_interval(raw: float, clamped: float) -> None:
    profile = Profile(
        "p", TotalPicker(), scorers=(WeightedScorer(FixedScorer("s", {"a": raw}), 2.0),)
    )
    decision = _scheduler(profile).schedule(REQUEST, _endpoints("a"))
    (result,) = decision.scores
    assert result.scores == {"s": clamped}
    assert result.total == pytest.approx(2.0 * clamped)


def test_missing_score_counts_as_zero() -> None:
    scorer = FixedScorer("s", {"a": 0.8})
    profile = Profile("p", TotalPicker(), scorers=(WeightedScorer(scorer, 1.0),))
    decision = _scheduler(profile).schedule(REQUEST, _endpoints("a", "b"))
    assert {s.endpoint_id: dict(s.scores) for s in decision.scores} == {
        "a": {"s": 0.8},
        "b": {"s": 0.0},
    }


def _weighted(load_weight: float, cache_weight: float) -> Profile:
    load = FixedScorer("load", {"a": 1.0, "b": 0.0})
    cache = FixedScorer("cache", {"a": 0.0, "b": 0.6})
    return Profile(
        "p",
        TotalPicker(),
        scorers=(WeightedScorer(load, load_weight), WeightedScorer(cache, cache_weight)),
    )


def test_total_is_the_weighted_sum_and_weights_decide() -> None:
    light_cache = _scheduler(_weighted(1.0, 1.0)).schedule(REQUEST, _endpoints("a", "b"))
    assert _totals(light_cache) == {"a": 1.0, "b": pytest.approx(0.6)}
    assert light_cache.ranked == ("a", "b")
    heavy_cache = _scheduler(_weighted(1.0, 3.0)).schedule(REQUEST, _endpoints("a", "b"))
    assert _totals(heavy_cache) == {"a": 1.0, "b": pytest.approx(1.8)}
    assert heavy_cache.ranked == ("b", "a")


def test_decision_is_ranked_best_first_and_names_the_profile() -> None:
    scorer = FixedScorer("s", {"a": 0.2, "b": 0.9, "c": 0.5})
    profile = Profile("ranked", TotalPicker(), scorers=(WeightedScorer(scorer, 1.0),))
    decision = _scheduler(profile).schedule(REQUEST, _endpoints("a", "b", "c"))
    assert decision.profile == "ranked"
    assert decision.ranked == ("b", "c", "a")
    assert decision.target == "b"


def test_profile_is_chosen_by_name_else_default() -> None:
    scheduler = _scheduler(Profile("first", TotalPicker()), Profile("second", TotalPicker()))
    assert scheduler.schedule(REQUEST, _endpoints("a")).profile == "first"
    assert scheduler.schedule(REQUEST, _endpoints("a"), profile="second").profile == "second"


def test_unknown_profile_raises() -> None:
    scheduler = _scheduler(Profile("p", TotalPicker()))
    with pytest.raises(UnknownProfileError, match="nope"):
        scheduler.schedule(REQUEST, _endpoints("a"), profile="nope")
    with pytest.raises(UnknownProfileError, match="missing"):
        Scheduler({"p": Profile("p", TotalPicker())}, "missing", lambda: 0.0, random.Random(0))


def test_plugins_get_the_injected_clock_and_rng() -> None:
    rng = random.Random(3)
    profile = Profile("p", TotalPicker(), scorers=(WeightedScorer(ClockScorer(42.0, rng), 1.0),))
    scheduler = Scheduler({"p": profile}, "p", lambda: 42.0, rng)
    assert _totals(scheduler.schedule(REQUEST, _endpoints("a"))) == {"a": 1.0}


def test_inputs_are_not_mutated_and_profiles_are_read_only() -> None:
    endpoints = _endpoints("a", "b", "c")
    before = list(endpoints)
    profile = Profile("p", TotalPicker(), filters=(DropFilter("f", {"b"}),))
    scheduler = _scheduler(profile)
    scheduler.schedule(REQUEST, endpoints)
    assert endpoints == before
    with pytest.raises(TypeError):
        scheduler.profiles["q"] = profile  # type: ignore[index]


class ColumnScorer:
    """Answers with a `ScoreColumn` over the ids it was given (the fast path)."""

    def __init__(self, name: str, scores: Mapping[str, float], unit: bool = False) -> None:
        self.name = name
        self.scores = scores
        self.unit = unit
        self.shown: list[Sequence[EndpointSnapshot]] = []

    def score(
        self,
        request: RoutingRequest,
        endpoints: Sequence[EndpointSnapshot],
        ctx: SchedulingContext,
    ) -> Mapping[str, float]:
        self.shown.append(endpoints)
        ids = endpoint_ids(endpoints)
        return ScoreColumn(ids, [self.scores[i] for i in ids], unit=self.unit)


def test_score_columns_are_taken_as_they_are_and_clamped_unless_unit() -> None:
    raw = {"a": 1.5, "b": 0.25, "c": math.nan}
    column = ColumnScorer("col", raw)
    plain = FixedScorer("plain", {"a": 0.5, "c": 1.0})
    profile = Profile(
        "p", TotalPicker(), scorers=(WeightedScorer(column, 2.0), WeightedScorer(plain, 1.0))
    )
    decision = _scheduler(profile).schedule(REQUEST, _endpoints("a", "b", "c"))
    (shown,) = column.shown
    assert isinstance(shown, Candidates) and shown.ids == ("a", "b", "c")
    assert {s.endpoint_id: dict(s.scores) for s in decision.scores} == {
        "a": {"col": 1.0, "plain": 0.5},
        "b": {"col": 0.25, "plain": 0.0},
        "c": {"col": 0.0, "plain": 1.0},
    }
    assert _totals(decision) == {"a": 2.5, "b": 0.5, "c": 1.0}


def test_a_column_over_other_ids_is_read_as_a_mapping() -> None:
    class Reordered(ColumnScorer):
        def score(
            self,
            request: RoutingRequest,
            endpoints: Sequence[EndpointSnapshot],
            ctx: SchedulingContext,
        ) -> Mapping[str, float]:
            ids = [e.id for e in reversed(endpoints)]
            return ScoreColumn(ids, [self.scores[i] for i in ids], unit=True)

    profile = Profile(
        "p", TotalPicker(), scorers=(WeightedScorer(Reordered("r", {"a": 0.1, "b": 0.9}), 1.0),)
    )
    decision = _scheduler(profile).schedule(REQUEST, _endpoints("a", "b"))
    assert _totals(decision) == {"a": 0.1, "b": 0.9}


def test_score_column_reads_as_a_mapping() -> None:
    col = ScoreColumn(("a", "b"), [0.5, 1.0])
    assert col == {"a": 0.5, "b": 1.0}
    assert col["b"] == 1.0 and col.get("z") is None and list(col) == ["a", "b"]
    assert len(col) == 2
    with pytest.raises(ValueError, match="one score per id"):
        ScoreColumn(("a",), [])


def test_endpoint_ids_reads_candidates_once_listed() -> None:
    eps = _endpoints("x", "y")
    assert endpoint_ids(eps) == ["x", "y"]
    cands = Candidates(eps)
    assert cands == eps and endpoint_ids(cands) is cands.ids and cands.ids == ("x", "y")
