"""Placement entries of the shared stream: encoding and decoding, pure.

One entry is one dispatch: which gateway made it (`g`), to which backend (`b`), the routing
block size in prompt bytes its hashes were cut with (`c`; a gateway whose block size differs
cannot use them), the wall-clock time it was made in milliseconds (`t`; only for measuring
replication lag), and the chained block hashes (`h`), packed as little-endian unsigned 64-bit
integers, 8 bytes a block.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

_HASH = struct.Struct("<Q")
MASK64 = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class Placement:
    """A request with these block hashes went to `backend` (from gateway `gateway`)."""

    gateway: str
    backend: str
    block_chars: int
    hashes: tuple[int, ...]
    at_ms: int  # wall clock when dispatched


class BadEntryError(ValueError):
    """A stream entry is not a placement (another writer, or another version)."""


def encode(p: Placement) -> dict[bytes, bytes]:
    """The entry's fields as XADD takes them."""
    return {
        b"g": p.gateway.encode(),
        b"b": p.backend.encode(),
        b"c": str(p.block_chars).encode(),
        b"t": str(p.at_ms).encode(),
        b"h": pack_hashes(p.hashes),
    }


def decode(fields: Mapping[bytes, bytes]) -> Placement:
    """A placement from an entry's fields as XREAD returns them (bytes, not decoded)."""
    try:
        return Placement(
            gateway=fields[b"g"].decode(),
            backend=fields[b"b"].decode(),
            block_chars=int(fields[b"c"]),
            hashes=unpack_hashes(fields[b"h"]),
            at_ms=int(fields[b"t"]),
        )
    except (KeyError, ValueError, UnicodeDecodeError) as exc:
        raise BadEntryError(f"not a placement entry: {exc}") from None


def pack_hashes(hashes: Sequence[int]) -> bytes:
    return struct.pack(f"<{len(hashes)}Q", *(h & MASK64 for h in hashes))


def unpack_hashes(data: bytes) -> tuple[int, ...]:
    if len(data) % _HASH.size:
        raise ValueError(f"{len(data)} bytes is not a whole number of hashes")
    return struct.unpack(f"<{len(data) // _HASH.size}Q", data)
