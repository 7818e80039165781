"""The simulated half of the map on tiny cells: saturation, closed loops, rows, floors."""

from __future__ import annotations

import math

import pytest

from bench.regime.grid import Cell, FleetSpec
from bench.regime.simulate import (
    cell_hit_ceiling,
    closed_loop,
    hit_ceiling,
    saturation_rps,
    simulate_cell,
)
from routing.traces import TraceRequest
from sim.workloads import family

FLEET = FleetSpec(replicas=2)


def _cell(loop: str) -> Cell:
    traffic = {"clients": 4} if loop == "closed" else {"load": 0.5}
    return Cell(0.1, "zipf", loop, prefix_tokens=512, conversations=8, **traffic)  # type: ignore[arg-type]


def test_a_closed_loop_sends_every_turn_with_at_most_one_request_per_client() -> None:
    chats = family.chats(_cell("closed").family(FLEET, seed=2))
    run = closed_loop(chats, 4, "round-robin", FLEET)
    assert run.result.requests == len(run.trace) == sum(len(c.user_turns) for c in chats)
    sent = sorted(run.sent_s)
    assert sent[:4] == [0.0] * 4 and sent[4] > 0.0  # 4 clients start at once, then wait
    assert len(run.floors(FLEET)) == len(run.trace)


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
            assert 0 < r["ttft_floor_mean_s"] <= r["ttft_mean_s"]
            assert r["ttft_floor_p90_s"] <= r["ttft_p90_s"]
        assert rows == simulate_cell(
            _cell(loop), FLEET, ["prefix-aware", "round-robin"], 2, saturation
        )


def _request(at: float, ids: tuple[int, ...], tokens: int) -> TraceRequest:
    return TraceRequest(arrival_s=at, input_tokens=tokens, output_tokens=1, hash_ids=ids,
                        block_tokens=16)  # fmt: skip


def test_hit_ceiling_is_one_unbounded_cache_in_arrival_order() -> None:
    trace = [
        _request(2.0, (1, 2, 3), 40),  # 1, 2 seen: 32 of 40 tokens
        _request(1.0, (1, 2), 32),  # first: all misses
        _request(3.0, (9, 2), 32),  # another prefix: a miss though block 2 is known
    ]
    assert hit_ceiling(trace) == pytest.approx(32 / 104)
    assert hit_ceiling([]) == 0.0


def test_a_cells_ceiling_bounds_what_the_simulated_policies_hit() -> None:
    cell = _cell("closed")
    ceiling = cell_hit_ceiling(cell, FLEET, 2, 1.0)
    rows = simulate_cell(cell, FLEET, ["prefix-aware", "round-robin"], 2, 1.0)
    assert 0.0 < max(r["hit_rate"] for r in rows) <= ceiling < 1.0


def test_the_sglang_models_row_is_sglang_routers_marked_as_a_model() -> None:
    rows = simulate_cell(_cell("closed"), FLEET, ["prefix-aware", "sglang-model"], 2, 1.0)
    model = rows[1]
    assert (model["router"], model["policy"], model["model"]) == (
        "sglang-router",
        "cache_aware",
        True,
    )
    assert "model" not in rows[0] and model["requests"] == rows[0]["requests"]
