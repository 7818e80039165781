"""The KV-event decoder against vLLM 0.32's captured batches and hand-built positional ones."""

from __future__ import annotations

import json
from pathlib import Path

import msgpack
import pytest

from adapters.kv_events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KvEventDecodeError,
    block_hash,
    decode_message,
    decode_payload,
)

SAMPLES = sorted((Path(__file__).parents[2] / "fixtures" / "vllm-0.32").glob("kv_events_*.jsonl"))


def _captured() -> list[dict[str, object]]:
    return [json.loads(line) for path in SAMPLES for line in path.read_text().splitlines()]


def _frames(seq: int, payload: object, topic: bytes = b"kv-events") -> list[bytes]:
    return [topic, seq.to_bytes(8, "big"), msgpack.packb(payload, use_bin_type=True)]


def test_the_samples_are_there() -> None:
    assert len(SAMPLES) == 2
    assert len(_captured()) == 11


@pytest.mark.parametrize("line", _captured(), ids=lambda d: f"seq{d['seq']}")
def test_every_captured_batch_decodes(line: dict) -> None:
    # The captures keep the decoded payload and the first bytes of the raw one: packing the
    # decoded payload again gives the same bytes and length, so these are vLLM's frames.
    frames = _frames(line["seq"], line["decoded"], line["topic"].encode())
    assert frames[2].hex().startswith(line["payload_hex_prefix"])
    assert [len(f) for f in frames] == line["frame_lens"]

    batch = decode_message(frames)

    ts, raw_events, rank = line["decoded"]
    assert (batch.seq, batch.timestamp, batch.dp_rank, batch.skipped) == (line["seq"], ts, rank, 0)
    assert len(batch.events) == len(raw_events)
    for event, raw in zip(batch.events, raw_events, strict=True):
        assert type(event).__name__ == raw["type"]
        assert event.block_hashes == tuple(raw["block_hashes"])  # type: ignore[union-attr]
        assert event.medium == "GPU"  # type: ignore[union-attr]
        if isinstance(event, BlockStored):
            assert event.parent_block_hash == raw["parent_block_hash"]
            assert event.token_ids == tuple(raw["token_ids"])
            assert event.lora_id == raw["lora_id"]
            assert len(event.token_ids) == event.block_size * len(event.block_hashes)


def test_captured_lora_batches_carry_the_adapter_id() -> None:
    lora = [d for d in _captured() if d["decoded"][1][0].get("lora_name") == "lora-a"]
    assert lora
    for line in lora:
        (event,) = decode_message(_frames(line["seq"], line["decoded"])).events
        assert isinstance(event, BlockStored)
        assert (event.lora_id, event.block_size) == (1, 32)


def test_positional_events_in_field_order() -> None:
    payload = [
        12.5,
        [
            ["BlockStored", [1, 2], None, [7] * 32, 16, None, "GPU"],
            ["BlockStored", [3], 2, [8] * 16, 16, 4],  # older: no medium
            ["BlockRemoved", [1], "CPU"],
            ["BlockRemoved", [2]],
            ["AllBlocksCleared"],
        ],
        0,
    ]
    batch = decode_message(_frames(9, payload))
    assert batch.seq == 9
    assert batch.events == (
        BlockStored((1, 2), None, tuple([7] * 32), 16, None, "GPU"),
        BlockStored((3,), 2, tuple([8] * 16), 16, 4, None),
        BlockRemoved((1,), "CPU"),
        BlockRemoved((2,), None),
        AllBlocksCleared(),
    )


def test_newer_trailing_fields_and_batches_without_rank_or_as_maps() -> None:
    stored = ["BlockStored", [5], None, [1, 2], 2, None, "GPU", "lora-x", [["k"]], 0]
    assert decode_message(_frames(0, [1.0, [stored]])).dp_rank is None
    as_map = {"ts": 2.0, "events": [{"type": "AllBlocksCleared"}], "data_parallel_rank": 3}
    batch = decode_message(_frames(1, as_map))
    assert (batch.timestamp, batch.events, batch.dp_rank) == (2.0, (AllBlocksCleared(),), 3)


def test_hashes_as_bytes_keep_the_last_eight_bytes() -> None:
    digest = bytes(range(32))
    payload = [0.0, [["BlockRemoved", [digest, (7).to_bytes(8, "big")]]], 0]
    (event,) = decode_message(_frames(0, payload)).events
    assert isinstance(event, BlockRemoved)
    assert event.block_hashes == (int.from_bytes(digest[-8:], "big"), 7)
    assert block_hash(2**64 - 1) == 2**64 - 1


def test_unknown_event_types_are_skipped_and_counted() -> None:
    payload = [0.0, [{"type": "BlockMoved", "x": 1}, ["Future", 1], ["AllBlocksCleared"]], 0]
    batch = decode_message(_frames(4, payload))
    assert batch.events == (AllBlocksCleared(),)
    assert batch.skipped == 2


def test_a_replayed_message_has_no_topic() -> None:
    frames = _frames(3, [0.0, [], 0])[1:]
    assert decode_message(frames).seq == 3


@pytest.mark.parametrize(
    ("frames", "message"),
    [
        ([b"t", b"\x00" * 8, b"garbage!"], "payload is not msgpack"),
        ([b"t"], "expected 3 frames"),
        ([b"t", b"\x01", msgpack.packb([0.0, [], 0])], "sequence frame has 1 bytes"),
        ([b"t", b"\x00" * 8, b"\xc1"], "not msgpack"),
        ([b"t", b"\x00" * 8, msgpack.packb({"a": 1})], "timestamp is NoneType"),
        ([b"t", b"\x00" * 8, msgpack.packb([0.0, 5, 0])], "events is int"),
        ([b"t", b"\x00" * 8, msgpack.packb([0.0, [], "r"])], "data_parallel_rank is str"),
        ([b"t", b"\x00" * 8, msgpack.packb([0.0, [5], 0])], "event 0: event is int"),
        ([b"t", b"\x00" * 8, msgpack.packb([0.0, [[]], 0])], "event is list"),
        ([b"t", b"\x00" * 8, msgpack.packb([0.0, [{"x": 1}], 0])], "no type name"),
        ([b"t", b"\x00" * 8, msgpack.packb([0.0, [["BlockRemoved", 3]], 0])], "block_hashes"),
        ([b"t", b"\x00" * 8, msgpack.packb([0.0, [["BlockRemoved", ["h"]]], 0])], "hash is str"),
        (
            [b"t", b"\x00" * 8, msgpack.packb([0.0, [["BlockStored", [1], None, [1.5], 1]], 0])],
            "token_ids",
        ),
        (
            [b"t", b"\x00" * 8, msgpack.packb([0.0, [["BlockStored", [1], None, [1]]], 0])],
            "block_size is NoneType",
        ),
    ],
)
def test_malformed_batches_raise_a_decode_error(frames: list[bytes], message: str) -> None:
    with pytest.raises(KvEventDecodeError, match=message):
        decode_message(frames)


def test_the_payload_alone() -> None:
    batch = decode_payload(7, msgpack.packb([1.0, [["AllBlocksCleared"]]]))
    assert (batch.seq, batch.events) == (7, (AllBlocksCleared(),))
