"""The hop's summary over rounds and the two tables."""

from __future__ import annotations

import math

from bench.epp.report import epp_hop, hop_table, quality_table, summarise_hop


def _run(p50_ms: float, p99_ms: float, ok: bool = True) -> dict[str, object]:
    return {
        "achieved_rps": 200.0 if ok else 150.0,
        "p50_s": p50_ms / 1e3,
        "p99_s": p99_ms / 1e3,
        "errors": 0 if ok else 2,
        "late": 0,
        "sustained": ok,
    }


def test_added_latency_is_the_median_over_rounds_of_same_round_differences() -> None:
    rounds = [
        {"direct": _run(0.1, 0.5), "epp": _run(1.1, 4.5)},
        {"direct": _run(0.3, 0.9), "epp": _run(1.5, 5.9)},
        {"direct": _run(0.2, 0.6), "epp": _run(1.4, 5.0)},
    ]
    s = summarise_hop(rounds)
    assert s["direct"]["added_p50_s"] == 0.0
    assert math.isclose(s["epp"]["added_p50_s"], 1.2e-3)  # of 1.0, 1.2, 1.2
    assert math.isclose(s["epp"]["added_p99_s"], 4.4e-3)  # of 4.0, 5.0, 4.4
    assert math.isclose(s["epp"]["p50_s"], 1.4e-3)
    assert s["epp"]["sustained"] and s["epp"]["errors"] == 0


def test_a_round_not_sustained_marks_the_target_and_counts_its_errors() -> None:
    rounds = [{"direct": _run(0.1, 0.5), "epp": _run(1.0, 4.0, ok=False)}]
    s = summarise_hop(rounds)
    assert not s["epp"]["sustained"] and s["epp"]["errors"] == 2
    assert "epp (not sustained)" in hop_table(s, 200)


def test_hop_table_signs_the_added_latency() -> None:
    rounds = [{"direct": _run(0.1, 0.5), "envoy": _run(0.3, 1.2)}]
    lines = hop_table(summarise_hop(rounds), 200).splitlines()
    assert lines[0].startswith("| target (200 req/s) |")
    assert lines[3] == "| envoy | 200.0/s | 0.30 ms | 1.20 ms | +0.20 ms | +0.70 ms | 0 |"


def test_no_rounds_no_rows() -> None:
    assert summarise_hop([]) == {}


def test_quality_table_row() -> None:
    row = {
        "router": "kvgate serve",
        "hit_rate": 0.826,
        "ttft_p50_s": 0.042,
        "ttft_p90_s": 0.4331,
        "ttft_mean_s": 0.1,
        "errors": 0,
        "max_mean_share": 1.25,
    }
    assert quality_table([row]).splitlines()[2] == (
        "| kvgate serve | 82.6% | 0.042 s | 0.433 s | 0.100 s | 0 | 1.25 |"
    )


def test_the_epp_hop_is_measured_against_envoy_without_the_picker() -> None:
    rounds = [
        {"direct": _run(0.1, 0.5), "rr": _run(0.3, 1.5), "epp": _run(1.3, 5.5)},
        {"direct": _run(0.1, 0.5), "rr": _run(0.5, 2.5), "epp": _run(1.7, 7.0)},
    ]
    hop = epp_hop(rounds, "epp", "rr")
    assert math.isclose(hop["added_p50_s"], 1.0e-3)  # of 1.0, 1.2: nearest rank
    assert math.isclose(hop["added_p99_s"], 4.0e-3)  # of 4.0, 4.5
    assert math.isnan(epp_hop([], "epp", "rr")["added_p50_s"])
