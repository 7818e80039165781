from __future__ import annotations

from dataclasses import replace

import pytest

from gateway.state.codec import BadEntryError, decode, encode, pack_hashes
from scoring.state.events import Event, Eviction, Forget, Placement, TtftPoints, Withdrawal

EVENTS: list[Event] = [
    Placement("gw-1", "10.0.0.5:8000", 64, (0, 1, 2**64 - 1, 123456789), 1_700_000_000_000),
    Placement("gw-1", "b", 64, (3, 4), 11, 1536),  # with its uncached tokens
    Withdrawal("gw-1", "b", 64, (5, 6, 7), 1, 12),
    Eviction("gw-1", "b", 32, (8,), 40, 13),
    Forget("gw-2", "b", 14),
    TtftPoints("gw-2", (("b", 1200.0, 0.25), ("c", 0.0, 0.01)), 15),
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_every_event_survives_the_round_trip(event: Event) -> None:
    assert decode(encode(event)) == event


def test_hashes_take_8_bytes_a_block() -> None:
    assert len(encode(EVENTS[0])[b"h"]) == 8 * 4


def test_an_entry_without_a_kind_is_a_placement_of_the_first_version() -> None:
    fields = encode(EVENTS[0])
    del fields[b"k"]
    assert decode(fields) == EVENTS[0]


def test_a_placement_without_tokens_says_so() -> None:
    fields = encode(EVENTS[1])
    del fields[b"u"]  # an older gateway's
    assert decode(fields) == replace(EVENTS[1], tokens=None)  # type: ignore[type-var]


def test_no_hashes_is_an_empty_tuple() -> None:
    assert decode(encode(Placement("g", "b", 64, (), 0))).hashes == ()  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "fields",
    [
        {b"g": b"x"},  # fields missing
        {b"g": b"g", b"b": b"b", b"c": b"sixty", b"t": b"0", b"h": b""},
        {b"g": b"g", b"b": b"b", b"c": b"64", b"t": b"0", b"h": b"\x00" * 7},
        {b"g": b"\xff", b"b": b"b", b"c": b"64", b"t": b"0", b"h": b""},
        {b"k": b"z", b"g": b"g", b"b": b"b", b"c": b"64", b"t": b"0", b"h": b""},
        {b"k": b"t", b"g": b"g", b"t": b"0", b"d": b"\xc1"},  # not msgpack
        {b"k": b"w", b"g": b"g", b"b": b"b", b"c": b"64", b"t": b"0", b"h": b""},  # no start
    ],
)
def test_an_entry_that_is_not_an_event_is_refused(fields: dict[bytes, bytes]) -> None:
    with pytest.raises(BadEntryError, match="not a shared-state entry"):
        decode(fields)


def test_hashes_pack_little_endian() -> None:
    assert pack_hashes([1]) == b"\x01" + b"\x00" * 7
