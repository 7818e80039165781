"""The free queue of `PagedKVCache`: blocks no request holds, next to be reused first.

vLLM keeps a doubly linked list; here it is a list read from a moving head
(`_queue[_head:]`), with each free block's position in it (`_pos`, an array: positions need
no int objects). A block taken off the queue from the middle (a cache hit on a free block)
leaves a tombstone (None) that popping skips, marked in `_tombs` (a bytearray by position,
searched in C); the list is compacted once its consumed head is long, which keeps positions
below 7 × num_blocks.

`free` appends a request's blocks already cut into pieces (runs of consecutive ids, see
`sim.engine.block_runs`), and the queue keeps that cut (`_pieces`, in queue positions), so
`_pop` hands out blocks with their cut without looking for the runs again; only a stretch
holding a tombstone is read and cut anew.
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Callable
from functools import partial
from operator import is_not
from typing import cast

from sim.engine.block_runs import SHORT, Piece, shifted, span, stretches

_is_not_none: Callable[[object], bool] = partial(is_not, None)

_IOTA = array("i")  # 0, 1, 2, …: queue positions, sliced as they are stored
_ATOI = array("i")  # the same, descending


def _positions(n: int) -> None:
    """Have queue positions 0 … n − 1 ready to slice."""
    global _IOTA, _ATOI
    if len(_IOTA) < n:
        _IOTA = array("i", range(n))
        _ATOI = _IOTA[::-1]


def up(first: int, n: int) -> array[int]:
    """Positions first, first + 1, …, first + n − 1."""
    return _IOTA[first : first + n]


def down(first: int, n: int) -> array[int]:
    """Positions first + n − 1, …, first (a slice of the descending copy)."""
    end = len(_ATOI) - first
    return _ATOI[end - n : end]


def _live(queue: list[int | None]) -> list[int]:
    """The blocks of a stretch of the free queue, tombstones dropped."""
    return cast("list[int]", list(filter(_is_not_none, queue)))


class FreeQueue:
    """The queue half of `PagedKVCache` (a mixin: the cache holds the state)."""

    __slots__ = ("_head", "_pieces", "_pos", "_queue", "_tombs")
    num_blocks: int  # set by the cache

    def _init_queue(self, free_blocks: list[int]) -> None:
        n = self.num_blocks
        _positions(7 * n + 1)
        self._queue: list[int | None] = []
        self._queue += free_blocks  # the next to be reused first
        self._head = 0
        self._pos = up(0, n)  # a free block's index in _queue
        # The cut of _queue[_head:] into pieces, in queue positions (tombstones aside).
        self._pieces: deque[Piece] = deque([(0, n, 1)])
        self._tombs = bytearray(7 * n + 1)  # 1 at the positions of tombstones

    def peek_free(self, count: int) -> list[int]:
        """The next `count` blocks `allocate` would pop, in order (nothing changes)."""
        return self._take(count)

    def eviction_order(self) -> list[int]:
        """Free block ids, next to be reused first (for tests and reports; O(num_blocks))."""
        return _live(self._queue[self._head :])

    def _queued_together(self, lo: int, hi: int) -> int | None:
        """Where free blocks lo..hi−1 sit in the queue if they fill one stretch of it."""
        positions = self._pos[lo:hi]
        a, b = positions[0], positions[-1]
        n = hi - lo
        if b - a == n - 1 and positions == up(a, n):
            return a
        if a - b == n - 1 and positions == down(b, n):
            return b
        return None

    def _take(self, count: int) -> list[int]:
        """The first `count` blocks of the free queue (nothing changes)."""
        queue = self._queue
        head = self._head
        taken = queue[head : head + count]
        if self._tombs.find(1, head, head + count) < 0:
            return cast("list[int]", taken)  # no tombstone in it
        blocks: list[int] = []
        while len(blocks) < count:
            chunk = queue[head : head + count - len(blocks)]
            head += len(chunk)
            blocks += _live(chunk)
        return blocks

    def _pop(self, count: int) -> tuple[list[int], list[Piece]]:
        """Pop the first `count` blocks of the free queue, piece by piece: a stretch of
        the queue with no tombstone (per `_tombs`) is taken as its piece says."""
        queue = self._queue
        queued = self._pieces
        head = self._head
        blocks: list[int] = []
        pieces: list[Piece] = []
        need = count
        while need:
            _, end, step = queued[0]  # starts at head
            stop = min(end, head + need)
            if self._tombs.find(1, head, stop) >= 0:
                chunk = _live(queue[head:stop])
                self._add_chunk(pieces, len(blocks), chunk, step)
            else:
                chunk = cast("list[int]", queue[head:stop])
                pieces.append((len(blocks), len(blocks) + len(chunk), step))
            blocks += chunk
            need -= len(chunk)
            if stop == end:
                queued.popleft()
            else:
                queued[0] = (stop, end, step)
            head = stop
        self._head = head
        return blocks, pieces

    @staticmethod
    def _add_chunk(pieces: list[Piece], at: int, chunk: list[int], step: int) -> None:
        """Pieces for `chunk`, a queue stretch once cut as `step` with tombstones dropped."""
        if not chunk:
            return
        if step and len(chunk) >= 2 * SHORT:
            pieces += shifted(stretches(chunk), at)
        else:
            pieces.append((at, at + len(chunk), 0))

    def _compact(self) -> None:
        """Drop the consumed head and the tombstones; renumber positions run by run."""
        live = _live(self._queue[self._head :])
        self._queue = cast("list[int | None]", live)
        self._head = 0
        self._tombs = bytearray(len(self._tombs))
        pos = self._pos
        pieces = stretches(live)
        self._pieces = deque(pieces)
        for i, j, step in pieces:
            if step:
                lo, hi = span(live, i, j, step)
                pos[lo:hi] = up(i, j - i) if step > 0 else down(i, j - i)
            else:
                for block, index in zip(live[i:j], range(i, j), strict=True):
                    pos[block] = index

    def _queue_pieces(self, at: int, end: int, step: int) -> None:
        """Cut queue[at:end], just appended block by block, into pieces."""
        queued = self._pieces
        if step and end - at >= 2 * SHORT:
            queued += shifted(stretches(cast("list[int]", self._queue[at:end])), at)
        elif queued and queued[-1][1] == at and queued[-1][2] == 0:
            queued[-1] = (queued[-1][0], end, 0)
        else:
            queued.append((at, end, 0))
