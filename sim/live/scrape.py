"""Read what replicas report about themselves: vLLM's (or SGLang's) Prometheus counters.

Counters only grow, so what a run did is the difference of two scrapes (`ReplicaReport.since`).
Prefix-cache queries and hits count tokens; the TTFT and inter-token latency histograms are
kept as their sums and counts (the engines' own means).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

import httpx
from prometheus_client.parser import text_string_to_metric_families

# Sample name → ReplicaReport field; samples of the same name are summed over their labels.
_SAMPLES = {
    "vllm:e2e_request_latency_seconds_count": "requests",
    "vllm:prefix_cache_queries_total": "prefix_queries",
    "vllm:prefix_cache_hits_total": "prefix_hits",
    "vllm:num_preemptions_total": "preemptions",
    "vllm:time_to_first_token_seconds_sum": "ttft_sum_s",
    "vllm:time_to_first_token_seconds_count": "ttft_count",
    "vllm:inter_token_latency_seconds_sum": "itl_sum_s",
    "vllm:inter_token_latency_seconds_count": "itl_count",
    # An SGLang-speaking replica's: all prompt tokens as the tokens looked up.
    "sglang:e2e_request_latency_seconds_count": "requests",
    "sglang:prompt_tokens_total": "prefix_queries",
    "sglang:cached_tokens_total": "prefix_hits",
    "sglang:time_to_first_token_seconds_sum": "ttft_sum_s",
    "sglang:time_to_first_token_seconds_count": "ttft_count",
    "sglang:inter_token_latency_seconds_sum": "itl_sum_s",
    "sglang:inter_token_latency_seconds_count": "itl_count",
}


@dataclass(frozen=True, slots=True)
class ReplicaReport:
    """One replica's cumulative counters (or, from `since`, their growth over a run)."""

    url: str
    requests: int = 0  # finished (vllm:e2e_request_latency_seconds count)
    prefix_queries: int = 0  # tokens
    prefix_hits: int = 0  # tokens
    preemptions: int = 0
    ttft_sum_s: float = 0.0
    ttft_count: int = 0
    itl_sum_s: float = 0.0
    itl_count: int = 0

    @property
    def hit_rate(self) -> float:
        return self.prefix_hits / self.prefix_queries if self.prefix_queries else 0.0

    def since(self, before: ReplicaReport) -> ReplicaReport:
        """What the counters grew by since `before` (a scrape of the same replica)."""
        grown = {
            f.name: getattr(self, f.name) - getattr(before, f.name)
            for f in fields(self)
            if f.name != "url"
        }
        return replace(self, **grown)


def parse_vllm_metrics(url: str, text: str) -> ReplicaReport:
    values = dict.fromkeys(_SAMPLES.values(), 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = _SAMPLES.get(sample.name)
            if name is not None:
                values[name] += sample.value
    return ReplicaReport(
        url=url,
        requests=int(values["requests"]),
        prefix_queries=int(values["prefix_queries"]),
        prefix_hits=int(values["prefix_hits"]),
        preemptions=int(values["preemptions"]),
        ttft_sum_s=values["ttft_sum_s"],
        ttft_count=int(values["ttft_count"]),
        itl_sum_s=values["itl_sum_s"],
        itl_count=int(values["itl_count"]),
    )


async def scrape_replicas(client: httpx.AsyncClient, urls: Sequence[str]) -> list[ReplicaReport]:
    reports = []
    for url in urls:
        resp = await client.get(url + "/metrics")
        resp.raise_for_status()
        reports.append(parse_vllm_metrics(url, resp.text))
    return reports


def summed(reports: Sequence[ReplicaReport], url: str = "all") -> ReplicaReport:
    """The counters of several replicas added up, as one report named `url`."""
    total = ReplicaReport(url)
    for r in reports:
        total = replace(
            total,
            **{
                f.name: getattr(total, f.name) + getattr(r, f.name)
                for f in fields(r)
                if f.name != "url"
            },
        )
    return total
