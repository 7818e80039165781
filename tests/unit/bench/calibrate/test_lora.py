"""The dummy LoRA adapter: a PEFT config and a safetensors file vLLM can read."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from bench.calibrate.lora import write_lora_dir
from bench.calibrate.tinymodel import ModelSpec


def test_adapter_files_hold_every_layers_q_and_v_matrices(tmp_path: Path) -> None:
    spec = ModelSpec()
    directory = write_lora_dir(tmp_path / "a", spec, rank=8)
    config = json.loads((directory / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["r"] == 8
    raw = (directory / "adapter_model.safetensors").read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    assert (8 + size) % 8 == 0
    header = json.loads(raw[8 : 8 + size])
    assert len(header) == 2 * 2 * spec.num_hidden_layers
    q_b = header["base_model.model.model.layers.1.self_attn.q_proj.lora_B.weight"]
    v_b = header["base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight"]
    assert q_b["shape"] == [128, 8] and v_b["shape"] == [64, 8]
    end = max(t["data_offsets"][1] for t in header.values())
    assert len(raw) == 8 + size + end and not any(raw[8 + size :])
