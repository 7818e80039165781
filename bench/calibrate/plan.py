"""The prompts of one burst: what the client sends and what the engine model replays.

Request i of a burst gets its own random prefix of `cell.shared_prefix_len` tokens, sent first
as a warm-up prompt (one output token) so the engine caches it, then the measured prompt: that
prefix followed by fresh random tokens up to `cell.prompt_len`. Random token ids make
accidental sharing between requests, repetitions and cells practically impossible.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.calibrate.grid import Cell

FIRST_ORDINARY_ID = 3  # ids 0-2 are the tokenizer's <unk>, <s>, </s>


@dataclass(frozen=True, slots=True)
class Burst:
    warmups: tuple[tuple[int, ...], ...]  # empty when the cell shares no prefix
    prompts: tuple[tuple[int, ...], ...]


def plan_burst(cell: Cell, rng: random.Random, vocab_size: int) -> Burst:
    def tokens(n: int) -> tuple[int, ...]:
        return tuple(rng.randrange(FIRST_ORDINARY_ID, vocab_size) for _ in range(n))

    shared = cell.shared_prefix_len
    prefixes = [tokens(shared) for _ in range(cell.concurrency)]
    prompts = tuple(p + tokens(cell.prompt_len - shared) for p in prefixes)
    return Burst(warmups=tuple(prefixes) if shared else (), prompts=prompts)
