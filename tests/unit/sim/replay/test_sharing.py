"""Gateways sharing routing state in a replay: delay, order, capacity, late dispatches, TTFT."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from routing.types import RoutingRequest
from sim.replay.gateways import ReplicaView, SimGateway, build_gateways
from sim.replay.settings import SimSettings
from sim.replay.shared_load import LoadChange, SharedLoad
from sim.replay.sharing import StateSharing

CHARS = 64  # the requests' routing block size, in prompt bytes (16 tokens at 4 bytes a token)
SCRAPED_AT = 1.0  # the gateways know the replicas' KV size from then on


def _kv_tokens(replica_id: str, at: float) -> int | None:
    return 8000 if at >= SCRAPED_AT else None  # 8000 × 4 // 64 = 500 routing blocks


def _sharing(
    delay_s: float,
    *,
    learn: bool = True,
    kv_tokens: Callable[[str, float], int | None] = _kv_tokens,
) -> tuple[StateSharing, list[float], list[SimGateway]]:
    replicas = [ReplicaView(f"replica-{i}", f"sim://replica-{i}") for i in range(2)]
    settings = SimSettings(replicas=2, gateways=2)
    gateways = build_gateways(
        settings, lambda: 0.0, random.Random(0), replicas, index=None, register=None, precise=None
    )
    due: list[float] = []
    return StateSharing(gateways, delay_s, learn, due.append, kv_tokens), due, gateways


def _request(*hashes: int, tokens: int = 300) -> RoutingRequest:
    return RoutingRequest(
        "m", prefix_hashes=hashes, prefix_block_chars=CHARS, token_estimate=tokens
    )


def _deliver_all(sharing: StateSharing) -> None:
    while sharing.pending():
        sharing.deliver()  # the replay does this at each `due` time


def test_a_placement_reaches_the_other_gateway_only_after_the_delay() -> None:
    sharing, due, (a, b) = _sharing(0.05)
    blocks = (11, 12, 13)
    sharing.placed(1.0, 0, 1, _request(*blocks), 300)
    assert due == [pytest.approx(1.05)] * 2  # the placement and the load change
    assert sharing.pending() == 2
    assert b.stack.index.match(blocks, ("replica-1",))["replica-1"] == 0
    assert (b.views[1].in_flight, b.views[1].pending_prefill_tokens) == (0, 0)
    _deliver_all(sharing)
    assert b.stack.index.match(blocks, ("replica-1",))["replica-1"] == 3
    assert (b.views[1].in_flight, b.views[1].pending_prefill_tokens) == (1, 300)
    assert (b.views[0].in_flight, a.views[1].in_flight) == (0, 0)  # the source counts its own
    assert a.stack.index.blocks("replica-1") == 0  # ... and records its own
    sharing.first_token(1.2, 0, 1, 300, None)
    sharing.ended(1.3, 0, 1)
    assert (b.views[1].in_flight, b.views[1].pending_prefill_tokens) == (1, 300)
    _deliver_all(sharing)
    assert (b.views[1].in_flight, b.views[1].pending_prefill_tokens) == (0, 0)
    assert sharing.mirrors[1].counters.applied == 1


def test_changes_arrive_in_the_order_they_were_made() -> None:
    sharing, due, (_, b) = _sharing(0.05, kv_tokens=lambda replica_id, at: 32)  # 2 blocks
    for k, h in enumerate((1, 2, 3)):
        sharing.placed(1.0 + k / 100, 0, 0, _request(h), 10)
    assert due == sorted(due)
    _deliver_all(sharing)
    held = b.stack.index.match
    assert [held((h,), ("replica-0",))["replica-0"] for h in (1, 2, 3)] == [0, 1, 1]


def test_a_placement_is_bounded_by_the_kv_size_known_when_it_was_made() -> None:
    sharing, _, (_, b) = _sharing(0.05)
    default = b.stack.index.capacity("replica-0")
    sharing.placed(SCRAPED_AT - 0.01, 0, 0, _request(1), 10)  # before the first scrape
    _deliver_all(sharing)  # after it
    assert b.stack.index.capacity("replica-0") == default
    sharing.placed(SCRAPED_AT, 0, 0, _request(2), 10)
    _deliver_all(sharing)
    assert b.stack.index.capacity("replica-0") == 500


def test_a_late_placement_adds_its_tokens_to_the_dispatches_that_did_not_see_it() -> None:
    sharing, _, (_, b) = _sharing(0.05)
    feed, view = b.stack.feed, b.views[0]
    before = feed.dispatch(view, _request(7, tokens=100), 1.99, None)
    after = feed.dispatch(view, _request(8, tokens=100), 2.0, None)  # as A's, not seeing it
    work = (before.work_tokens, after.work_tokens)
    sharing.placed(2.0, 0, 0, _request(9), 300)
    _deliver_all(sharing)
    assert (before.work_tokens, after.work_tokens) == (work[0], work[1] + 300)


def test_ttft_points_teach_the_others_lines_when_the_models_learn() -> None:
    for learn in (True, False):
        sharing, _, (a, b) = _sharing(0.05, learn=learn)
        prior = b.stack.ttft_model.coefficients("replica-1")
        for k in range(10):
            sharing.first_token(1.2, 0, 1, 0, (1000 + 500 * k, 0.1 + 0.1 * k))
        assert b.stack.ttft_model.coefficients("replica-1") == prior  # not yet
        _deliver_all(sharing)
        assert (b.stack.ttft_model.coefficients("replica-1") != prior) == learn
        assert a.stack.ttft_model.coefficients("replica-1") == prior  # the source learns itself


def test_with_no_delay_the_others_see_a_change_at_once() -> None:
    sharing, due, (a, _) = _sharing(0.0)
    own = a.stack.feed.dispatch(a.views[0], _request(4, tokens=100), 2.0, None)
    work = own.work_tokens
    sharing.placed(2.0, 1, 0, _request(5), 10)
    assert due == []
    assert sharing.pending() == 0
    assert a.views[0].in_flight == 1
    assert a.stack.index.match((5,), ("replica-0",))["replica-0"] == 1
    assert own.work_tokens == work  # seen at once: nothing was late


def test_shared_load_is_added_to_every_other_gateways_counters() -> None:
    views = [[ReplicaView(f"r{i}", "") for i in range(2)] for _ in range(3)]
    load = SharedLoad(views)
    load.apply(1, LoadChange(0, 1, 250))
    load.apply(1, LoadChange(0, pending_prefill_tokens=-50))
    counts = [[(v.in_flight, v.pending_prefill_tokens) for v in g] for g in views]
    assert counts == [[(1, 200), (0, 0)], [(0, 0), (0, 0)], [(1, 200), (0, 0)]]
