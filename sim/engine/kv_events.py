"""KV-cache events of the engine model, as vLLM publishes them, kept until taken after a step.

- `BlockStored`: full blocks that became findable by hash, one event per contiguous run of a
  request's blocks: their hashes, the hash of the request's block before the run (None for
  its first block), the run's token ids (empty for a request known by hashes only).
- `BlockRemoved`: a hash that left the cache (its last block was evicted), one event each.
- `AllBlocksCleared`: the prefix cache was reset.

Events follow the *set* of cached hashes: a block committed under a hash another block already
carries stores nothing, and evicting one of two such blocks removes nothing (vLLM reports those
per block, so its subscribers count references); replaying the events into a plain set gives
exactly the emulator's cache. Hashes are the engine's chained hashes as unsigned 64-bit ints
(`external_hash`), as vLLM's `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES` sends them.
"""

from __future__ import annotations

from collections.abc import Sequence

from routing.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KvEvent

_UINT64 = (1 << 64) - 1


def external_hash(block_hash: int) -> int:
    """A chained block hash (a signed 64-bit `hash`) as the unsigned int events carry."""
    return block_hash & _UINT64


class KVEventLog:
    """Pending events of one cache, in the order the cache changed; `take` empties it."""

    __slots__ = ("_pending", "block_size")

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self._pending: list[KvEvent] = []

    def __len__(self) -> int:
        return len(self._pending)

    def take(self) -> list[KvEvent]:
        """The events since the last `take`, oldest first."""
        events, self._pending = self._pending, []
        return events

    def removed(self, block_hash: int) -> None:
        """`block_hash` left the cache (one event per hash, as vLLM 0.32 sends them)."""
        self._pending.append(BlockRemoved((external_hash(block_hash),)))

    def cleared(self) -> None:
        self._pending.append(AllBlocksCleared())

    def stored(
        self,
        tokens: Sequence[int],
        hashes: Sequence[int],
        span: tuple[int, int],
        fresh: Sequence[bool] | None,
    ) -> None:
        """A request committed its blocks span[0] … span[1] − 1 (`tokens`, `hashes`: all
        of its tokens and block hashes; `fresh[k]`: whether block span[0] + k entered the
        cache, None: every one did)."""
        start, end = span
        if fresh is None:
            self._run(tokens, hashes, start, end)
            return
        run_start = None
        for k, new in enumerate(fresh):
            if new and run_start is None:
                run_start = start + k
            elif not new and run_start is not None:
                self._run(tokens, hashes, run_start, start + k)
                run_start = None
        if run_start is not None:
            self._run(tokens, hashes, run_start, end)

    def _run(self, tokens: Sequence[int], hashes: Sequence[int], i: int, j: int) -> None:
        bs = self.block_size
        self._pending.append(
            BlockStored(
                block_hashes=tuple(map(external_hash, hashes[i:j])),
                parent_block_hash=external_hash(hashes[i - 1]) if i > 0 else None,
                token_ids=tuple(tokens[i * bs : j * bs]),
                block_size=bs,
            )
        )
