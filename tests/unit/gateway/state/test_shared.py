from __future__ import annotations

from typing import Any

from gateway.state.shared import SharedState, lag_summary
from gateway.supervisor import Supervisor
from routing.config.schema import StateSection
from routing.types import RoutingRequest
from scoring.state.events import Forget, Placement, TtftPoints, Withdrawal
from scoring.state.prefix_index import PrefixIndex


class _Links:
    async def connect(self) -> None:
        return None

    def broadcast(self, payload: bytes) -> None:
        return None


def _shared(backend: str, index: PrefixIndex, **kw: Any) -> SharedState:
    section = StateSection(backend=backend, url="redis://127.0.0.1:1/0", namespace="ns")  # type: ignore[arg-type]
    return SharedState(
        section, "pool", index, lambda: 64, lambda b: b in {"b1", "b2"}, gateway_id="me", **kw
    )


def _request(*hashes: int) -> RoutingRequest:
    return RoutingRequest(model="m", prefix_hashes=hashes, prefix_block_chars=64)


def test_memory_shares_nothing_and_adds_no_loop() -> None:
    s = _shared("memory", PrefixIndex())
    loops = Supervisor()
    s.attach(loops)
    assert not s.active and loops.states() == {}
    assert s.state() == {"backend": "memory"} and not s.degraded and s.settled


def test_redis_queues_the_changes_and_is_degraded_until_redis_answers() -> None:
    s = _shared("redis", PrefixIndex(), local_load=dict)
    assert s.active and s.channel == "redis"
    assert s.stream is not None and s.stream.stream == "ns:pool:events:me"
    s.placed("b1", _request(1, 2), 40)
    s.placed("b1", _request(), 0)  # no prompt blocks: nothing to share
    s.withdrawn("b1", _request(1, 2), 1)
    s.forgotten("b2")
    s.ttft("b1", 100.0, 0.05)
    s.ttft("b2", 200.0, 0.07)
    batch = s.outbox.take(10)
    assert [type(e) for e in batch] == [Placement, Withdrawal, Forget, TtftPoints]
    assert batch[0].tokens == 40  # type: ignore[union-attr]
    assert batch[-1].points == (("b1", 100.0, 0.05), ("b2", 200.0, 0.07))  # type: ignore[union-attr]
    loops = Supervisor()
    s.attach(loops)
    assert set(loops.states()) == {"state-publish", "state-apply", "state-load"}
    state = s.state()
    assert s.degraded and state["redis_up"] is False and state["channel"] == "redis"
    assert not s.settled  # the stream's history not read yet, and Redis never failed


def test_the_state_tells_how_late_the_others_changes_arrive() -> None:
    s = _shared("redis", PrefixIndex(), local_load=dict)
    state = s.state()
    none = {"n": 0, "p50": None, "p90": None, "p99": None, "max": None}
    assert state["events"]["lag_ms"] == none and state["load"]["lag_ms"] == none
    s.mirror.lags_ms.extend(float(v) for v in range(1, 11))
    assert s.load is not None
    s.load.lags_ms.extend([2.5, 0.5])
    state = s.state()
    assert state["events"]["lag_ms"] == {"n": 10, "p50": 5.0, "p90": 9.0, "p99": 10.0, "max": 10.0}
    assert state["load"]["lag_ms"] == {"n": 2, "p50": 0.5, "p90": 2.5, "p99": 2.5, "max": 2.5}
    assert lag_summary([1.23456]) == {
        "n": 1,
        "p50": 1.235,
        "p90": 1.235,
        "p99": 1.235,
        "max": 1.235,
    }


def test_sibling_workers_share_over_their_own_channel_without_redis() -> None:
    s = _shared("memory", PrefixIndex(), local_load=dict, siblings=_Links())
    assert s.active and s.channel == "workers" and s.settled and not s.degraded
    loops = Supervisor()
    s.attach(loops)
    assert set(loops.states()) == {"state-workers"}
    load = s.state()["load"]
    assert load.pop("lag_ms")["n"] == 0
    assert load == {"peers": 0, "sent": 0, "received": 0, "remote": {}}
