"""The regime map's cells and fleet."""

from __future__ import annotations

import pytest

from bench.regime.grid import (
    CONVERSATIONS,
    OPEN_CONVERSATIONS,
    Cell,
    FleetSpec,
    GridAxes,
    full_grid,
    quick_grid,
)


def test_quick_grid_is_the_issues_cell_and_a_high_reuse_cell() -> None:
    fleet = FleetSpec()
    assert fleet.kv_tokens == 4 * 10_240
    issue, reuse = quick_grid()
    assert (issue.name, reuse.name) == ("p1.5-hot-closed16", "p0.25-uniform-closed16")
    content = issue.family(fleet, seed=1)
    assert (content.tenants, content.prefix_tokens, content.popularity) == (30, 2048, "hot")
    assert content.pressure(fleet.kv_tokens) == 1.5
    assert (content.min_turns, content.max_turns) == (2, 4)
    assert reuse.family(fleet, seed=1).tenants == 5


def test_full_grid_has_a_closed_and_an_open_slice_over_the_same_pressures() -> None:
    cells = full_grid()
    assert len(cells) == 15 and len({c.name for c in cells}) == 15
    assert {c.pressure for c in cells} == {0.25, 1.5, 4.0}
    assert {c.row for c in cells} == {
        "uniform · closed16",
        "zipf · closed16",
        "hot · closed16",
        "hot · open50",
        "hot · open90",
    }
    assert full_grid(GridAxes(loads=(), popularities=("hot",))) == [
        c for c in cells if c.row == "hot · closed16"
    ]


def test_cells_need_their_traffic() -> None:
    with pytest.raises(ValueError, match="clients"):
        Cell(1.0, "hot", "closed")
    with pytest.raises(ValueError, match="load"):
        Cell(1.0, "hot", "open")
    with pytest.raises(ValueError, match="loop"):
        Cell(1.0, "hot", "bursty", clients=1)
    assert Cell(1.0, "zipf", "open", load=0.5, prefix_tokens=4096).row == "zipf · open50 · 4096 tok"


def test_open_loop_cells_start_chats_for_long_enough() -> None:
    fleet = FleetSpec()
    cell = Cell(0.25, "hot", "open", load=0.9)
    assert cell.conversations == OPEN_CONVERSATIONS
    assert cell.family(fleet, seed=1, saturation_rps=1.0).conversations == cell.conversations
    # 18 requests/s of 3-turn chats: 6 chats/s for 15 s.
    assert cell.family(fleet, seed=1, saturation_rps=20.0).conversations == 90
    closed = quick_grid()[0]  # a closed loop's chats follow from its clients' pace
    assert closed.family(fleet, seed=1, saturation_rps=20.0).conversations == CONVERSATIONS
    assert Cell(1.0, "hot", "closed", clients=2, conversations=5).conversations == 5
