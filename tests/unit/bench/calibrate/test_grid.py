from __future__ import annotations

import random

from bench.calibrate.grid import FULL_GRID, QUICK_GRID, Cell
from bench.calibrate.plan import plan_burst


def test_full_grid_split_holds_back_one_prompt_length_and_one_concurrency() -> None:
    cells = FULL_GRID.cells()
    train, test = FULL_GRID.split(cells)
    assert len(cells) == 6 * 3 * 3
    assert {c.prompt_len for c in train} == {64, 256, 512, 2048, 3072}
    assert {c.concurrency for c in train} == {1, 8}
    assert all(c.prompt_len == 1024 or c.concurrency == 4 for c in test)
    assert len(test) == 3 * 3 + 5 * 3  # P=1024 (any c), plus c=4 at the other lengths
    assert len(train) + len(test) == len(cells)


def test_split_is_deterministic_and_keeps_order() -> None:
    cells = QUICK_GRID.cells()
    shuffled = list(cells)
    random.Random(3).shuffle(shuffled)
    assert QUICK_GRID.split(cells) == QUICK_GRID.split(list(cells))
    train, _ = QUICK_GRID.split(shuffled)
    assert train == [c for c in shuffled if c in train]
    assert set(train) == set(QUICK_GRID.split(cells)[0])


def test_cell_key_and_shared_prefix() -> None:
    cell = Cell(prompt_len=512, hit_fraction=0.9, concurrency=4, output_len=32)
    assert cell.key == "P512-h0.9-c4-o32"
    assert cell.shared_prefix_len == 461


def test_burst_plan_shares_each_prefix_with_its_warm_up_only() -> None:
    cell = Cell(prompt_len=256, hit_fraction=0.5, concurrency=3, output_len=8)
    burst = plan_burst(cell, random.Random(7), vocab_size=4096)
    assert len(burst.warmups) == len(burst.prompts) == 3
    for warm, prompt in zip(burst.warmups, burst.prompts, strict=True):
        assert len(warm) == 128
        assert len(prompt) == 256
        assert prompt[:128] == warm
    assert len({p[:32] for p in burst.prompts}) == 3  # no first block in common
    assert burst == plan_burst(cell, random.Random(7), vocab_size=4096)


def test_burst_plan_without_sharing_has_no_warm_up() -> None:
    burst = plan_burst(Cell(64, 0.0, 2, 8), random.Random(1), vocab_size=100)
    assert burst.warmups == ()
    assert all(3 <= t < 100 for p in burst.prompts for t in p)
