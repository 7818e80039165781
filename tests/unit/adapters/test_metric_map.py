from __future__ import annotations

import pytest

from adapters.metric_map import MetricMap, MetricMapAdapter, Source
from routing.types import EngineMetrics

ADAPTER = MetricMapAdapter(
    engine="test",
    names=MetricMap(
        waiting=(Source("new_waiting"), Source("old_waiting")),
        running=(Source("running"),),
        kv_usage=(Source("kv"),),
        block_size=(Source("info", "block_size"),),
        num_blocks=(Source("info", "blocks"),),
        lora_info=("lora",),
    ),
)


def _parse(text: str) -> EngineMetrics:
    return ADAPTER.parse_metrics(text, 0.0)


def test_defaults() -> None:
    assert (ADAPTER.engine, ADAPTER.metrics_path) == ("test", "/metrics")


def test_first_present_source_wins_and_sources_are_not_mixed() -> None:
    assert _parse("old_waiting 4\n").waiting == 4
    assert _parse("new_waiting 1\nold_waiting 4\n").waiting == 1
    assert _parse('old_waiting{e="0"} 4\nnew_waiting{e="0"} 1\n').waiting == 1


def test_series_are_summed_averaged_or_first() -> None:
    text = (
        'new_waiting{engine="0"} 2\nnew_waiting{engine="1"} 3\n'
        'running{engine="0"} 5\nrunning{engine="1"} 1\n'
        'kv{engine="0"} 0.2\nkv{engine="1"} 0.6\n'
        'info{engine="0",block_size="16",blocks="100"} 1\n'
        'info{engine="1",block_size="16",blocks="50"} 1\n'
    )
    metrics = _parse(text)
    assert (metrics.waiting, metrics.running, metrics.block_size, metrics.num_blocks) == (
        5,
        6,
        16,
        150,
    )
    assert metrics.kv_usage is not None
    assert abs(metrics.kv_usage - 0.4) < 1e-12


def test_non_finite_values_and_non_integer_labels_count_as_absent() -> None:
    text = (
        'new_waiting{e="0"} NaN\nnew_waiting{e="1"} 3\n'
        "running +Inf\n"
        "kv NaN\n"
        'info{block_size="None",blocks="x"} 1\n'
    )
    metrics = _parse(text)
    assert metrics == EngineMetrics(scraped_at=0.0, waiting=3)


def test_kv_usage_is_clamped_and_counts_are_not_negative() -> None:
    assert _parse("kv 1.7\n").kv_usage == 1.0
    assert _parse("kv -0.1\n").kv_usage == 0.0
    assert _parse("new_waiting -2\n").waiting == 0


def test_lora_reads_the_newest_series() -> None:
    text = (
        'lora{max_lora="4",running_lora_adapters="a",waiting_lora_adapters=""} 100.5\n'
        'lora{max_lora="4",running_lora_adapters="b, c",waiting_lora_adapters="d"} 102.0\n'
        'lora{max_lora="4",running_lora_adapters="",waiting_lora_adapters=""} 101.0\n'
    )
    metrics = _parse(text)
    assert metrics.running_loras == frozenset({"b", "c"})
    assert metrics.waiting_loras == frozenset({"d"})
    assert metrics.max_loras == 4


def test_lora_series_without_usable_labels() -> None:
    metrics = _parse('lora{running_lora_adapters=","} 1\n')
    assert (metrics.running_loras, metrics.waiting_loras, metrics.max_loras) == (
        frozenset(),
        frozenset(),
        None,
    )


def test_overflowing_sums_and_huge_integer_labels_are_unknown_not_an_error() -> None:
    # Issue 15, defect 1: these raised OverflowError, which stopped every health loop.
    huge = "9" * 400
    text = (
        'new_waiting{e="0"} 1e308\nnew_waiting{e="1"} 1e308\n'
        'running{e="0"} 1e300\n'
        'kv{e="0"} 1e308\nkv{e="1"} 1e308\n'
        f'info{{block_size="{huge}",blocks="{huge}"}} 1\n'
        f'lora{{running_lora_adapters="a",waiting_lora_adapters="",max_lora="{huge}"}} 5\n'
    )
    metrics = _parse(text)
    assert (metrics.waiting, metrics.running, metrics.kv_usage) == (None, None, None)
    assert (metrics.block_size, metrics.num_blocks, metrics.max_loras) == (None, None, None)
    assert metrics.running_loras == frozenset({"a"})


def test_block_size_outside_the_sane_range_is_ignored_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    for _ in range(3):
        assert _parse('info{block_size="65536",blocks="10"} 1\n').block_size is None
    assert _parse('info{block_size="0"} 1\n').block_size is None
    gauge = MetricMapAdapter(engine="t", names=MetricMap(block_size=(Source("bs"),)))
    assert gauge.parse_metrics("bs 16.5\n", 0.0).block_size is None
    assert gauge.parse_metrics("bs 32\n", 0.0).block_size == 32
    assert _parse('info{block_size="4096"} 1\n').block_size == 4096
    assert _parse('info{block_size="1"} 1\n').block_size == 1
    warned = [r for r in caplog.records if "65536" in r.getMessage()]
    assert len(warned) == 1
