"""Shared-state events and their wire form, pure: what one gateway tells the others' `Mirror`.

| `k`       | event        | the others                                                    |
|-----------|--------------|---------------------------------------------------------------|
| `p`, none | `Placement`  | record `hashes` for `backend`, bounded by its KV size         |
| `w`       | `Withdrawal` | drop `hashes[start:]` for `backend` (a failed attempt)        |
| `e`       | `Eviction`   | evict `weight` base blocks of its oldest entries but `hashes` |
| `f`       | `Forget`     | forget everything about `backend`'s cache (it went down)      |
| `t`       | `TtftPoints` | teach their TTFT model each `(backend, work tokens, ttft s)`  |

Fields, all bytes (as XADD takes a Redis stream entry): `g` gateway, `k` kind, `b` backend, `c`
the routing block size in prompt bytes (hashes of another size are unusable), `t` wall-clock ms
to the µs (for lag only), `h` chained block hashes as little-endian u64, `s` a withdrawal's start
or an eviction's weight, `d` TTFT points (msgpack), `u` a placement's predicted uncached tokens
(absent: only known unseen). `pack_events`: a batch as one msgpack array, an entry or a frame.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence

import msgpack  # type: ignore[import-untyped]

from scoring.state.events import Event, Eviction, Forget, Placement, TtftPoints, Withdrawal

_HASH = struct.Struct("<Q")
MASK64 = (1 << 64) - 1


class BadEntryError(ValueError):
    """A stream entry is not an event (another writer, or another version)."""


def encode(e: Event) -> dict[bytes, bytes]:
    """The entry's fields as XADD takes them."""
    fields = {b"g": e.gateway.encode(), b"t": repr(float(e.at_ms)).encode()}
    if isinstance(e, TtftPoints):
        fields[b"k"] = b"t"
        fields[b"d"] = msgpack.packb([list(p) for p in e.points])
        return fields
    fields[b"b"] = e.backend.encode()
    if isinstance(e, Forget):
        fields[b"k"] = b"f"
        return fields
    fields[b"c"] = str(e.block_chars).encode()
    fields[b"h"] = pack_hashes(e.hashes)
    if isinstance(e, Placement):
        fields[b"k"] = b"p"
        if e.tokens is not None:
            fields[b"u"] = str(e.tokens).encode()
    elif isinstance(e, Withdrawal):
        fields[b"k"], fields[b"s"] = b"w", str(e.start).encode()
    else:
        fields[b"k"], fields[b"s"] = b"e", str(e.weight).encode()
    return fields


def decode(fields: Mapping[bytes, bytes]) -> Event:
    """An event from an entry's fields as XREAD returns them (bytes, not decoded)."""
    try:
        return _decode(fields)
    except (KeyError, ValueError, TypeError, UnicodeDecodeError) as exc:
        raise BadEntryError(f"not a shared-state entry: {exc!r}") from None


def _decode(f: Mapping[bytes, bytes]) -> Event:
    kind, gateway, at_ms = f.get(b"k", b"p"), f[b"g"].decode(), float(f[b"t"])
    if kind == b"t":
        points = tuple(
            (str(b), float(w), float(s)) for b, w, s in msgpack.unpackb(f[b"d"], use_list=False)
        )
        return TtftPoints(gateway, points, at_ms)
    backend = f[b"b"].decode()
    if kind == b"f":
        return Forget(gateway, backend, at_ms)
    chars, hashes = int(f[b"c"]), unpack_hashes(f[b"h"])
    if kind == b"p":
        tokens = int(f[b"u"]) if b"u" in f else None
        return Placement(gateway, backend, chars, hashes, at_ms, tokens)
    if kind == b"w":
        return Withdrawal(gateway, backend, chars, hashes, int(f[b"s"]), at_ms)
    if kind == b"e":
        return Eviction(gateway, backend, chars, hashes, int(f[b"s"]), at_ms)
    raise ValueError(f"unknown kind {kind!r}")


def pack_events(events: Sequence[Event]) -> bytes:
    """A batch of events as one blob (msgpack: an array of their fields)."""
    return bytes(msgpack.packb([encode(e) for e in events]))


def unpack_events(data: bytes) -> list[dict[bytes, bytes]]:
    """A batch's events' fields, each to `decode` on its own (a bad one is skipped alone)."""
    try:
        fields = msgpack.unpackb(data)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise BadEntryError(f"not a batch of events: {exc!r}") from None
    if not isinstance(fields, list) or not all(isinstance(f, dict) for f in fields):
        raise BadEntryError("not a batch of events: not an array of maps")
    return fields


def pack_hashes(hashes: Sequence[int]) -> bytes:
    return struct.pack(f"<{len(hashes)}Q", *(h & MASK64 for h in hashes))


def unpack_hashes(data: bytes) -> tuple[int, ...]:
    if len(data) % _HASH.size:
        raise ValueError(f"{len(data)} bytes is not a whole number of hashes")
    return struct.unpack(f"<{len(data) // _HASH.size}Q", data)
