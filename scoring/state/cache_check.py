"""One request's predicted prompt-cache hit against the one its engine reported.

At dispatch the index matched `matched` routing blocks; the engine reports `cached` of its
`prompt_tokens` as prefix-cache hits. Both go on the byte scale of the canonical prompt:

    prompt_chars    = token_estimate × chars_per_token
    predicted_chars = covered_chars(matched, block_chars)
    observed_chars  = cached ÷ prompt_tokens × prompt_chars
    slack           = last matched routing block + one engine block + 10 % × predicted_chars

Evicted when `observed_chars + slack < predicted_chars` (the slack absorbs what is no eviction:
docs/decisions/0006-engine-cache-feedback.md); then `kept` is the leading routing blocks within
`observed_chars + slack`, and blocks `kept..matched` (`evicted_weight` base blocks) are gone.
Totals in the engine's tokens: `predicted_tokens` = predicted_chars ÷ prompt_chars ×
prompt_tokens (at most prompt_tokens), `observed_tokens` = cached.
"""

from __future__ import annotations

from dataclasses import dataclass

from routing.frozen import fast_init
from scoring.state.prefix_hash import block_weight, blocks_covered_by, covered_chars

SLACK_SHARE = 0.1  # of the predicted hit: the byte/token ratio of a prompt's head varies


@fast_init
@dataclass(frozen=True, slots=True)
class CacheCheck:
    """Predicted vs observed cached prompt tokens of one request, and what the index got
    wrong (`evicted_weight` 0: nothing evident)."""

    predicted_tokens: int
    observed_tokens: int
    kept_blocks: int  # leading routing blocks the engine evidently still held
    evicted_weight: int  # base blocks the index counted as held that the engine had evicted
    dropped_entries: int = 0  # index entries the correction then evicted (set by the feed)


def check_cached(
    *,
    matched: int,
    block_chars: int,
    token_estimate: int,
    chars_per_token: float,
    prompt_tokens: int,
    cached_tokens: int,
    engine_block_tokens: int,
) -> CacheCheck | None:
    """Compare (see the module docstring); None when the prompt's size is unknown."""
    if prompt_tokens <= 0 or token_estimate <= 0:
        return None
    cached = min(max(cached_tokens, 0), prompt_tokens)
    prompt_chars = token_estimate * chars_per_token
    predicted_chars = covered_chars(matched, block_chars)
    predicted = min(prompt_tokens, round(predicted_chars / prompt_chars * prompt_tokens))
    if matched == 0:
        return CacheCheck(predicted, cached, 0, 0)
    chars_per_engine_token = prompt_chars / prompt_tokens
    observed_chars = cached * chars_per_engine_token
    slack = (
        block_chars * block_weight(matched - 1)
        + engine_block_tokens * chars_per_engine_token
        + SLACK_SHARE * predicted_chars
    )
    if observed_chars + slack >= predicted_chars:
        return CacheCheck(predicted, cached, matched, 0)
    kept = min(matched, blocks_within(observed_chars + slack, block_chars))
    evicted = (predicted_chars - covered_chars(kept, block_chars)) // block_chars
    return CacheCheck(predicted, cached, kept, evicted)


def blocks_within(chars: float, block_chars: int) -> int:
    """How many leading routing blocks fit in `chars` bytes (the inverse of covered_chars)."""
    return blocks_covered_by(int(chars // block_chars))
