"""The emulator's hand-formatted `/metrics` text parses as vLLM's would."""

from __future__ import annotations

from dataclasses import replace

from prometheus_client.parser import text_string_to_metric_families

from adapters.vllm import VLLM
from sim.emulator.metrics import TTFT_BUCKETS, LoraInfoGauge, ReplicaMetrics
from sim.engine.types import EngineConfig, EngineStats

STATS = EngineStats(
    running=3,
    waiting=2,
    kv_usage=0.25,
    block_size=16,
    num_blocks=640,
    prefix_queries=1000,
    prefix_hits=600,
    preemptions=1,
    prompt_tokens=1000,
    generation_tokens=77,
)


def _samples(m: ReplicaMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(m.render().decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


LABELS = (("engine", "0"), ("model_name", 'we"ird\\name'))


def test_gauges_counters_and_cache_config_carry_vllm_names_and_values() -> None:
    m = ReplicaMetrics('we"ird\\name', EngineConfig(block_size=16, num_blocks=640), lambda: STATS)
    got = _samples(m)
    assert got[("vllm:num_requests_running", LABELS)] == 3
    assert got[("vllm:num_requests_waiting", LABELS)] == 2
    assert got[("vllm:kv_cache_usage_perc", LABELS)] == 0.25
    assert got[("vllm:prefix_cache_queries_total", LABELS)] == 1000
    assert got[("vllm:prefix_cache_hits_total", LABELS)] == 600
    assert got[("vllm:num_preemptions_total", LABELS)] == 1
    assert got[("vllm:prompt_tokens_total", LABELS)] == 1000
    assert got[("vllm:generation_tokens_total", LABELS)] == 77
    info = (
        ("block_size", "16"),
        ("enable_prefix_caching", "True"),
        ("engine", "0"),
        ("num_gpu_blocks", "640"),
    )
    assert got[("vllm:cache_config_info", info)] == 1.0


def test_prompt_tokens_by_source_has_vllm_labels_and_sums_to_prompt_tokens() -> None:
    stats = replace(
        STATS,
        prompt_tokens_local_compute=300,
        prompt_tokens_local_cache_hit=600,
        prompt_tokens_external=100,
    )
    got = _samples(ReplicaMetrics("m", EngineConfig(), lambda: stats))
    labels = (("engine", "0"), ("model_name", "m"))
    by_source = {
        source: got[("vllm:prompt_tokens_by_source_total", (*labels, ("source", source)))]
        for source in ("local_compute", "local_cache_hit", "external_kv_transfer")
    }
    assert by_source == {"local_compute": 300, "local_cache_hit": 600, "external_kv_transfer": 100}
    assert sum(by_source.values()) == got[("vllm:prompt_tokens_total", labels)]


def test_histogram_buckets_are_cumulative_with_le_inclusive_bounds() -> None:
    m = ReplicaMetrics("m", EngineConfig(), lambda: STATS)
    for value in (0.1, 0.1, 0.3, 5000.0):  # 0.1 is a bound: counted in le="0.1"
        m.ttft.observe(value)
    got = _samples(m)
    labels = (("engine", "0"), ("model_name", "m"))

    def bucket(le: str) -> float:
        return got[("vllm:time_to_first_token_seconds_bucket", (labels[0], ("le", le), labels[1]))]

    assert bucket("0.08") == 0
    assert bucket("0.1") == 2
    assert bucket("0.5") == 3
    assert bucket(repr(TTFT_BUCKETS[-1])) == 3
    assert bucket("+Inf") == 4
    assert got[("vllm:time_to_first_token_seconds_count", labels)] == 4
    assert abs(got[("vllm:time_to_first_token_seconds_sum", labels)] - 5000.5) < 1e-9
    assert got[("vllm:e2e_request_latency_seconds_count", labels)] == 0
    assert got[("vllm:inter_token_latency_seconds_created", labels)] > 1.7e9


def test_no_lora_gauge_without_adapters() -> None:
    m = ReplicaMetrics("m", EngineConfig(), lambda: STATS)
    assert "lora" not in m.render().decode()


def test_lora_gauge_reads_as_vllm_s_and_its_newest_series_is_current() -> None:
    state = {"running": ["sql", "chat"], "waiting": []}
    gauge = LoraInfoGauge(2, lambda: state["running"], lambda: state["waiting"])
    m = ReplicaMetrics("m", EngineConfig(), lambda: STATS, gauge)
    first = m.render().decode()
    assert (
        'vllm:lora_requests_info{max_lora="2",running_lora_adapters="sql,chat",'
        'waiting_lora_adapters=""} '
    ) in first
    state.update(running=["sql"], waiting=["chat"])
    text = m.render().decode()
    series = {
        (s.labels["running_lora_adapters"], s.labels["waiting_lora_adapters"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "vllm:lora_requests_info"
    }
    # The old label set stays, as in vLLM, with an older time than the current one.
    assert series[("sql", "chat")] > series[("sql,chat", "")] > 1.7e9
    parsed = VLLM.parse_metrics(text, 0.0)
    assert parsed.running_loras == frozenset({"sql"})
    assert parsed.waiting_loras == frozenset({"chat"})
    assert parsed.max_loras == 2


def test_lora_gauge_keeps_a_bounded_history() -> None:
    names = iter(range(100))
    gauge = LoraInfoGauge(1, lambda: [f"a{next(names)}"], list)
    out: list[str] = []
    for _ in range(40):
        out.clear()
        gauge.render(out)
    assert len(out) == 1 + LoraInfoGauge.HISTORY  # the HELP/TYPE header, then the series
    assert 'running_lora_adapters="a39"' in out[-1]
