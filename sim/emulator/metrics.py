"""vLLM's `/metrics` for an emulated replica: the same names, labels, types and buckets.

Gauges and counters are read from the engine model's stats at scrape time; latency
histograms are observed by the replica's driver as tokens are delivered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from sim.engine.types import EngineConfig, EngineStats

TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
E2E_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
_LABELS = ("engine", "model_name")


class _EngineStatsCollector(Collector):
    def __init__(
        self, labels: tuple[str, str], config: EngineConfig, stats: Callable[[], EngineStats]
    ) -> None:
        self._labels = list(labels)
        self._config = config
        self._stats = stats

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        s = self._stats()
        for name, doc, value in (
            (
                "vllm:num_requests_running",
                "Number of requests in model execution batches.",
                s.running,
            ),
            ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", s.waiting),
            ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", s.kv_usage),
        ):
            g = GaugeMetricFamily(name, doc, labels=_LABELS)
            g.add_metric(self._labels, value)
            yield g
        for name, doc, value in (
            (
                "vllm:prefix_cache_queries",
                "Prefix cache queries, in terms of number of queried tokens.",
                s.prefix_queries,
            ),
            (
                "vllm:prefix_cache_hits",
                "Prefix cache hits, in terms of number of cached tokens.",
                s.prefix_hits,
            ),
            (
                "vllm:num_preemptions",
                "Cumulative number of preemption from the engine.",
                s.preemptions,
            ),
            ("vllm:prompt_tokens", "Number of prefill tokens processed.", s.prompt_tokens),
            (
                "vllm:generation_tokens",
                "Number of generation tokens processed.",
                s.generation_tokens,
            ),
        ):
            c = CounterMetricFamily(name, doc, labels=_LABELS)
            c.add_metric(self._labels, value)
            yield c
        cfg = self._config
        info = GaugeMetricFamily(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            labels=["block_size", "enable_prefix_caching", "engine", "num_gpu_blocks"],
        )
        info.add_metric(
            [
                str(cfg.block_size),
                str(cfg.enable_prefix_caching),
                self._labels[0],
                str(cfg.num_blocks),
            ],
            1.0,
        )
        yield info


class ReplicaMetrics:
    """The registry behind one replica's `/metrics`."""

    def __init__(self, model_name: str, config: EngineConfig, stats: Callable[[], EngineStats]):
        self.registry = CollectorRegistry()
        labels = ("0", model_name)
        self.registry.register(_EngineStatsCollector(labels, config, stats))

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            h = Histogram(name, doc, _LABELS, buckets=buckets, registry=self.registry)
            return h.labels(*labels)

        self.ttft = histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TTFT_BUCKETS,
        )
        self.itl = histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            ITL_BUCKETS,
        )
        self.e2e = histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            E2E_BUCKETS,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
