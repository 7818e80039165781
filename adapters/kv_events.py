"""vLLM KV-cache events: decoding one ZMQ message into immutable values (pure, no I/O).

Wire format (vLLM's `ZmqEventPublisher`): a multipart message `[topic, seq, payload]`, `seq`
an 8-byte big-endian unsigned integer, `payload` msgpack `[timestamp, [event, ...], dp_rank]`
(the rank may be absent, or the batch a map `{ts, events, data_parallel_rank}`). Each event is
either a map with a `type` key (vLLM 0.32: `{"type": "BlockStored", "block_hashes": [...],
...}`) or a positional array tagged by its type name (older vLLM, some peers):
`["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium]`,
`["BlockRemoved", block_hashes, medium]`, `["AllBlocksCleared"]`, trailing fields possibly
missing (older versions had no `medium`) or extra (newer ones append more).

Block hashes are unsigned 64-bit ints, or bytes (`VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0`) kept
as the int of their last 8 bytes big-endian. Unknown event types are skipped and counted in
`KvEventBatch.skipped`; anything else malformed raises `KvEventDecodeError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack  # type: ignore[import-untyped]

from routing.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KvEvent

SEQ_BYTES = 8


class KvEventDecodeError(ValueError):
    """A message that is not a KV-event batch (wrong frame count, bad msgpack, bad fields)."""


@dataclass(frozen=True, slots=True)
class KvEventBatch:
    """One published message: its sequence number, the engine's timestamp and its events."""

    seq: int
    timestamp: float
    events: tuple[KvEvent, ...]
    dp_rank: int | None = None
    skipped: int = 0  # events of unknown types left out


def parse_seq(frame: bytes) -> int:
    """The sequence number frame: 8 bytes big-endian, signed so vLLM's end marker reads -1."""
    if len(frame) != SEQ_BYTES:
        raise KvEventDecodeError(f"sequence frame has {len(frame)} bytes, not {SEQ_BYTES}")
    return int.from_bytes(frame, "big", signed=True)


def decode_message(frames: Sequence[bytes]) -> KvEventBatch:
    """Decode a published message `[topic, seq, payload]` (or a replayed `[seq, payload]`)."""
    if len(frames) not in (2, 3):
        raise KvEventDecodeError(f"expected 3 frames (topic, seq, payload), got {len(frames)}")
    return decode_payload(parse_seq(frames[-2]), frames[-1])


def decode_payload(seq: int, payload: bytes) -> KvEventBatch:
    """Decode the msgpack payload of the batch numbered `seq`."""
    try:
        raw = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except (ValueError, msgpack.UnpackException) as exc:
        raise KvEventDecodeError(f"batch {seq}: payload is not msgpack: {exc}") from None
    if isinstance(raw, dict):
        raw = [raw.get("ts"), raw.get("events"), raw.get("data_parallel_rank")]
    if not isinstance(raw, list) or len(raw) not in (2, 3):
        raise KvEventDecodeError(f"batch {seq}: expected [timestamp, events, dp_rank]")
    ts, raw_events = raw[0], raw[1]
    rank = raw[2] if len(raw) == 3 else None
    if not isinstance(ts, int | float) or isinstance(ts, bool):
        raise KvEventDecodeError(f"batch {seq}: timestamp is {type(ts).__name__}")
    if not isinstance(raw_events, list):
        raise KvEventDecodeError(f"batch {seq}: events is {type(raw_events).__name__}")
    if rank is not None and not _is_int(rank):
        raise KvEventDecodeError(f"batch {seq}: data_parallel_rank is {type(rank).__name__}")
    events: list[KvEvent] = []
    for i, item in enumerate(raw_events):
        try:
            event = _event(item)
        except KvEventDecodeError as exc:
            raise KvEventDecodeError(f"batch {seq}, event {i}: {exc}") from None
        if event is not None:
            events.append(event)
    skipped = len(raw_events) - len(events)
    return KvEventBatch(seq, float(ts), tuple(events), rank, skipped)


# Positional field order after the type tag, as vLLM's array_like structs declared them.
_STORED_FIELDS = (
    "block_hashes",
    "parent_block_hash",
    "token_ids",
    "block_size",
    "lora_id",
    "medium",
)
_REMOVED_FIELDS = ("block_hashes", "medium")
_FIELDS = {"BlockStored": _STORED_FIELDS, "BlockRemoved": _REMOVED_FIELDS, "AllBlocksCleared": ()}


def _event(item: Any) -> KvEvent | None:
    if isinstance(item, dict):
        kind, fields = item.get("type"), item
    elif isinstance(item, list) and item:
        kind = item[0]
        names = _FIELDS.get(kind, ()) if isinstance(kind, str) else ()
        fields = dict(zip(names, item[1:], strict=False))
    else:
        raise KvEventDecodeError(f"event is {type(item).__name__}, not a map or tagged array")
    if not isinstance(kind, str):
        raise KvEventDecodeError("event has no type name")
    if kind == "BlockStored":
        return BlockStored(
            block_hashes=_hashes(fields.get("block_hashes")),
            parent_block_hash=_opt_hash(fields.get("parent_block_hash")),
            token_ids=_ints(fields.get("token_ids"), "token_ids"),
            block_size=_int(fields.get("block_size"), "block_size"),
            lora_id=_opt_int(fields.get("lora_id"), "lora_id"),
            medium=_opt_str(fields.get("medium"), "medium"),
            lora_name=(name := _opt_str(fields.get("lora_name"), "lora_name")),
            salted=_salted(fields.get("extra_keys"), name),
        )
    if kind == "BlockRemoved":
        return BlockRemoved(
            block_hashes=_hashes(fields.get("block_hashes")),
            medium=_opt_str(fields.get("medium"), "medium"),
        )
    if kind == "AllBlocksCleared":
        return AllBlocksCleared()
    return None


def _salted(extra_keys: object, lora_name: str | None) -> bool:
    """Whether the first block's extra keys hold more than the adapter's name."""
    if not isinstance(extra_keys, list) or not extra_keys:
        return False
    first = extra_keys[0]
    if first is None:
        return False
    keys = first if isinstance(first, list) else [first]
    return any(k != lora_name for k in keys)


def block_hash(value: object) -> int:
    """One block hash as an int: ints as they are, bytes by their last 8 bytes big-endian."""
    if type(value) is int:
        return value
    if isinstance(value, bytes):
        if not value:
            raise KvEventDecodeError("empty block hash")
        return int.from_bytes(value[-SEQ_BYTES:], "big")
    if _is_int(value):
        return value  # type: ignore[return-value]
    raise KvEventDecodeError(f"block hash is {type(value).__name__}")


def _hashes(value: object) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise KvEventDecodeError(f"block_hashes is {type(value).__name__}, not a list")
    return tuple(block_hash(v) for v in value)


def _opt_hash(value: object) -> int | None:
    return None if value is None else block_hash(value)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int(value: object, name: str) -> int:
    if not _is_int(value):
        raise KvEventDecodeError(f"{name} is {type(value).__name__}, not an int")
    return value  # type: ignore[return-value]


def _opt_int(value: object, name: str) -> int | None:
    return None if value is None else _int(value, name)


def _opt_str(value: object, name: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise KvEventDecodeError(f"{name} is {type(value).__name__}, not a string")


def _ints(value: object, name: str) -> tuple[int, ...]:
    # `type(v) is int` (msgpack yields exact ints; it also rules out bools): the hot loop.
    if not isinstance(value, list) or not all(type(v) is int for v in value):
        raise KvEventDecodeError(f"{name} is not a list of ints")
    return tuple(value)
