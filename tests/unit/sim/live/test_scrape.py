"""Replica counters from vLLM's /metrics text: parsed, differenced, summed."""

from __future__ import annotations

from sim.live.scrape import ReplicaReport, parse_vllm_metrics, summed

METRICS = """\
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 300.0
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1200.0
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{engine="0",model_name="m"} 2.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 4.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 4.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.8
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{engine="0",le="+Inf",model_name="m"} 20.0
vllm:inter_token_latency_seconds_count{engine="0",model_name="m"} 20.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="m"} 0.25
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="m"} 3.0
vllm:e2e_request_latency_seconds_count{engine="0",model_name="m"} 3.0
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="m"} 2.0
"""


def test_counters_are_read_from_vllm_metrics() -> None:
    r = parse_vllm_metrics("http://r", METRICS)
    assert r == ReplicaReport(
        "http://r",
        requests=3,
        prefix_queries=1200,
        prefix_hits=300,
        preemptions=2,
        ttft_sum_s=0.8,
        ttft_count=4,
        itl_sum_s=0.25,
        itl_count=20,
    )
    assert r.hit_rate == 0.25


def test_growth_since_an_earlier_scrape_keeps_the_url() -> None:
    after = parse_vllm_metrics("http://r", METRICS)
    before = ReplicaReport("http://r", requests=1, prefix_queries=200, prefix_hits=100)
    grown = after.since(before)
    assert (grown.url, grown.requests, grown.prefix_queries, grown.prefix_hits) == (
        "http://r",
        2,
        1000,
        200,
    )
    assert grown.ttft_count == 4


def test_reports_of_a_fleet_sum_field_by_field() -> None:
    a = ReplicaReport("a", requests=1, prefix_hits=5, ttft_sum_s=0.5)
    b = ReplicaReport("b", requests=2, prefix_hits=7, ttft_sum_s=0.25)
    assert summed([a, b]) == ReplicaReport("all", requests=3, prefix_hits=12, ttft_sum_s=0.75)
    assert summed([]) == ReplicaReport("all")
