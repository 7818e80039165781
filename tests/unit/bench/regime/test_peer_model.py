"""The simulator's model of sglang-router's cache_aware choice."""

from __future__ import annotations

import random

from bench.regime.peer_model import SglangCacheAwareModel, SglangParams
from routing import EndpointSnapshot, RoutingRequest, SchedulingContext
from scoring.state.prefix_index import PrefixIndex

CTX = SchedulingContext(clock=lambda: 0.0, rng=random.Random(0))


def _model(**params: float) -> tuple[SglangCacheAwareModel, PrefixIndex]:
    tree = PrefixIndex(default_capacity_blocks=1 << 40)
    return SglangCacheAwareModel("m", tree, SglangParams(**params)), tree  # type: ignore[arg-type]


def _fleet(*loads: int) -> list[EndpointSnapshot]:
    return [
        EndpointSnapshot(id=f"e{i}", url=f"http://e{i}", in_flight=n) for i, n in enumerate(loads)
    ]


def _req(*hashes: int) -> RoutingRequest:
    return RoutingRequest(model="m", prefix_hashes=hashes, prefix_block_chars=64)


def _chosen(
    model: SglangCacheAwareModel, request: RoutingRequest, fleet: list[EndpointSnapshot]
) -> str:
    scores = model.score(request, fleet, CTX)
    best = [e for e, s in scores.items() if s == 1.0]
    assert len(best) == 1 and sum(scores.values()) == 1.0
    return best[0]


def test_a_good_match_goes_where_it_was_recorded_whatever_the_load() -> None:
    model, tree = _model()
    tree.record("e2", (1, 2, 3, 4))
    assert _chosen(model, _req(1, 2, 3, 9), _fleet(0, 0, 30)) == "e2"  # 3 of 4 blocks


def test_a_poor_match_goes_to_the_smallest_tree() -> None:
    model, tree = _model()
    tree.record("e0", (1, 2, 3, 4))
    tree.record("e1", (7, 8))
    assert _chosen(model, _req(1, 5, 6, 9), _fleet(0, 0, 5)) == "e2"  # e2's tree is empty
    assert _chosen(model, _req(50, 51, 52), _fleet(0, 0, 5)) == "e1"  # now e2 has 4 blocks


def test_an_imbalanced_fleet_goes_to_the_least_loaded() -> None:
    model, tree = _model(balance_abs_threshold=4)
    tree.record("e0", (1, 2))
    assert _chosen(model, _req(1, 2), _fleet(10, 3, 6)) == "e1"  # 10 − 3 > 4, 10 > 4.5
    assert _chosen(model, _req(1, 2), _fleet(6, 3, 6)) == "e0"  # 6 − 3 ≤ 4: the match


def test_every_choice_is_recorded_in_the_chosen_workers_tree() -> None:
    model, tree = _model()
    fleet = _fleet(0, 0)
    first = _chosen(model, _req(5, 6, 7), fleet)
    assert tree.match((5, 6, 7), ["e0", "e1"])[first] == 3
    assert _chosen(model, _req(5, 6, 7, 8), fleet) == first  # and followed
