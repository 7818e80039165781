"""KV-cache events as vLLM publishes them, as domain values: what an engine's prefix cache
gained and lost. One definition for everyone who speaks them: the gateway's decoder
(`adapters.kv_events`), the engine model that emits them (`sim.engine.kv_events`) and the
emulator that publishes them (`sim.emulator.kv_publisher`). Block hashes are unsigned
64-bit ints.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BlockStored:
    """Full blocks entered the cache (a run of one request's consecutive blocks);
    `token_ids` holds the tokens of all of them, in order, and `parent_block_hash` is the
    hash of the block before the run (None for a prompt's first block)."""

    block_hashes: tuple[int, ...]
    parent_block_hash: int | None
    token_ids: tuple[int, ...]
    block_size: int
    lora_id: int | None = None
    medium: str | None = None
    lora_name: str | None = None  # vLLM 0.32 names the adapter too
    # Whether the run's first block carries extra keys other than the adapter's name (a
    # `cache_salt`, multimodal inputs): its tokens alone do not name its cache entry.
    salted: bool = False


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    """Blocks left the cache (evicted or freed)."""

    block_hashes: tuple[int, ...]
    medium: str | None = None


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    """The engine dropped its whole prefix cache."""


KvEvent = BlockStored | BlockRemoved | AllBlocksCleared
