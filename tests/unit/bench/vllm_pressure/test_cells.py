"""The real-vLLM pressure bench's cells (nothing is run)."""

from __future__ import annotations

import pytest

from bench.vllm_pressure.cells import FULL, QUICK, TOKENS_PER_WORD, PressureCell, words_for
from sim.workloads import family

KV = 2 * 96 * 32  # two servers of 96 blocks of 32 tokens


def test_names_carry_the_nominal_pressure_popularity_and_clients() -> None:
    assert [c.name(KV) for c in QUICK] == ["p1.5-hot-closed6"]
    assert [c.name(KV) for c in FULL] == [
        "p1.5-hot-closed6",
        "p2.9-uniform-closed6",
        "p0.29-uniform-closed6",
    ]
    assert QUICK[0].pressure(KV) == pytest.approx(9000 / 6144)
    assert QUICK[0].row == "hot · closed6"


def test_words_for_divides_by_the_measured_tokens_per_word() -> None:
    assert words_for(900, 1.929) == 467
    assert words_for(900, 1.0) == 900
    assert words_for(1, 5.0) == 1
    with pytest.raises(ValueError):
        words_for(900, 0.0)


def test_the_family_is_sized_in_words() -> None:
    cell = PressureCell(3, "hot", conversations=5)
    content = cell.family(seed=7, tokens_per_word=2.0)
    assert (content.tenants, content.prefix_tokens, content.user_tokens) == (3, 450, 30)
    assert content.popularity == "hot" and content.conversations == 5 and content.seed == 7
    chats = family.chats(content)
    assert len(chats) == 5 and len(chats[0].system_prompt.split()) == 450


def test_the_default_ratio_keeps_the_text_the_same_across_commits() -> None:
    content = QUICK[0].family(seed=1)
    assert content.prefix_tokens == words_for(900, TOKENS_PER_WORD) == 466
    assert content.user_tokens == 31
