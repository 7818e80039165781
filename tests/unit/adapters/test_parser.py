from __future__ import annotations

import math
from pathlib import Path

import pytest

from adapters.metric_map import MetricMap, MetricMapAdapter, Source
from adapters.parser import MetricsFormatError, Sample, parse_samples, samples_of
from routing.types import EngineMetrics

VLLM_PAGE = Path(__file__).resolve().parents[2] / "fixtures" / "vllm-0.32" / "metrics_after.txt"


def test_reads_only_the_wanted_metrics_and_skips_comments() -> None:
    text = (
        "# HELP a_gauge A gauge.\n"
        "# TYPE a_gauge gauge\n"
        "# a free comment mentioning a_gauge 99\n"
        'a_gauge{x="1"} 2.5\n'
        "other 7\n"
    )
    assert parse_samples(text, ["a_gauge"]) == {"a_gauge": [Sample({"x": "1"}, 2.5)]}


def test_absent_metrics_have_no_key() -> None:
    assert parse_samples("present 1\n", ["present", "absent"]) == {"present": [Sample({}, 1.0)]}
    assert parse_samples("", ["absent"]) == {}
    assert samples_of("# HELP absent nothing\n", "absent") == []


def test_a_longer_name_is_another_metric() -> None:
    text = (
        'waiting_by_reason{reason="capacity"} 5\n'
        "waiting_total 9\n"
        "waiting 2\n"
        "waiting_by_reason_x 4\n"
    )
    assert samples_of(text, "waiting") == [Sample({}, 2.0)]


def test_every_series_of_a_metric_in_order() -> None:
    text = 'm{engine="0"} 1\nm{engine="1"} 2\nm{engine="2"} 3\nm_after 4\n'
    assert [s.labels["engine"] for s in samples_of(text, "m")] == ["0", "1", "2"]


def test_first_line_last_line_and_crlf() -> None:
    assert samples_of("m 1", "m") == [Sample({}, 1.0)]
    assert samples_of('x 0\r\nm{a="b"} 3\r\n', "m") == [Sample({"a": "b"}, 3.0)]


@pytest.mark.parametrize(
    ("block", "labels"),
    [
        ('{a="say \\"hi\\""}', {"a": 'say "hi"'}),
        ('{a="back\\\\slash"}', {"a": "back\\slash"}),
        ('{a="ends with backslash\\\\",b="x"}', {"a": "ends with backslash\\", "b": "x"}),
        ('{a="two\\nlines"}', {"a": "two\nlines"}),
        ('{a="x,y,z",b=""}', {"a": "x,y,z", "b": ""}),
        ('{a="{}=,\\" }"}', {"a": '{}=," }'}),
        ('{a="1", b="2",}', {"a": "1", "b": "2"}),
        ("{}", {}),
    ],
)
def test_label_values(block: str, labels: dict[str, str]) -> None:
    assert samples_of(f"m{block} 1\n", "m") == [Sample(labels, 1.0)]


def test_special_values_and_timestamps() -> None:
    text = 'a NaN\nb +Inf\nc -Inf\nd 1.5e+09 1712345678901\ne{x="1"} 4 1712345678901\n'
    found = parse_samples(text, "abcde")
    assert math.isnan(found["a"][0].value)
    assert found["b"][0].value == math.inf
    assert found["c"][0].value == -math.inf
    assert found["d"] == [Sample({}, 1.5e9)]
    assert found["e"] == [Sample({"x": "1"}, 4.0)]


@pytest.mark.parametrize(
    "line",
    [
        "m\tabc",  # not a number
        'm{a="1"}',  # no value
        'm{a="1" 3',  # unterminated block
        'm{a="1} 3',  # unterminated value
        "m{a=1} 3",  # unquoted value
        'm{a="1"}x="2"} 3',  # text after the block
    ],
)
def test_malformed_lines_of_wanted_metrics_raise(line: str) -> None:
    with pytest.raises(MetricsFormatError):
        samples_of(line + "\n", "m")
    assert issubclass(MetricsFormatError, ValueError)  # scrapers catch ValueError


def test_malformed_lines_of_other_metrics_are_not_read() -> None:
    assert samples_of("junk{{{ here\nm 1\n", "m") == [Sample({}, 1.0)]


def test_real_vllm_page() -> None:
    found = parse_samples(
        VLLM_PAGE.read_text(), ["vllm:num_requests_waiting_by_reason", "vllm:engine_sleep_state"]
    )
    by_reason = found["vllm:num_requests_waiting_by_reason"]
    assert [(s.labels["reason"], s.value) for s in by_reason] == [
        ("capacity", 0.0),
        ("deferred", 0.0),
    ]
    assert by_reason[0].labels["engine"] == "0"
    assert len(found["vllm:engine_sleep_state"]) == 3


def test_labels_are_read_only() -> None:
    [sample] = samples_of('m{a="1"} 1\n', "m")
    with pytest.raises(TypeError):
        sample.labels["a"] = "2"  # type: ignore[index]


def test_missing_metrics_give_none_fields() -> None:
    adapter = MetricMapAdapter(
        engine="x",
        names=MetricMap(
            waiting=(Source("w"),),
            running=(Source("r"),),
            kv_usage=(Source("kv"),),
            block_size=(Source("info", "bs"),),
            num_blocks=(Source("info", "nb"),),
            lora_info=("lora",),
        ),
    )
    assert adapter.parse_metrics("# nothing here\nunrelated 1\n", 3.0) == EngineMetrics(
        scraped_at=3.0
    )
    partial = adapter.parse_metrics('w 2\ninfo{bs="16"} 1\n', 3.0)
    assert partial == EngineMetrics(scraped_at=3.0, waiting=2, block_size=16)


def test_huge_label_blocks_are_parsed_but_not_memoised() -> None:
    # A page whose label blocks are megabytes and change every scrape must not pin them.
    from adapters import parser

    before = parser._cached_labels.cache_info().currsize
    big = "x" * 100_000
    samples = samples_of(f'm{{a="{big}"}} 1\n', "m")
    assert samples[0].labels["a"] == big
    assert parser._cached_labels.cache_info().currsize == before
    samples_of('m{a="small"} 1\n', "m")
    assert parser._cached_labels.cache_info().currsize == before + 1
