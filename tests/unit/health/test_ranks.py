"""Data-parallel ranks in the pool: configured or found, one health, their own metrics."""

from __future__ import annotations

import asyncio

from adapters.sglang import SGLANG
from adapters.vllm import VLLM
from health.pool import BackendPool, BackendSpec, rank_spec, target_ids
from health.prober import Prober, ProbeSettings
from health.ranks import offset_endpoint
from health.scraper import Scraper, ScrapeSettings
from health.state import HealthPolicy
from routing.types import Health
from tests.unit.health.conftest import URL, FakeClock, FakeFetcher, page


def _vllm_page(per_rank: list[tuple[int, int, float]]) -> str:
    lines = []
    for name, i in (("running", 0), ("waiting", 1)):
        lines.append(f"# TYPE vllm:num_requests_{name} gauge\n")
        lines += [
            f'vllm:num_requests_{name}{{engine="{r}",model_name="m"}} {float(v[i])}\n'
            for r, v in enumerate(per_rank)
        ]
    lines.append("# TYPE vllm:kv_cache_usage_perc gauge\n")
    lines += [
        f'vllm:kv_cache_usage_perc{{engine="{r}",model_name="m"}} {v[2]}\n'
        for r, v in enumerate(per_rank)
    ]
    lines.append("# TYPE vllm:cache_config_info gauge\n")
    lines += [
        f'vllm:cache_config_info{{block_size="16",engine="{r}",num_gpu_blocks="100"}} 1.0\n'
        for r in range(len(per_rank))
    ]
    return "".join(lines)


def test_a_configured_dp_size_makes_one_member_and_n_targets() -> None:
    pool = BackendPool([BackendSpec(URL, dp_size=3)], HealthPolicy(), FakeClock())
    [member] = pool.engines()
    assert [b.id for b in pool] == ["engine:8000@0", "engine:8000@1", "engine:8000@2"]
    assert [r.spec.rank for r in member.ranks] == [0, 1, 2]
    assert {r.spec.url for r in member.ranks} == {URL}
    assert pool.find("engine:8000") is member and pool.get("engine:8000@1").parent is member
    assert target_ids(member) == ["engine:8000", *(b.id for b in pool)]
    # One engine, one health: a probe of the member is every rank's.
    member.state.record_probe(True, 0.0)
    assert {s.health for s in pool.snapshots()} == {Health.HEALTHY}
    member.draining = True
    assert {b.health(0.0) for b in pool} == {Health.DRAINING}
    member.model_cards = {"m": {"id": "m"}}
    assert all(s.models == {"m"} for s in pool.snapshots())


def test_set_ranks_splits_a_member_once() -> None:
    pool = BackendPool([BackendSpec(URL)], HealthPolicy(), FakeClock())
    told = []
    pool.on_ranks.append(lambda b: told.append(b.id))
    assert pool.set_ranks("engine:8000", 1) is None
    assert pool.set_ranks("engine:8000", 2) is not None
    assert pool.set_ranks("engine:8000", 4) is None  # already split
    assert [b.id for b in pool] == ["engine:8000@0", "engine:8000@1"] and told == ["engine:8000"]


def test_rank_spec_and_endpoint_offsets() -> None:
    spec = rank_spec(BackendSpec(URL, id="a", dp_size=4), 2, 4)
    assert (spec.id, spec.rank, spec.dp_size, spec.url) == ("a@2", 2, 4, URL)
    assert offset_endpoint("tcp://10.0.0.1:5557", 3) == "tcp://10.0.0.1:5560"
    assert offset_endpoint("tcp://[::1]:5557", 1) == "tcp://[::1]:5558"
    assert offset_endpoint("tcp://h:5557", 0) == "tcp://h:5557"
    assert offset_endpoint("ipc:///tmp/kv", 1) == "ipc:///tmp/kv_dp1"


def test_vllm_metrics_are_read_per_engine_label() -> None:
    text = _vllm_page([(2, 1, 0.5), (0, 3, 0.25)])
    assert VLLM.dp_size_of(text) == 2
    r0, r1 = VLLM.rank_metrics(text, 1.0, 2)
    assert (r0.running, r0.waiting, r0.kv_usage, r0.num_blocks) == (2, 1, 0.5, 100)
    assert (r1.running, r1.waiting, r1.kv_usage, r1.block_size) == (0, 3, 0.25, 16)


def test_a_page_without_rank_labels_is_shared_out() -> None:
    text = (
        'sglang:num_running_reqs{model_name="m"} 5\nsglang:num_queue_reqs{model_name="m"} 2\n'
        'sglang:token_usage{model_name="m"} 0.4\n'
    )
    assert SGLANG.dp_size_of(text) == 1
    ranks = SGLANG.rank_metrics(text, 1.0, 2)
    assert [(m.running, m.waiting, m.kv_usage) for m in ranks] == [(3, 1, 0.4), (2, 1, 0.4)]
    labelled = 'sglang:num_running_reqs{dp_rank="0"} 5\nsglang:num_running_reqs{dp_rank="1"} 1\n'
    assert [m.running for m in SGLANG.rank_metrics(labelled, 1.0, 2)] == [5, 1]


def test_the_scraper_finds_vllm_ranks_and_feeds_each() -> None:
    clock, fetcher = FakeClock(), FakeFetcher()
    pool = BackendPool([BackendSpec(URL, engine="vllm")], HealthPolicy(), clock)
    scraper = Scraper(pool, fetcher, ScrapeSettings())
    fetcher.script(URL + "/metrics", page(_vllm_page([(1, 0, 0.1), (4, 2, 0.9)])))
    assert asyncio.run(scraper.scrape_once(pool.get("engine:8000")))
    assert [b.id for b in pool] == ["engine:8000@0", "engine:8000@1"]
    running = [b.metrics.running if b.metrics else None for b in pool]
    assert running == [1, 4]
    assert asyncio.run(scraper.scrape_once(pool.get("engine:8000")))  # the same page again
    assert [b.metrics.waiting if b.metrics else None for b in pool] == [0, 2]


def test_dp_size_one_never_splits() -> None:
    clock, fetcher = FakeClock(), FakeFetcher()
    pool = BackendPool([BackendSpec(URL, engine="vllm", dp_size=1)], HealthPolicy(), clock)
    fetcher.script(URL + "/metrics", page(_vllm_page([(1, 0, 0.1), (4, 2, 0.9)])))
    assert asyncio.run(
        Scraper(pool, fetcher, ScrapeSettings()).scrape_once(pool.get("engine:8000"))
    )
    assert [b.id for b in pool] == ["engine:8000"]
    assert pool.get("engine:8000").metrics is not None


def test_the_prober_reads_sglang_dp_size_from_server_info() -> None:
    clock, fetcher = FakeClock(), FakeFetcher()
    pool = BackendPool([BackendSpec(URL, engine="sglang", models=("m",))], HealthPolicy(), clock)
    fetcher.script(URL + "/health", page())
    fetcher.script(URL + "/server_info", page(b"", 404))
    fetcher.script(URL + "/get_server_info", page(b'{"dp_size": 2, "tp_size": 1}'))
    prober = Prober(pool, fetcher, ProbeSettings())
    asyncio.run(prober.initial_round())
    assert [b.id for b in pool] == ["engine:8000@0", "engine:8000@1"]
    asyncio.run(prober.initial_round())  # read once
    assert fetcher.count(URL + "/get_server_info") == 1
