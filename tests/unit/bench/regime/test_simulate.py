"""The simulated half of the map on tiny cells: saturation, closed-loop fixed points, rows."""

from __future__ import annotations

import math

import pytest

from bench.regime.grid import Cell, FleetSpec
from bench.regime.simulate import closed_loop, mean_e2e, saturation_rps, simulate_cell
from sim.workloads import family

FLEET = FleetSpec(replicas=2)


def _cell(loop: str) -> Cell:
    traffic = {"clients": 4} if loop == "closed" else {"load": 0.5}
    return Cell(0.1, "zipf", loop, prefix_tokens=512, conversations=8, **traffic)  # type: ignore[arg-type]


def test_closed_loop_is_replayed_at_its_latency_fixed_point() -> None:
    chats = family.chats(_cell("closed").family(FLEET, seed=2))
    fit = closed_loop(chats, 4, "round-robin", FLEET)
    assert fit.result.requests == sum(len(c.user_turns) for c in chats)
    assert mean_e2e(fit.result) == pytest.approx(fit.latency_s, rel=0.1)


def test_rows_per_policy_with_the_maps_figures() -> None:
    saturation = saturation_rps(_cell("open"), FLEET, seed=2, chats=16)
    assert saturation > 0
    for loop in ("closed", "open"):
        rows = simulate_cell(_cell(loop), FLEET, ["prefix-aware", "round-robin"], 2, saturation)
        assert [r["policy"] for r in rows] == ["prefix-aware", "round-robin"]
        for r in rows:
            assert r["mode"] == "sim" and r["errors"] == 0 and r["requests"] > 0
            assert 0 <= r["hit_rate"] <= 1 and r["max_mean_share"] >= 1
            assert r["ttft_p50_s"] <= r["ttft_p90_s"] and not math.isnan(r["ttft_mean_s"])
            assert ("closed_loop_latency_s" in r) == (loop == "closed")
        assert rows == simulate_cell(
            _cell(loop), FLEET, ["prefix-aware", "round-robin"], 2, saturation
        )
