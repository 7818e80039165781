"""Data-parallel engines in the replay: ranks routed to by the gateway or balanced by the engine."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import cast

import pytest

from routing.types import Decision, EndpointSnapshot, EngineMetrics, RoutingRequest
from sim.replay import Replay, SimSettings
from sim.replay.cli import describe_fleet, fleet_settings
from sim.replay.data_parallel import DpEndpoint
from sim.replay.replica import SimReplica
from tests.unit.sim.replay.synthetic import SMALL, tenant_trace


class Decisions:
    """A `ReplayObserver` keeping each decision's target and the ids routed among."""

    def __init__(self) -> None:
        self.targets: list[str] = []
        self.candidates: set[str] = set()

    def decided(
        self,
        now: float,
        request: RoutingRequest,
        snapshots: object,
        scraped: object,
        decision: Decision,
    ) -> None:
        assert decision.target is not None
        self.targets.append(decision.target)
        self.candidates |= {s.id for s in cast("list[EndpointSnapshot]", snapshots)}

    def first_token(self, now: float, request_id: str) -> None:
        pass

    def finished(self, now: float, request_id: str) -> None:
        pass


def _run(dp_routing: str, policy: str = "prefix-aware", n: int = 400) -> tuple[Replay, Decisions]:
    settings = SimSettings(replicas=2, data_parallel_size=4, dp_routing=dp_routing)
    seen = Decisions()
    trace = tenant_trace(n, rate=20.0, tenants=24)
    replay = Replay(trace, policy, SMALL, settings, observer=seen)
    replay.result = replay.run()  # type: ignore[attr-defined]
    return replay, seen


def test_ranks_are_targets_sharing_their_endpoints_api_server_and_scrape_phase() -> None:
    replay, seen = _run("rank")
    ids = [r.id for r in replay.replicas]
    assert ids == [f"replica-0{e}@{r}" for e in range(2) for r in range(4)]
    assert seen.candidates == set(ids)  # the gateway routes among the 8 ranks
    assert len(set(seen.targets)) > 2
    ranks = replay.replicas
    assert len({id(r.api_server) for r in ranks}) == 2
    assert ranks[0].api_server is ranks[3].api_server
    assert ranks[0].scrape_phase_s == ranks[3].scrape_phase_s != ranks[4].scrape_phase_s
    result = replay.result  # type: ignore[attr-defined]
    assert result.replica_ids == tuple(ids)
    assert sum(result.dispatched) == result.requests == 400


def test_engine_balancing_routes_to_endpoints_and_spreads_over_their_ranks() -> None:
    replay, seen = _run("engine")
    assert seen.candidates == {"replica-00", "replica-01"}
    assert set(seen.targets) == {"replica-00", "replica-01"}
    result = replay.result  # type: ignore[attr-defined]
    assert len(result.replica_ids) == 8  # the engines are still the ranks
    assert sum(result.dispatched) == result.requests == 400
    assert all(d > 0 for d in result.dispatched)  # every rank got work from its engine


def test_rank_routing_keeps_tenants_on_their_ranks_where_engine_balancing_scatters_them() -> None:
    ranked, _ = _run("rank")
    balanced, _ = _run("engine")
    hit = {
        name: r.result.prefix_hits / r.result.prefix_queries  # type: ignore[attr-defined]
        for name, r in (("rank", ranked), ("engine", balanced))
    }
    assert hit["rank"] > 1.3 * hit["engine"]


def test_one_rank_is_the_plain_fleet() -> None:
    trace = tenant_trace(200)
    plain = Replay(trace, "prefix-aware", SMALL, SimSettings(replicas=3)).run()
    for dp_routing in ("rank", "engine"):
        one = SimSettings(replicas=3, data_parallel_size=1, dp_routing=dp_routing)
        same = Replay(trace, "prefix-aware", SMALL, one).run()
        assert list(same.log.ttft_s) == list(plain.log.ttft_s)
        assert same.replica_ids == ("replica-00", "replica-01", "replica-02")


def test_ranks_on_a_pd_pool_keep_their_roles() -> None:
    settings = SimSettings(replicas=0, prefill=1, decode=1, data_parallel_size=2)
    replay = Replay(tenant_trace(120), "prefix-aware", SMALL, settings)
    result = replay.run()
    assert result.replica_ids == ("prefill-00@0", "prefill-00@1", "decode-00@0", "decode-00@1")
    assert result.requests == 120
    assert result.pd is not None


@dataclass
class _Engine:
    waiting: int
    running: int

    def load(self) -> tuple[int, int, int]:
        return self.waiting, self.running, 0


@dataclass
class _Rank:
    engine: _Engine
    scrape_phase_s: float = 0.0
    dispatched: int = 0


def _endpoint(*loads: tuple[int, int]) -> DpEndpoint:
    ranks = [_Rank(_Engine(w, r)) for w, r in loads]
    return DpEndpoint("e", cast("list[SimReplica]", ranks), first=8)


def test_the_engine_gives_the_rank_of_least_four_waiting_plus_running() -> None:
    endpoint = _endpoint((1, 0), (0, 3), (0, 5))  # loads 4, 3, 5
    assert endpoint.choose() == 9  # rank 1, at position first + 1
    assert [r.dispatched for r in endpoint.ranks] == [0, 1, 0]


def test_ties_go_in_turn() -> None:
    endpoint = _endpoint((0, 0), (0, 0), (0, 0))
    assert [endpoint.choose() - 8 for _ in range(4)] == [0, 1, 2, 0]


def test_an_endpoints_page_combines_its_ranks_series() -> None:
    class Ranked:
        def __init__(self, m: EngineMetrics) -> None:
            self.m, self.scrape_phase_s = m, 0.0

        def metrics_at(self, s: float) -> EngineMetrics:
            return self.m

    a = EngineMetrics(0.0, waiting=1, running=2, kv_usage=0.2, block_size=16, num_blocks=100)
    b = EngineMetrics(0.0, waiting=3, running=0, kv_usage=0.6, block_size=16, num_blocks=100)
    endpoint = DpEndpoint("e", cast("list[SimReplica]", [Ranked(a), Ranked(b)]), first=0)
    m = endpoint.metrics_at(1.0)
    assert (m.waiting, m.running, m.num_blocks, m.block_size) == (4, 2, 200, 16)
    assert m.kv_usage == pytest.approx(0.4)
    assert endpoint.metrics_at(1.0) is m  # one page a scrape: the snapshot can be reused


def _args(**kw: object) -> argparse.Namespace:
    base = {"replicas": None, "prefill": 0, "decode": 0, "data_parallel_size": None}
    return argparse.Namespace(**{**base, **kw})


def test_cli_flags() -> None:
    got = fleet_settings(_args(replicas=2, data_parallel_size=4, dp_routing="engine"), {})
    assert (got["data_parallel_size"], got["dp_routing"]) == (4, "engine")
    settings = SimSettings(**got)
    assert (
        describe_fleet(settings, SMALL) == "2 replicas of 4 data-parallel ranks (engine-balanced)"
    )
    assert fleet_settings(_args(replicas=2), {})["data_parallel_size"] == 1
    with pytest.raises(ValueError, match="--dp-routing is for"):
        fleet_settings(_args(replicas=2, dp_routing="engine"), {})
    with pytest.raises(ValueError, match="P/D pool"):
        fleet_settings(_args(prefill=1, decode=1, data_parallel_size=2, dp_routing="engine"), {})
    with pytest.raises(ValueError, match=">= 1"):
        fleet_settings(_args(replicas=2, data_parallel_size=-1), {})


def test_settings_refuse_what_is_not_simulated() -> None:
    with pytest.raises(ValueError, match="data_parallel_size"):
        SimSettings(data_parallel_size=0)
    with pytest.raises(ValueError, match="dp_routing"):
        SimSettings(data_parallel_size=2, dp_routing="header")
    with pytest.raises(ValueError, match="P/D pool"):
        SimSettings(replicas=0, prefill=1, decode=1, data_parallel_size=2, dp_routing="engine")
    engine = SimSettings(replicas=2, data_parallel_size=2, dp_routing="engine")
    with pytest.raises(ValueError, match="oracle"):
        Replay(tenant_trace(5), "oracle", SMALL, engine)
