"""Pricing a KV transfer between a prefill engine P and a decode engine D (pure).

D pulls (vLLM NixlConnector) or is pushed (SGLang) the KV of a prompt's first K tokens:
`external_blocks` of them, minus the leading full blocks D already holds and serves itself
(`EngineModel.cached_prefix_blocks`; at most `(prompt_len − 1) // block_size` of them, vLLM's
lookup limit), cross the link (`blocks_to_move`); the transfer then takes (`transfer_time_s`)

    t = latency_s + blocks · block_size · bytes_per_token / bandwidth_bytes_s

with `KVTransferLink`'s figures. A partial last block moves as a whole block.
"""

from __future__ import annotations

from sim.engine.types import KVTransferLink


def external_blocks(external_tokens: int, block_size: int) -> int:
    """Blocks that hold the first `external_tokens` tokens (a partial last one included)."""
    return -(-external_tokens // block_size)


def blocks_to_move(prompt_len: int, external_tokens: int, block_size: int, held: int) -> int:
    """Blocks of the first `external_tokens` of a `prompt_len`-token prompt that must cross
    the link to an engine already holding its first `held` full blocks."""
    if not 0 <= external_tokens <= prompt_len:
        raise ValueError(f"external_tokens {external_tokens} outside [0, {prompt_len}]")
    served = min(held, (prompt_len - 1) // block_size)
    return max(0, external_blocks(external_tokens, block_size) - served)


def transfer_time_s(link: KVTransferLink, blocks: int, block_size: int) -> float:
    """Seconds to move `blocks` blocks of `block_size` tokens over `link` (0 for none)."""
    if blocks <= 0:
        return 0.0
    return link.latency_s + blocks * block_size * link.bytes_per_token / link.bandwidth_bytes_s
