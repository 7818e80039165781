"""SGLang's `/metrics` for an emulated replica (`kvgate emulate --engine sglang`): its names.

The scheduler's gauges (`sglang:num_running_reqs`, `sglang:num_queue_reqs`,
`sglang:token_usage`, `sglang:num_used_tokens`, `sglang:cache_hit_rate`, ...), the KV pool's
size as labels `page_size` and `num_pages` of `sglang:cache_config_info` (what kvgate's
`adapters.sglang` reads), the tokenizer's token counters and its latency histograms, read from
the engine model's stats at scrape time. Label sets follow SGLang's (`model_name`,
`engine_type`, `tp_rank`, `pp_rank`, and a data-parallel scheduler's `dp_rank`); values are
the model's, histogram buckets vLLM's.
"""

from __future__ import annotations

from collections.abc import Callable

from sim.emulator.metrics import (
    E2E_BUCKETS,
    ITL_BUCKETS,
    TTFT_BUCKETS,
    Family,
    LatencyHistogram,
    escape_label,
    render_families,
)
from sim.engine.types import EngineConfig, EngineStats


def _gauge(name: str, doc: str, labels: str) -> tuple[str, str]:
    return f"# HELP {name} {doc}\n# TYPE {name} gauge\n", f"{name}{{{labels}}} "


def _counter(name: str, doc: str, labels: str) -> tuple[str, str]:
    return f"# HELP {name} {doc}\n# TYPE {name} counter\n", f"{name}{{{labels}}} "


def _value(series: tuple[str, str], value: float) -> Family:
    return series[0], f"{series[1]}{float(value)!r}\n"


class SglangMetrics:
    """What one SGLang-speaking replica's `/metrics` renders (see the module docstring);
    `ttft`, `itl` and `e2e` are observed by the replica as `ReplicaMetrics`' are."""

    def __init__(
        self,
        model_name: str,
        config: EngineConfig,
        stats: Callable[[], EngineStats],
        rank: int | None = None,
    ):
        self._stats = stats
        model = escape_label(model_name)
        dp = "" if rank is None else f'dp_rank="{rank}",'  # a data-parallel scheduler's
        sched = f'{dp}engine_type="unified",model_name="{model}",pp_rank="0",tp_rank="0"'
        self._capacity = config.num_blocks * config.block_size
        self._running = _gauge("sglang:num_running_reqs", "The number of running requests.", sched)
        self._queue = _gauge(
            "sglang:num_queue_reqs", "The number of requests in the waiting queue.", sched
        )
        self._used = _gauge("sglang:num_used_tokens", "The number of used tokens.", sched)
        self._usage = _gauge("sglang:token_usage", "The token usage.", sched)
        self._hit_rate = _gauge("sglang:cache_hit_rate", "The prefix cache hit rate.", sched)
        self._throughput = _value(
            _gauge("sglang:gen_throughput", "The generation throughput (token/s).", sched), 0.0
        )
        self._max_tokens = _value(
            _gauge("sglang:max_total_num_tokens", "Maximum total number of tokens.", sched),
            self._capacity,
        )
        self._cache_info = (
            "# HELP sglang:cache_config_info Information of the KV cache configuration.\n"
            "# TYPE sglang:cache_config_info gauge\n",
            f'sglang:cache_config_info{{{dp}model_name="{model}",num_pages="{config.num_blocks}",'
            f'page_size="{config.block_size}"}} 1.0\n',
        )
        tokens = f'{dp}model_name="{model}"'
        self._prompt = _counter(
            "sglang:prompt_tokens_total", "Number of prefill tokens processed.", tokens
        )
        self._generation = _counter(
            "sglang:generation_tokens_total", "Number of generation tokens processed.", tokens
        )
        self._cached = _counter(
            "sglang:cached_tokens_total", "Number of cached prompt tokens.", tokens
        )
        labels = f'engine_type="unified",model_name="{model}"{"," + dp[:-1] if dp else ""}'
        self.ttft = LatencyHistogram(
            "sglang:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TTFT_BUCKETS,
            labels,
        )
        self.itl = LatencyHistogram(
            "sglang:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            ITL_BUCKETS,
            labels,
        )
        self.e2e = LatencyHistogram(
            "sglang:e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds",
            E2E_BUCKETS,
            labels,
        )

    def families(self) -> list[Family]:
        """Each metric's (head, this scheduler's lines), in page order."""
        s = self._stats()
        hit_rate = s.prefix_hits / s.prefix_queries if s.prefix_queries else 0.0
        out = [
            _value(self._running, s.running),
            _value(self._queue, s.waiting),
            _value(self._used, round(s.kv_usage * self._capacity)),
            _value(self._usage, s.kv_usage),
            self._throughput,
            _value(self._hit_rate, hit_rate),
            self._max_tokens,
            self._cache_info,
            _value(self._prompt, s.prompt_tokens),
            _value(self._generation, s.generation_tokens),
            _value(self._cached, s.prefix_hits),
        ]
        for h in (self.ttft, self.itl, self.e2e):
            out += h.families()
        return out

    def render(self) -> bytes:
        return render_families([self.families()])
