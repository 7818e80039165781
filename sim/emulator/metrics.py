"""vLLM's `/metrics` for an emulated replica: the same names, labels, types and buckets.

Gauges and counters are read from the engine model's stats at scrape time; latency
histograms are observed by the replica's driver as tokens are delivered.

The text is formatted here from templates made once per replica, not through
prometheus_client's registry: a gateway scrapes every replica 20 times a second, all the
replicas of `kvgate emulate` share one process, and the registry's ~3 ms per render took
half a core from the engine loops (a real vLLM renders in its own API-server process).
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Sequence

from sim.engine.types import EngineConfig, EngineStats

Family = tuple[str, str]  # a metric's HELP/TYPE head, and one rank's sample lines

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

# (name, HELP text, EngineStats field); counters get vLLM's `_total` suffix.
_GAUGES = (
    ("vllm:num_requests_running", "Number of requests in model execution batches.", "running"),
    ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", "waiting"),
    ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", "kv_usage"),
)
_COUNTERS = (
    (
        "vllm:prefix_cache_queries",
        "Prefix cache queries, in terms of number of queried tokens.",
        "prefix_queries",
    ),
    (
        "vllm:prefix_cache_hits",
        "Prefix cache hits, in terms of number of cached tokens.",
        "prefix_hits",
    ),
    ("vllm:num_preemptions", "Cumulative number of preemption from the engine.", "preemptions"),
    ("vllm:prompt_tokens", "Number of prefill tokens processed.", "prompt_tokens"),
    ("vllm:generation_tokens", "Number of generation tokens processed.", "generation_tokens"),
)

# vllm:prompt_tokens_by_source: (source label, EngineStats field), in vLLM's order.
_PROMPT_SOURCES = (
    ("local_compute", "prompt_tokens_local_compute"),
    ("local_cache_hit", "prompt_tokens_local_cache_hit"),
    ("external_kv_transfer", "prompt_tokens_external"),
)


def escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _num(value: float) -> str:
    return repr(float(value))


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


class LatencyHistogram:
    """One labelled series of a Prometheus histogram: per-bucket counts, sum, creation time."""

    def __init__(self, name: str, doc: str, buckets: tuple[float, ...], labels: str) -> None:
        self._bounds = buckets
        self._counts = [0] * (len(buckets) + 1)  # the last is the +Inf bucket
        self._sum = 0.0
        self._created = time.time()
        self._head = f"# HELP {name} {doc}\n# TYPE {name} histogram\n"
        les = [*map(_le, buckets), "+Inf"]
        inner = labels.split(",", 1)  # engine="…" | model_name="…": le goes between, sorted
        self._bucket_prefixes = [f'{name}_bucket{{{inner[0]},le="{le}",{inner[1]}}} ' for le in les]
        self._count_prefix = f"{name}_count{{{labels}}} "
        self._sum_prefix = f"{name}_sum{{{labels}}} "
        self._created_head = f"# HELP {name}_created {doc}\n# TYPE {name}_created gauge\n"
        self._created_prefix = f"{name}_created{{{labels}}} "

    def observe(self, value: float) -> None:
        # Bucket i counts values <= bound i: the first bound not below the value.
        self._counts[bisect.bisect_left(self._bounds, value)] += 1
        self._sum += value

    def families(self) -> list[Family]:
        lines = []
        total = 0
        for prefix, count in zip(self._bucket_prefixes, self._counts, strict=True):
            total += count
            lines.append(f"{prefix}{total}.0\n")
        lines.append(f"{self._count_prefix}{total}.0\n{self._sum_prefix}{_num(self._sum)}\n")
        created = f"{self._created_prefix}{_num(self._created)}\n"
        return [(self._head, "".join(lines)), (self._created_head, created)]

    def render(self, out: list[str]) -> None:
        for head, body in self.families():
            out += (head, body)


def render_families(ranks: Sequence[Sequence[Family]]) -> bytes:
    """The page of several ranks' series: each metric's head once, then every rank's lines
    (the text format keeps a metric's lines together)."""
    out: list[str] = []
    for group in zip(*ranks, strict=True):
        out.append(group[0][0])
        out += (body for _, body in group)
    return "".join(out).encode()


class LoraInfoGauge:
    """vLLM's `vllm:lora_requests_info`: the running and waiting adapters and `max_lora` as
    labels, the time as the value. vLLM stamps the current label set with the time at every
    update and never drops an old set, so readers take the series with the newest time; this
    keeps the `HISTORY` most recent sets and stamps the current one at each render."""

    HISTORY = 16

    def __init__(
        self,
        max_loras: int,
        running: Callable[[], Sequence[str]],
        waiting: Callable[[], Sequence[str]],
    ) -> None:
        self._max = max_loras
        self._running = running
        self._waiting = waiting
        self._seen: dict[tuple[str, str], float] = {}  # label values → time, oldest first
        self._last = 0.0

    def render(self, out: list[str]) -> None:
        key = (",".join(self._running()), ",".join(self._waiting()))
        # Strictly increasing, so the current set is the newest even within a clock tick.
        self._last = max(time.time(), self._last + 1e-6)
        self._seen.pop(key, None)
        self._seen[key] = self._last
        while len(self._seen) > self.HISTORY:
            del self._seen[next(iter(self._seen))]
        out.append(
            "# HELP vllm:lora_requests_info Running stats on lora requests.\n"
            "# TYPE vllm:lora_requests_info gauge\n"
        )
        for (running, waiting), at in self._seen.items():
            out.append(
                f'vllm:lora_requests_info{{max_lora="{self._max}",'
                f'running_lora_adapters="{escape_label(running)}",'
                f'waiting_lora_adapters="{escape_label(waiting)}"}} {_num(at)}\n'
            )


class ReplicaMetrics:
    """What one replica's `/metrics` renders: engine gauges and counters (prompt tokens by
    source among them), latency histograms, and with LoRA adapters `vllm:lora_requests_info`.
    A data-parallel rank's series carry its rank as `engine` (`families`, merged by
    `render_families`)."""

    def __init__(
        self,
        model_name: str,
        config: EngineConfig,
        stats: Callable[[], EngineStats],
        lora_info: LoraInfoGauge | None = None,
        rank: int = 0,
    ):
        self._stats = stats
        self._lora_info = lora_info
        labels = f'engine="{rank}",model_name="{escape_label(model_name)}"'
        self._gauges = [
            (f"# HELP {n} {d}\n# TYPE {n} gauge\n", f"{n}{{{labels}}} ", f) for n, d, f in _GAUGES
        ]
        self._counters = [
            (f"# HELP {n}_total {d}\n# TYPE {n}_total counter\n", f"{n}_total{{{labels}}} ", f)
            for n, d, f in _COUNTERS
        ]
        name = "vllm:prompt_tokens_by_source_total"
        self._by_source_head = (
            f"# HELP {name} Number of prompt tokens by source.\n# TYPE {name} counter\n"
        )
        self._by_source = [
            (f'{name}{{{labels},source="{source}"}} ', f) for source, f in _PROMPT_SOURCES
        ]
        self._cache_info = (
            "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
            "# TYPE vllm:cache_config_info gauge\n",
            f'vllm:cache_config_info{{block_size="{config.block_size}",'
            f'enable_prefix_caching="{config.enable_prefix_caching}",engine="{rank}",'
            f'num_gpu_blocks="{config.num_blocks}"}} 1.0\n',
        )
        self.ttft = LatencyHistogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TTFT_BUCKETS,
            labels,
        )
        self.itl = LatencyHistogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            ITL_BUCKETS,
            labels,
        )
        self.e2e = LatencyHistogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            E2E_BUCKETS,
            labels,
        )

    def families(self) -> list[Family]:
        """Each metric's (head, this rank's lines), in page order."""
        s = self._stats()
        out = [(head, f"{prefix}{_num(getattr(s, f))}\n") for head, prefix, f in self._gauges]
        out += [(head, f"{prefix}{_num(getattr(s, f))}\n") for head, prefix, f in self._counters]
        by_source = "".join(f"{prefix}{_num(getattr(s, f))}\n" for prefix, f in self._by_source)
        out += [(self._by_source_head, by_source), self._cache_info]
        if self._lora_info is not None:
            lora: list[str] = []
            self._lora_info.render(lora)
            out.append(("", "".join(lora)))
        for h in (self.ttft, self.itl, self.e2e):
            out += h.families()
        return out

    def render(self) -> bytes:
        return render_families([self.families()])
