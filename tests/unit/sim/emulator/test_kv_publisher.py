"""The emulator's KV-event wire encoding (vLLM 0.32's maps) and its lazy zmq import."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from routing.kv_events import AllBlocksCleared, BlockRemoved, BlockStored
from sim.emulator.kv_publisher import encode_event
from sim.emulator.lora import LoraSettings, LoraSlots

REPO = Path(__file__).resolve().parents[4]

# Key order of the events in vLLM 0.32's captures (shared/samples/vllm-0.32/kv_events_*).
STORED_KEYS = [
    "type",
    "block_hashes",
    "parent_block_hash",
    "token_ids",
    "block_size",
    "lora_id",
    "medium",
    "lora_name",
    "extra_keys",
    "group_idx",
    "kv_cache_spec_kind",
]


def test_block_stored_is_a_map_with_vllm_032_keys() -> None:
    event = BlockStored((11, 12), None, tuple(range(8)), 4)
    wire = encode_event(event)
    assert list(wire) == STORED_KEYS
    assert wire["type"] == "BlockStored" and wire["block_hashes"] == [11, 12]
    assert wire["token_ids"] == list(range(8)) and wire["block_size"] == 4
    assert wire["lora_id"] is None and wire["lora_name"] is None
    assert wire["medium"] == "GPU" and wire["extra_keys"] == [None, None]


def test_a_lora_block_names_its_adapter_and_carries_its_own_tokens() -> None:
    slots = LoraSlots(LoraSettings(("lora-a", "lora-b")))
    salted = tuple(slots.salted("lora-b", [7, 8, 9, 10]))
    wire = encode_event(BlockStored((5,), 4, salted, 4), ("lora-a", "lora-b"))
    assert wire["token_ids"] == [7, 8, 9, 10]
    assert (wire["lora_id"], wire["lora_name"]) == (2, "lora-b")
    assert wire["extra_keys"] == [["lora-b"]]
    assert wire["parent_block_hash"] == 4


def test_removed_and_cleared() -> None:
    assert encode_event(BlockRemoved((1, 2))) == {
        "type": "BlockRemoved",
        "block_hashes": [1, 2],
        "medium": "GPU",
        "group_idx": 0,
    }
    assert encode_event(AllBlocksCleared()) == {"type": "AllBlocksCleared"}


NO_ZMQ = """
import json, sys
from sim.emulator.server import EmulatorSettings, make_apps
make_apps(EmulatorSettings(replicas=1))
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("zmq", "msgpack"))))
"""


def test_the_emulator_without_events_loads_no_zmq() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", NO_ZMQ], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert json.loads(proc.stdout) == []


def test_replay_ports_follow_the_publishers_unless_given() -> None:
    from sim.emulator.server import EmulatorSettings

    assert EmulatorSettings(replicas=2, kv_events_port=7000).replay_port(1) == 7003
    given = EmulatorSettings(replicas=2, kv_events_port=7000, kv_events_replay_port=9000)
    assert given.replay_port(1) == 9001
    assert EmulatorSettings(replicas=2, kv_events_port=0).replay_port(1) == 0
