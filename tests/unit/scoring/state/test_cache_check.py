from __future__ import annotations

import pytest

from scoring.state.cache_check import CacheCheck, blocks_within, check_cached
from scoring.state.prefix_hash import GROUP, covered_chars

BLOCK = 64  # routing block: 16 tokens of 4 bytes


def _check(
    matched: int,
    cached: int,
    *,
    prompt_tokens: int = 1000,
    token_estimate: int = 1000,
    engine_block: int = 16,
) -> CacheCheck | None:
    return check_cached(
        matched=matched,
        block_chars=BLOCK,
        token_estimate=token_estimate,
        chars_per_token=4.0,
        prompt_tokens=prompt_tokens,
        cached_tokens=cached,
        engine_block_tokens=engine_block,
    )


def test_no_prediction_is_no_eviction() -> None:
    assert _check(0, 0) == CacheCheck(0, 0, 0, 0)
    assert _check(0, 480) == CacheCheck(0, 480, 0, 0)  # more than predicted: nothing to correct


def test_a_hit_short_by_block_rounding_is_no_eviction() -> None:
    # 62 blocks = 992 tokens predicted; the engine caches whole blocks and never the last
    # token, and the index rounds to its own blocks: 976 is as good as a full hit.
    assert _check(62, 976) == CacheCheck(992, 976, 62, 0)


def test_an_evident_eviction_keeps_the_observed_head() -> None:
    check = _check(50, 320)  # 800 tokens predicted, 320 observed
    assert check is not None
    # Slack: the last block (16 tokens) + one engine block (16) + 10 % of 800 = 112 tokens;
    # 320 + 112 = 432 tokens = 27 whole blocks kept, 23 evicted.
    assert check == CacheCheck(800, 320, 27, 23)


def test_the_slack_edge() -> None:
    # 50 blocks: 800 tokens predicted, slack 112: 688 observed is the least that passes.
    assert _check(50, 688) == CacheCheck(800, 688, 50, 0)
    check = _check(50, 687)
    assert check is not None and check.evicted_weight == 1


def test_a_larger_engine_block_widens_the_slack() -> None:
    assert _check(50, 640, engine_block=64) == CacheCheck(800, 640, 50, 0)
    check = _check(50, 640, engine_block=16)
    assert check is not None and check.evicted_weight > 0


def test_the_engines_tokens_are_compared_as_a_share_of_the_prompt() -> None:
    # The engine's tokenizer makes 3 bytes a token where the gateway guessed 4: its 1,333
    # prompt tokens are the gateway's 1,000, and a full hit of 50 blocks is 1,066 of them.
    check = _check(50, 1066, prompt_tokens=1333)
    assert check == CacheCheck(1066, 1066, 50, 0)
    check = _check(50, 400, prompt_tokens=1333)
    assert check is not None and check.predicted_tokens == 1066 and check.evicted_weight > 0


def test_predictions_are_capped_at_the_prompt() -> None:
    check = _check(70, 950, token_estimate=1100, prompt_tokens=960)
    assert check is not None and check.predicted_tokens <= 960


def test_unknown_prompt_size_is_no_check() -> None:
    assert _check(10, 0, prompt_tokens=0) is None
    assert _check(10, 0, token_estimate=0) is None


def test_eviction_weights_count_far_blocks_double() -> None:
    # 200 blocks: 128 of 64 bytes, 72 of 128 → 272 base blocks = 4,352 tokens predicted.
    check = _check(200, 0, prompt_tokens=5000, token_estimate=5000)
    assert check is not None
    assert check.predicted_tokens == 272 * 16
    slack_chars = 2 * BLOCK + 16 * 4 + 0.1 * covered_chars(200, BLOCK)
    kept = blocks_within(slack_chars, BLOCK)
    assert (check.kept_blocks, check.evicted_weight) == (kept, 272 - kept)


@pytest.mark.parametrize("blocks", [0, 1, 5, GROUP - 1, GROUP, GROUP + 1, 3 * GROUP + 7])
def test_blocks_within_inverts_covered_chars(blocks: int) -> None:
    chars = covered_chars(blocks, BLOCK)
    assert blocks_within(chars, BLOCK) == blocks
    assert blocks_within(chars + 0.5, BLOCK) == blocks
    if blocks:
        assert blocks_within(chars - 1, BLOCK) == blocks - 1
