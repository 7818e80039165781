"""A dummy LoRA adapter for the tiny model, written on the spot (PEFT layout, no torch needed).

`write_lora_dir(directory, spec)` writes `adapter_config.json` and `adapter_model.safetensors`
with rank-`rank` A and B matrices for every layer's `q_proj` and `v_proj`, all zeros: the
adapter changes no output, but vLLM loads it, runs requests under its name and keys their KV
blocks apart from the base model's (`lora_name` in the KV-cache events). The safetensors file
is written by hand: an 8-byte little-endian header length, the JSON header, the raw data.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from bench.calibrate.tinymodel import ModelSpec

TARGETS = ("q_proj", "v_proj")
_F32 = 4  # bytes


def write_lora_dir(directory: Path, spec: ModelSpec, rank: int = 8, base: str = "") -> Path:
    """Write the adapter into `directory` (created); return it."""
    directory.mkdir(parents=True, exist_ok=True)
    head_dim = spec.hidden_size // spec.num_attention_heads
    out_features = {
        "q_proj": spec.num_attention_heads * head_dim,
        "v_proj": spec.num_key_value_heads * head_dim,
    }
    shapes: dict[str, list[int]] = {}
    for layer in range(spec.num_hidden_layers):
        for module in TARGETS:
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{module}"
            shapes[f"{prefix}.lora_A.weight"] = [rank, spec.hidden_size]
            shapes[f"{prefix}.lora_B.weight"] = [out_features[module], rank]
    header: dict[str, object] = {}
    offset = 0
    for name, shape in shapes.items():
        size = shape[0] * shape[1] * _F32
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the data starts 8-byte aligned
    with (directory / "adapter_model.safetensors").open("wb") as out:
        out.write(struct.pack("<Q", len(raw)))
        out.write(raw)
        out.write(bytes(offset))
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base,
        "r": rank,
        "lora_alpha": 2 * rank,
        "lora_dropout": 0.0,
        "target_modules": list(TARGETS),
        "bias": "none",
        "fan_in_fan_out": False,
        "modules_to_save": None,
        "use_rslora": False,
        "use_dora": False,
    }
    (directory / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")
    return directory
