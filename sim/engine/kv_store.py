"""Which paged KV cache an engine model uses: the compiled one when it is built, else Python.

`sim.engine.kv_cache.PagedKVCache` (pure Python) is the reference; `sim.engine.
kv_cache_native.NativeKVCache` (Cython, built by `pip install` where a C compiler is found)
is the same cache block for block at a few nanoseconds a block. Both have the methods of
`KVCache`. `new_kv_cache(..., native=None)` takes the compiled one if it was built;
`native=False` forces the reference (tests compare the two request by request).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from sim.engine.block_runs import Piece
from sim.engine.kv_cache import BlockOrigin, PagedKVCache
from sim.engine.kv_events import KVEventLog

try:
    from sim.engine.kv_cache_native import NativeKVCache
except ImportError:  # not compiled (no C compiler at install time): the reference runs
    NATIVE_BUILT = False
else:
    NATIVE_BUILT = True


class KVCache(Protocol):
    """The paged KV cache as the scheduler uses it (see `PagedKVCache` for the semantics)."""

    num_blocks: int
    block_size: int
    events: KVEventLog | None

    @property
    def num_free_blocks(self) -> int: ...
    @property
    def usage(self) -> float: ...
    @property
    def num_cached_blocks(self) -> int: ...
    def find_cached_prefix(self, block_hashes: Sequence[int]) -> int: ...
    def cached_blocks(self, block_hashes: Sequence[int]) -> list[int]: ...
    def num_evictable(self, block_ids: Sequence[int]) -> int: ...
    def evictable(self, block_ids: Sequence[int]) -> list[int]: ...
    def touch(self, block_ids: Sequence[int]) -> list[Piece]: ...
    def allocate(self, count: int, commit: Sequence[int] = ()) -> list[int]: ...
    def allocate_runs(
        self, count: int, commit: Sequence[int] = (), origin: BlockOrigin | None = None
    ) -> tuple[list[int], list[Piece]]: ...
    def cache_block(self, block_id: int, block_hash: int) -> None: ...
    def cache_blocks(
        self,
        block_ids: Sequence[int],
        block_hashes: Sequence[int],
        pieces: list[Piece] | None = None,
        origin: BlockOrigin | None = None,
    ) -> None: ...
    def free(self, block_ids: Sequence[int], pieces: list[Piece] | None = None) -> None: ...
    def peek_free(self, count: int) -> list[int]: ...
    def eviction_order(self) -> list[int]: ...
    def ref_count(self, block_id: int) -> int: ...
    def is_cached(self, block_hash: int) -> bool: ...
    def cached_hashes(self) -> list[int]: ...
    def reset_prefix_cache(self) -> bool: ...


def new_kv_cache(num_blocks: int, block_size: int, native: bool | None = None) -> KVCache:
    """The compiled cache if built (`native` None or True), else the reference; `native=True`
    without the compiled module is an error."""
    if native is None:
        native = NATIVE_BUILT
    if not native:
        return PagedKVCache(num_blocks, block_size)
    if not NATIVE_BUILT:
        raise RuntimeError(
            "sim.engine.kv_cache_native is not built (reinstall kvgate with a C compiler)"
        )
    return NativeKVCache(num_blocks, block_size)
