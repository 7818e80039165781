"""`python -m bench kv-events`: KV-event decoding throughput, events per second on one core.

Builds batches shaped like vLLM 0.32's (each `BlockStored` covering `--blocks` full blocks of
`--block-size` tokens, as many `BlockRemoved` of one block each), packs them with msgpack
once, then times `adapters.kv_events.decode_message` over the frames for `--seconds`
(single thread). Prints one JSON object: events/s and batches/s per encoding.

`index` then times what the gateway does with each batch: decode, then
`PreciseIndex.apply` (keying every stored block from its token ids, mapping engine hashes,
removing), on a stream of chained stores and removals of stored blocks in a steady state of
`--held` blocks; and `index_memory` the index's bytes per held block (tracemalloc, a fresh
index filled with `--held` blocks).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time

import msgpack  # type: ignore[import-untyped]

from adapters.kv_events import decode_message
from routing.kv_events import BlockStored
from scoring.state.precise_index import PreciseIndex

_TOPIC = b"kv-events"


def _stored(rng: random.Random, blocks: int, block_size: int, positional: bool) -> object:
    hashes = [rng.getrandbits(64) for _ in range(blocks)]
    tokens = [rng.randrange(32000) for _ in range(blocks * block_size)]
    parent = rng.getrandbits(64)
    if positional:
        return ["BlockStored", hashes, parent, tokens, block_size, None, "GPU"]
    return {
        "type": "BlockStored",
        "block_hashes": hashes,
        "parent_block_hash": parent,
        "token_ids": tokens,
        "block_size": block_size,
        "lora_id": None,
        "medium": "GPU",
        "lora_name": None,
        "extra_keys": [None] * blocks,
        "group_idx": 0,
        "kv_cache_spec_kind": "full_attention",
    }


def _removed(rng: random.Random, positional: bool) -> object:
    hashes = [rng.getrandbits(64)]
    if positional:
        return ["BlockRemoved", hashes, "GPU"]
    return {"type": "BlockRemoved", "block_hashes": hashes, "medium": "GPU", "group_idx": 0}


def _messages(args: argparse.Namespace, positional: bool) -> list[list[bytes]]:
    rng = random.Random(args.seed)
    messages = []
    for seq in range(args.batches):
        events = []
        for _ in range(args.events // 2):
            events.append(_stored(rng, args.blocks, args.block_size, positional))
            events.append(_removed(rng, positional))
        payload = msgpack.packb([time.time(), events, 0], use_bin_type=True)
        messages.append([_TOPIC, seq.to_bytes(8, "big"), payload])
    return messages


def _time(messages: list[list[bytes]], seconds: float) -> dict[str, float]:
    batches = events = 0
    start = time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        for frames in messages:
            events += len(decode_message(frames).events)
        batches += len(messages)
    payload = sum(len(m[2]) for m in messages) / len(messages)
    return {
        "events_per_s": round(events / elapsed),
        "batches_per_s": round(batches / elapsed),
        "us_per_event": round(elapsed / events * 1e6, 2),
        "payload_bytes_per_batch": round(payload),
    }


def _index_messages(args: argparse.Namespace) -> tuple[list[list[bytes]], int]:
    """Batches of chained stores and removals of what was stored; the events they hold."""
    rng = random.Random(args.seed)
    held: list[int] = []
    messages, parent, events_total = [], None, 0
    for seq in range(args.batches):
        events: list[object] = []
        for _ in range(args.events // 2):
            stored = _stored(rng, args.blocks, args.block_size, False)
            assert isinstance(stored, dict)
            stored["parent_block_hash"] = parent if rng.random() < 0.5 else None
            parent = stored["block_hashes"][-1]
            held.extend(stored["block_hashes"])
            events.append(stored)
            if len(held) > args.blocks:
                gone = [held.pop(0) for _ in range(args.blocks)]
                events.append({"type": "BlockRemoved", "block_hashes": gone, "medium": "GPU"})
        events_total += len(events)
        payload = msgpack.packb([time.time(), events, 0], use_bin_type=True)
        messages.append([_TOPIC, seq.to_bytes(8, "big"), payload])
    return messages, events_total


def _time_index(args: argparse.Namespace) -> dict[str, float]:
    messages, per_cycle = _index_messages(args)
    index = PreciseIndex()
    cycles = 0
    start = time.perf_counter()
    while (elapsed := time.perf_counter() - start) < args.seconds:
        for frames in messages:
            index.apply("b", decode_message(frames).events)
        cycles += 1
    events = cycles * per_cycle
    return {
        "events_per_s": round(events / elapsed),
        "us_per_event": round(elapsed / events * 1e6, 2),
    }


def _index_memory(args: argparse.Namespace) -> dict[str, float]:
    import tracemalloc

    rng = random.Random(args.seed)
    runs = [
        BlockStored(
            tuple(rng.getrandbits(64) for _ in range(64)),
            None,
            tuple(rng.randrange(32000) for _ in range(64 * args.block_size)),
            args.block_size,
        )
        for _ in range(args.held // 64)
    ]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    index = PreciseIndex()
    index.apply("b", runs)
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    blocks = index.blocks("b")
    return {"blocks": blocks, "bytes_per_block": round((after - before) / blocks, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench kv-events", description=__doc__)
    parser.add_argument("--seconds", type=float, default=3.0, help="per encoding")
    parser.add_argument("--batches", type=int, default=200, help="distinct batches cycled")
    parser.add_argument("--events", type=int, default=8, help="events per batch (half stored)")
    parser.add_argument("--blocks", type=int, default=4, help="blocks per BlockStored")
    parser.add_argument("--block-size", type=int, default=16, help="tokens per block")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--held", type=int, default=100_000, help="blocks, for index memory")
    args = parser.parse_args(argv)
    result: dict[str, object] = {"params": vars(args)}
    for name, positional in (("map", False), ("positional", True)):
        result[name] = _time(_messages(args, positional), args.seconds)
    result["index"] = _time_index(args)
    result["index_memory"] = _index_memory(args)
    json.dump(result, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
