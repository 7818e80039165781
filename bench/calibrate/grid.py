"""The measurement grid: which cells to measure, and which to hold back from the fit.

A cell is one combination of prompt length, prefix-cache hit fraction, concurrency and output
length. Each cell is measured `repeats` times; a repetition sends `concurrency` streaming
requests at once, each with its own prompt whose first `round(hit_fraction · prompt_len)`
tokens were sent shortly before by a warm-up request (so the engine has them cached).

The split is a rule, not a random draw: every cell whose prompt length is in
`test_prompt_lens` or whose concurrency is in `test_concurrencies` is held back, so the test
part checks interpolation along both axes the fit cares about.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Cell:
    prompt_len: int
    hit_fraction: float
    concurrency: int
    output_len: int

    @property
    def key(self) -> str:
        return f"P{self.prompt_len}-h{self.hit_fraction:g}-c{self.concurrency}-o{self.output_len}"

    @property
    def shared_prefix_len(self) -> int:
        """Prompt tokens that a warm-up request sends first (0: no warm-up)."""
        return round(self.hit_fraction * self.prompt_len)


@dataclass(frozen=True, slots=True)
class GridSpec:
    prompt_lens: tuple[int, ...]
    hit_fractions: tuple[float, ...]
    concurrencies: tuple[int, ...]
    output_lens: tuple[int, ...]
    repeats: int
    test_prompt_lens: frozenset[int]
    test_concurrencies: frozenset[int]

    def cells(self) -> list[Cell]:
        return [
            Cell(p, h, c, o)
            for p in self.prompt_lens
            for h in self.hit_fractions
            for c in self.concurrencies
            for o in self.output_lens
        ]

    def is_test(self, cell: Cell) -> bool:
        return (
            cell.prompt_len in self.test_prompt_lens or cell.concurrency in self.test_concurrencies
        )

    def split(self, cells: list[Cell]) -> tuple[list[Cell], list[Cell]]:
        """(train, test), each in the order given."""
        train = [c for c in cells if not self.is_test(c)]
        test = [c for c in cells if self.is_test(c)]
        return train, test

    def describe(self) -> str:
        held = sorted(self.test_prompt_lens)
        return (
            f"prompt_lens={list(self.prompt_lens)} hit_fractions={list(self.hit_fractions)} "
            f"concurrencies={list(self.concurrencies)} output_lens={list(self.output_lens)} "
            f"repeats={self.repeats}; held back: prompt_len in {held} "
            f"or concurrency in {sorted(self.test_concurrencies)}"
        )


FULL_GRID = GridSpec(
    prompt_lens=(64, 256, 512, 1024, 2048, 3072),
    hit_fractions=(0.0, 0.5, 0.9),
    concurrencies=(1, 4, 8),
    output_lens=(32,),
    repeats=5,
    test_prompt_lens=frozenset({1024}),
    test_concurrencies=frozenset({4}),
)

QUICK_GRID = GridSpec(
    prompt_lens=(64, 512, 1024, 2048),
    hit_fractions=(0.0, 0.9),
    concurrencies=(1, 2, 4),
    output_lens=(16,),
    repeats=1,
    test_prompt_lens=frozenset({1024}),
    test_concurrencies=frozenset({2}),
)
