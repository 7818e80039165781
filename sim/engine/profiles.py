"""Named engine profiles: capacity and step-time coefficients, each with its derivation.

Built in: `h100-llama3-8b` (from the Dynamo mocker's published formulas), `a100-llama3-8b`
(the same, scaled by public hardware ratios) and `demo` (synthetic, for live demos on a
small machine). Measured profiles are JSON files in `profiles/` next to this module, with
the fields of `EngineProfile` (optional: `frontend`, the API server's cost, `FrontEnd`;
`transfer`, the P/D KV transfer link, `KVTransferLink`, whose defaults every built-in uses);
each one found is added to `PROFILES` under its `name`. The built-in profiles are bare
engines (no front-end cost): the published formulas they come from have none.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from types import MappingProxyType
from typing import Any

from sim.engine.types import (
    EngineConfig,
    EngineProfile,
    FrontEnd,
    KVTransferLink,
    StepTimeCoefficients,
)

PROFILE_DIR = Path(__file__).with_name("profiles")

# Dynamo mocker: 16,384 blocks of 64 tokens = 1,048,576 KV tokens.
_MOCKER_KV_TOKENS = 16384 * 64

_H100_SOURCE = """\
Derived from the Dynamo mocker's published default timing (kvgate REFERENCE.md §5):
prefill_ms = 4.21e-7·T² + 0.01518·T + 16.5 (T: the batch's uncached prompt tokens) and
decode_ms = −25.74·u² + 54.01·u + 5.74 (u: KV occupancy, 0–1).
- attention_s = 4.21e-10 s per pair: the feature A sums chunk_len × context after the chunk,
  so a fresh prompt of T tokens in one chunk has A = T·T, and 4.21e-7 ms·T² = 4.21e-10 s·A.
  (The mocker squares the whole batch's T; A is per request, so batches of several short
  prompts come out cheaper here, which is what attention costs.)
- prefill_token_s = 1.518e-5 s: the linear prefill term, 0.01518 ms per uncached token.
- decode: the quadratic in u, least-squares fitted by a line on [0, 1] (u² ≈ u − 1/6), is
  28.27·u + 10.03 ms. u = K / 1,048,576 (the mocker's 16,384 × 64-token cache), so
  kv_read_token_s = 28.27e-3 / 1,048,576 = 2.696e-8 s per context token read.
- overhead_s = 10.03 ms: the decode intercept, paid by every step. A prefill-only step is
  thus 6.5 ms cheaper than the mocker's 16.5 ms constant; decode steps are far more common.
- decode_seq_s = 0: the mocker's decode time depends on occupancy only, not batch size.
Capacity: the mocker's 16,384 × 64 tokens as 65,536 blocks of 16 (vLLM's GPU default block
size); max_num_seqs 256 and max_num_batched_tokens 8192 as in the mocker; max_model_len 8192
(Llama 3 8B's context)."""

_H100 = StepTimeCoefficients(
    overhead_s=10.03e-3,
    prefill_token_s=1.518e-5,
    attention_s=4.21e-10,
    decode_seq_s=0.0,
    kv_read_token_s=28.27e-3 / _MOCKER_KV_TOKENS,
)

_LLAMA3_8B_80GB = EngineConfig(
    block_size=16,
    num_blocks=_MOCKER_KV_TOKENS // 16,
    max_num_seqs=256,
    max_num_batched_tokens=8192,
    max_model_len=8192,
)

# A100 80GB vs H100 SXM, from the vendors' datasheets: dense BF16 312 vs 989 TFLOPS
# (compute-bound prefill, ×3.17); HBM 2.0 vs 3.35 TB/s (bandwidth-bound decode, ×1.68).
_A100_COMPUTE_FACTOR = 989 / 312
_A100_BANDWIDTH_FACTOR = 3.35 / 2.0

_A100_SOURCE = f"""\
The h100-llama3-8b profile scaled by datasheet ratios, an assumption rather than a
measurement: compute-bound terms (prefill_token_s, attention_s) × {_A100_COMPUTE_FACTOR:.2f}
(dense BF16 989 vs 312 TFLOPS), bandwidth-bound terms (overhead_s, which is mostly reading the
16 GB of weights once per step, and kv_read_token_s) × {_A100_BANDWIDTH_FACTOR:.2f}
(HBM 3.35 vs 2.0 TB/s). Same 80 GB, so the same KV capacity and scheduler limits."""

_A100 = StepTimeCoefficients(
    overhead_s=_H100.overhead_s * _A100_BANDWIDTH_FACTOR,
    prefill_token_s=_H100.prefill_token_s * _A100_COMPUTE_FACTOR,
    attention_s=_H100.attention_s * _A100_COMPUTE_FACTOR,
    decode_seq_s=0.0,
    kv_read_token_s=_H100.kv_read_token_s * _A100_BANDWIDTH_FACTOR,
)

_DEMO_SOURCE = """\
Synthetic, chosen by hand, not measured: slow enough that an emulated replica on a 2-core
machine shows prefix-cache-dependent TTFT at a few requests per second. 0.2 ms per uncached
prompt token (a 2,000-token prompt: ~0.45 s cold, ~12 ms warm), 8 ms per step, 0.1 ms per
decoding sequence, 1e-8 s per attention pair and per KV token read; 640 blocks of 16
tokens (10,240 tokens: the demo's 8 tenants' system prompts do not all fit on one replica,
so where a tenant's requests go decides the hit rate); 64 sequences, 2,048 batched tokens so
long prompts are chunked and queues form."""

_BUILTIN = (
    EngineProfile(
        name="h100-llama3-8b",
        description="Llama 3 8B on one H100 80GB (Dynamo mocker defaults, linearised)",
        source=_H100_SOURCE,
        config=_LLAMA3_8B_80GB,
        timing=_H100,
    ),
    EngineProfile(
        name="a100-llama3-8b",
        description="Llama 3 8B on one A100 80GB (H100 profile scaled by datasheet ratios)",
        source=_A100_SOURCE,
        config=_LLAMA3_8B_80GB,
        timing=_A100,
    ),
    EngineProfile(
        name="demo",
        description="Synthetic slow engine with a small cache, for demos and examples",
        source=_DEMO_SOURCE,
        config=EngineConfig(
            block_size=16,
            num_blocks=640,
            max_num_seqs=64,
            max_num_batched_tokens=2048,
            max_model_len=8192,
        ),
        timing=StepTimeCoefficients(
            overhead_s=8e-3,
            prefill_token_s=2e-4,
            attention_s=1e-8,
            decode_seq_s=1e-4,
            kv_read_token_s=1e-8,
        ),
    ),
)


def _fields_of(cls: type, data: Any, where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected an object")
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {', '.join(unknown)}")
    return data


def parse_profile(data: Any, where: str = "profile") -> EngineProfile:
    """Build a profile from decoded JSON; ValueError naming the field path on a mistake."""
    top = dict(_fields_of(EngineProfile, data, where))
    missing = sorted({f.name for f in fields(EngineProfile)} - set(top) - _OPTIONAL)
    if missing:
        raise ValueError(f"{where}: missing field(s) {', '.join(missing)}")
    for name in ("name", "description", "source"):
        if not isinstance(top[name], str):
            raise ValueError(f"{where}.{name}: expected a string")
    try:
        config = EngineConfig(**_fields_of(EngineConfig, top["config"], f"{where}.config"))
        timing = StepTimeCoefficients(
            **_fields_of(StepTimeCoefficients, top["timing"], f"{where}.timing")
        )
        frontend = FrontEnd(**_fields_of(FrontEnd, top.get("frontend", {}), f"{where}.frontend"))
        transfer = KVTransferLink(
            **_fields_of(KVTransferLink, top.get("transfer", {}), f"{where}.transfer")
        )
    except TypeError as exc:  # a missing timing coefficient
        raise ValueError(f"{where}: {exc}") from None
    _check_numbers(config, f"{where}.config")
    _check_numbers(timing, f"{where}.timing")
    _check_numbers(frontend, f"{where}.frontend")
    _check_numbers(transfer, f"{where}.transfer")
    if transfer.bandwidth_bytes_s <= 0:
        raise ValueError(f"{where}.transfer.bandwidth_bytes_s: expected a positive number")
    return EngineProfile(
        top["name"], top["description"], top["source"], config, timing, frontend, transfer
    )


_OPTIONAL = {"frontend", "transfer"}
_Numbers = EngineConfig | StepTimeCoefficients | FrontEnd | KVTransferLink


def _check_numbers(value: _Numbers, where: str) -> None:
    """JSON types per field (types.py annotations are strings) and sign: no negative cost."""
    for f in fields(value):
        item = getattr(value, f.name)
        if f.type == "bool":
            ok = isinstance(item, bool)
        elif f.type == "int":
            ok = isinstance(item, int) and not isinstance(item, bool) and item > 0
        else:
            ok = isinstance(item, int | float) and not isinstance(item, bool) and item >= 0
        if not ok:
            raise ValueError(f"{where}.{f.name}: expected a valid {f.type}, got {item!r}")


def load_profile_file(path: str | Path) -> EngineProfile:
    """Read one profile from a JSON file with the fields of `EngineProfile`."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON: {exc}") from None
    return parse_profile(data, where=str(path))


def load_profiles(directory: Path = PROFILE_DIR) -> Mapping[str, EngineProfile]:
    """The built-in profiles plus every `*.json` profile in `directory`, by name."""
    profiles = {p.name: p for p in _BUILTIN}
    for path in sorted(directory.glob("*.json")):
        profile = load_profile_file(path)
        if profile.name in profiles:
            raise ValueError(f"{path}: profile {profile.name!r} is already defined")
        profiles[profile.name] = profile
    return MappingProxyType(profiles)


PROFILES: Mapping[str, EngineProfile] = load_profiles()


def get_profile(name: str) -> EngineProfile:
    try:
        return PROFILES[name]
    except KeyError:
        raise KeyError(
            f"unknown engine profile {name!r}; known: {', '.join(sorted(PROFILES))}"
        ) from None
