"""wrk's result line and the open-loop script next to the module."""

from __future__ import annotations

from bench.overhead.wrk import LUA, parse_result

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
