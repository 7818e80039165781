from __future__ import annotations

import pytest

from gateway.state.codec import BadEntryError, Placement, decode, encode, pack_hashes


def test_a_placement_survives_the_round_trip() -> None:
    p = Placement("gw-1", "10.0.0.5:8000", 64, (0, 1, 2**64 - 1, 123456789), 1_700_000_000_000)
    fields = encode(p)
    assert len(fields[b"h"]) == 8 * 4  # 8 bytes a block
    assert decode(fields) == p


def test_no_hashes_is_an_empty_tuple() -> None:
    assert decode(encode(Placement("g", "b", 64, (), 0))).hashes == ()


@pytest.mark.parametrize(
    "fields",
    [
        {b"g": b"x"},  # fields missing
        {b"g": b"g", b"b": b"b", b"c": b"sixty", b"t": b"0", b"h": b""},
        {b"g": b"g", b"b": b"b", b"c": b"64", b"t": b"0", b"h": b"\x00" * 7},
        {b"g": b"\xff", b"b": b"b", b"c": b"64", b"t": b"0", b"h": b""},
    ],
)
def test_an_entry_that_is_not_a_placement_is_refused(fields: dict[bytes, bytes]) -> None:
    with pytest.raises(BadEntryError, match="not a placement entry"):
        decode(fields)


def test_hashes_pack_little_endian() -> None:
    assert pack_hashes([1]) == b"\x01" + b"\x00" * 7
