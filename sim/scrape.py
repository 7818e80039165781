"""Read what replicas report about themselves: vLLM's Prometheus counters and gauges."""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True, slots=True)
class ReplicaReport:
    url: str
    requests: int  # finished requests (vllm:e2e_request_latency_seconds count)
    prefix_queries: int  # tokens
    prefix_hits: int  # tokens
    preemptions: int

    @property
    def hit_rate(self) -> float:
        return self.prefix_hits / self.prefix_queries if self.prefix_queries else 0.0


def parse_vllm_metrics(url: str, text: str) -> ReplicaReport:
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in (
                "vllm:e2e_request_latency_seconds_count",
                "vllm:prefix_cache_queries_total",
                "vllm:prefix_cache_hits_total",
                "vllm:num_preemptions_total",
            ):
                values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return ReplicaReport(
        url=url,
        requests=int(values.get("vllm:e2e_request_latency_seconds_count", 0)),
        prefix_queries=int(values.get("vllm:prefix_cache_queries_total", 0)),
        prefix_hits=int(values.get("vllm:prefix_cache_hits_total", 0)),
        preemptions=int(values.get("vllm:num_preemptions_total", 0)),
    )


async def scrape_replicas(client: httpx.AsyncClient, urls: list[str]) -> list[ReplicaReport]:
    reports = []
    for url in urls:
        resp = await client.get(url + "/metrics")
        resp.raise_for_status()
        reports.append(parse_vllm_metrics(url, resp.text))
    return reports
