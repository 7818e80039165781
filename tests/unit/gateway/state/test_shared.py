from __future__ import annotations

from gateway.state.codec import Placement
from gateway.state.shared import SharedState
from gateway.supervisor import Supervisor
from routing.types import RoutingRequest
from scoring.config import StateSection
from scoring.prefix_index import PrefixIndex


def _shared(backend: str, index: PrefixIndex) -> SharedState:
    section = StateSection(backend=backend, url="redis://127.0.0.1:1/0", namespace="ns")
    return SharedState(section, "pool", index, lambda: 64, lambda b: b in {"b1", "b2"})


def test_memory_shares_nothing_and_adds_no_loop() -> None:
    s = _shared("memory", PrefixIndex())
    s.note_dispatch("b1", RoutingRequest(model="m", prefix_hashes=(1, 2), prefix_block_chars=64))
    loops = Supervisor()
    s.attach(loops)
    assert loops.states() == {}
    assert s.state() == {"backend": "memory"} and not s.degraded


def test_redis_queues_dispatches_and_is_degraded_until_redis_answers() -> None:
    s = _shared("redis", PrefixIndex())
    assert s.placements is not None and s.placements.stream == "ns:pool:placements"
    s.note_dispatch("b1", RoutingRequest(model="m", prefix_hashes=(1, 2), prefix_block_chars=64))
    s.note_dispatch("b1", RoutingRequest(model="m"))  # no prompt blocks: nothing to share
    assert s.placements.counters.queued == 1
    loops = Supervisor()
    s.attach(loops)
    assert set(loops.states()) == {"state-publish", "state-apply"}
    assert s.degraded and s.state()["redis_up"] is False


def test_another_gateways_placement_lands_in_the_index_when_it_means_something_here() -> None:
    index = PrefixIndex()
    s = _shared("redis", index)
    assert s._apply(Placement("other", "b1", 64, (1, 2, 3), 0))
    assert index.match((1, 2, 3), ("b1", "b2")) == {"b1": 3, "b2": 0}
    assert not s._apply(Placement("other", "b1", 32, (4,), 0))  # cut in another block size
    assert not s._apply(Placement("other", "gone", 64, (5,), 0))  # not a backend here
    assert index.blocks("b1") == 3
