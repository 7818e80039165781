"""Runs of consecutive block ids, so that the KV cache can update a run with slices.

A request's blocks are mostly runs of consecutive ids, ascending or descending: the free
queue hands out what a request freed, in one piece. `stretches` cuts a list of ids into such
runs (verified element by element, in C) and irregular stretches between them. Canonical
ints (`canonical_ints`): one shared list of the int objects 0, 1, …, from which block ids are
taken, so comparing and assigning slices of them creates no new ints (creating a Python int
costs about as much as a dict operation).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from itertools import islice
from operator import itemgetter

SHORT = 8  # shorter runs are not worth slicing for
_INTS: list[int] = []


def canonical_ints(n: int) -> list[int]:
    """The shared list of the int objects 0, 1, …, at least n long (grown, never rebuilt,
    so earlier slices keep their identity)."""
    if len(_INTS) < n:
        _INTS.extend(range(len(_INTS), n))
    return _INTS


def _run_at(ids: Sequence[int], i: int, n: int) -> tuple[int, int]:
    """(length, step) of the run of consecutive ids starting at `ids[i]` (step ±1)."""
    first = ids[i]
    if i + 1 == n:
        return 1, 0
    step = ids[i + 1] - first
    if step not in (1, -1):
        return 1, 0
    # Gallop on the last id of a candidate run, then check the whole run once (in C).
    good, probe = 2, 4
    while probe <= n - i and ids[i + probe - 1] == first + step * (probe - 1):
        good, probe = probe, probe * 2
    bad = min(probe, n - i + 1)
    while bad - good > 1:
        mid = (good + bad) // 2
        if ids[i + mid - 1] == first + step * (mid - 1):
            good = mid
        else:
            bad = mid
    ints = _INTS
    expected = ints[first : first + good] if step > 0 else ints[first - good + 1 : first + 1][::-1]
    if ids[i : i + good] == expected:
        return good, step
    length = 2  # the last id matched by coincidence: walk it
    while i + length < n and ids[i + length] == first + step * length:
        length += 1
    return length, step


def stretches(ids: Sequence[int]) -> list[tuple[int, int, int]]:
    """`ids` cut into stretches [i, j) with a step: ±1 for a run of consecutive ids (at least
    2 × SHORT long), 0 for an irregular stretch to handle block by block.

    Over irregular ids the scan moves SHORT at a time: a run of 2 × SHORT starting in
    [i, i + SHORT) covers ids[i + SHORT : i + 2 × SHORT], so unless those look like a run
    (their ends are SHORT − 1 apart) none starts there.
    """
    n = len(ids)
    if n < 2 * SHORT:
        return [(0, n, 0)] if n else []
    out: list[tuple[int, int, int]] = []
    i = 0
    irregular = 0  # start of the irregular stretch before i
    reach = SHORT - 1
    last = n - 2 * SHORT
    while i <= last:
        d = ids[i + SHORT + reach] - ids[i + SHORT]
        if d not in (reach, -reach):
            i += SHORT
            continue
        # Find where the candidate run begins (at most SHORT back), then how far it goes.
        start = i + SHORT
        step = 1 if d > 0 else -1
        while start > irregular and start > i and ids[start - 1] == ids[start] - step:
            start -= 1
        length, step = _run_at(ids, start, n)
        if length < 2 * SHORT:
            i += SHORT
            continue
        if irregular < start:
            out.append((irregular, start, 0))
        out.append((start, start + length, step))
        i = irregular = start + length
    if irregular < n:
        out.append((irregular, n, 0))
    return out


def span(ids: Sequence[int], i: int, j: int, step: int) -> tuple[int, int]:
    """The id range [lo, hi) of the run ids[i:j]."""
    return (ids[i], ids[j - 1] + 1) if step > 0 else (ids[j - 1], ids[i] + 1)


# -- pieces -------------------------------------------------------------------------------
# A list of block ids can carry its cut into stretches along with it (`Piece`s, as
# `stretches` returns them, in order and end to end), so that the cache need not look for the
# runs again: the free queue keeps the pieces of what `free` appended to it, and a request
# the pieces of the blocks it holds. A run piece may be shorter than 2 × SHORT there.

Piece = tuple[int, int, int]


def shifted(pieces: list[Piece], offset: int) -> list[Piece]:
    """The pieces of a list placed `offset` ids further into a longer one."""
    return [(i + offset, j + offset, step) for i, j, step in pieces]


def clipped(pieces: list[Piece], start: int, end: int) -> list[Piece]:
    """The pieces of ids[start:end], given those of ids."""
    out = []
    # Callers mostly clip near the end (newly filled blocks): skip to the first piece.
    first = bisect_right(pieces, start, key=itemgetter(0)) - 1 if start else 0
    for i, j, step in islice(pieces, max(first, 0), None):
        if j <= start:
            continue
        if i >= end:
            break
        out.append((max(i, start) - start, min(j, end) - start, step))
    return out


def reversed_pieces(pieces: list[Piece], n: int) -> list[Piece]:
    """The pieces of ids[::-1], given those of ids (n = len(ids))."""
    return [(n - j, n - i, -step) for i, j, step in reversed(pieces)]


def add_irregular(pieces: list[Piece], i: int, j: int) -> None:
    """Append ids[i:j] as an irregular stretch (merged into an irregular one ending at i)."""
    if pieces and pieces[-1][1] == i and pieces[-1][2] == 0:
        pieces[-1] = (pieces[-1][0], j, 0)
    else:
        pieces.append((i, j, 0))
