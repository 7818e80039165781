"""An experiment's figures from its requests and the replicas' counters; no processes."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pytest

from sim.live import experiment
from sim.live.client import RequestResult
from sim.live.experiment import ExperimentResult, PdFleet, Router, RouterSite, kvgate_router
from sim.live.scrape import ReplicaReport


def _ok(ttft: float, itls: tuple[float, ...] = ()) -> RequestResult:
    return RequestResult("r", ttft, ttft + 0.1, 200, None, None, itls)


def test_figures_count_the_succeeded_requests_and_the_replicas_tokens() -> None:
    results = [_ok(float(t), (0.01, 0.02)) for t in range(1, 11)]
    results.append(RequestResult("bad", 0.001, 0.1, 500, None, "boom"))
    replicas = [
        ReplicaReport("a", requests=8, prefix_queries=300, prefix_hits=100),
        ReplicaReport("b", requests=3, prefix_queries=100, prefix_hits=0),
    ]
    r = ExperimentResult.of("x", results, replicas, wall_s=5.5, router=Router("http://gw"))
    assert r.hit_rate == 0.25
    assert (r.ttft_p50_s, r.ttft_p90_s, r.ttft_p99_s) == (5.0, 9.0, 10.0)  # nearest rank
    assert r.ttft_mean_s == 5.5
    assert r.errors == ["boom"]
    assert r.ttfts_s == [float(t) for t in range(1, 11)]
    assert r.itls_s == [0.01] * 10 + [0.02] * 10
    assert r.requests_per_replica == [8, 3]
    assert math.isclose(r.max_mean_share, 8 / 5.5)
    assert r.throughput_rps == 2.0


def test_no_answers_give_nan_percentiles_and_no_hit_rate() -> None:
    r = ExperimentResult.of("x", [], [ReplicaReport("a")], wall_s=0.0, router=Router("u"))
    assert math.isnan(r.ttft_p50_s) and math.isnan(r.ttft_mean_s)
    assert r.hit_rate == 0.0 and math.isnan(r.max_mean_share) and r.throughput_rps == 0.0


def test_kvgate_router_names_each_backends_pd_role(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[tuple[str, ...]] = []

    class Process:
        command = ("kvgate", "serve")

        def __enter__(self) -> Process:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

    def start_gateway(backends: Sequence[str], *_: object) -> tuple[Process, str]:
        started.append(tuple(backends))
        return Process(), "http://gw"

    monkeypatch.setattr(experiment, "start_gateway", start_gateway)
    site = RouterSite(("http://p", "http://d"), "m", Path("/tmp"), "t")
    fleet = PdFleet(1, 1, "demo", "m")
    for roles in ((), fleet.roles):
        with kvgate_router("round-robin", roles=roles)(site) as router:
            assert router.url == "http://gw"
    assert started == [("http://p", "http://d"), ("http://p,role=prefill", "http://d,role=decode")]
