from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

from sim.bench.overhead_engine import _content_length, _wants_stream
from sim.bench.overhead_proc import usage
from sim.bench.overhead_report import summarise, table
from sim.bench.overhead_wrk import LUA, parse_result

_LINE = (
    '{"requests":5000,"duration_us":10000000,"errors_connect":0,"errors_read":0,'
    '"errors_write":0,"errors_status":0,"errors_timeout":0,"late":0,"late_ms":0.0,'
    '"lat_mean_us":400.0,"lat_max_us":9000,"lat_p50_us":300,"lat_p90_us":600,'
    '"lat_p99_us":2000,"lat_p999_us":5000}'
)


def test_wrk_result_line_is_parsed_into_seconds() -> None:
    r = parse_result(_LINE, 500.0)
    assert r.achieved_rps == 500.0
    assert (r.p50_s, r.p99_s) == (300e-6, 2000e-6)
    assert r.sustained


def test_errors_late_sends_or_a_shortfall_are_not_sustained() -> None:
    assert not parse_result(_LINE.replace('"errors_status":0', '"errors_status":1'), 500).sustained
    assert not parse_result(_LINE, 600.0).sustained  # 500/s achieved of 600 offered
    assert not parse_result(_LINE.replace('"late":0', '"late":100'), 500).sustained


def test_lua_script_ships_next_to_the_module() -> None:
    assert LUA.is_file()
    assert "function delay()" in LUA.read_text()


def test_proc_usage_of_this_process() -> None:
    u = usage(os.getpid())
    assert u.cpu_s > 0
    assert u.peak_rss_bytes > 1 << 20


def test_stub_engine_request_parsing() -> None:
    assert _content_length(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 12") == 12
    assert _content_length(b"GET / HTTP/1.1\r\nHost: x") == 0
    assert _wants_stream(b'{"stream": true}') and not _wants_stream(b'{"stream":false}')


def _run(rate: float, p50_ms: float, p99_ms: float, ok: bool = True) -> dict[str, object]:
    return {
        "rate": rate,
        "achieved_rps": rate if ok else rate / 2,
        "p50_s": p50_ms / 1e3,
        "p99_s": p99_ms / 1e3,
        "sustained": ok,
        "errors": 0,
        "late": 0,
    }


def test_summary_adds_overhead_over_direct_and_saturation_ratios() -> None:
    measured = [
        {"target": "direct", "version": "", "runs": [_run(500, 0.2, 1.0), _run(1000, 0.2, 1.5)]},
        {
            "target": "kvgate:rr",
            "version": "1",
            "runs": [_run(500, 0.7, 2.0), _run(1000, 9, 50, False)],
        },
        {"target": "peer", "version": "2", "runs": [_run(500, 0.4, 1.2), _run(1000, 0.5, 2.5)]},
    ]
    settings = SimpleNamespace(
        rates=(500, 1000),
        duration_s=1,
        warmup_s=1,
        connections=8,
        stream_fraction=0.5,
        replicas=2,
        out=Path("."),
    )
    report = summarise(measured, {}, settings, ["stub"])
    kv = report["targets"][1]
    assert abs(kv["runs"][0]["added_p99_s"] - 1.0e-3) < 1e-12
    assert kv["saturation_rps"] == 500
    assert report["saturation_ratio_kvgate_to_peer"] == {"kvgate:rr / peer": 0.5}
    assert "| kvgate:rr | 500 |" in table(report)
