from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sim.engine.model import EngineModel
from sim.engine.profiles import (
    PROFILES,
    get_profile,
    load_profile_file,
    load_profiles,
    parse_profile,
)
from sim.engine.types import FrontEnd, KVTransferLink, StepFeatures

MOCKER_KV_TOKENS = 16384 * 64


def _mocker_prefill_s(tokens: int) -> float:
    return (4.21e-7 * tokens**2 + 0.01518 * tokens + 16.5) / 1000


def _mocker_decode_s(occupancy: float) -> float:
    return (-25.74 * occupancy**2 + 54.01 * occupancy + 5.74) / 1000


def _profile_json(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "vllm-cpu-tiny",
        "description": "measured",
        "source": "fitted",
        "config": {"block_size": 32, "num_blocks": 128, "max_num_seqs": 8},
        "timing": {
            "overhead_s": 0.004,
            "prefill_token_s": 1e-5,
            "attention_s": 0,
            "decode_seq_s": 2e-4,
            "kv_read_token_s": 1e-7,
        },
    }
    data.update(overrides)
    return data


def test_builtin_profiles_are_listed_and_usable() -> None:
    assert {"h100-llama3-8b", "a100-llama3-8b", "demo"} <= set(PROFILES)
    for name, profile in PROFILES.items():
        assert profile.name == name
        assert profile.description and profile.source
        EngineModel.from_profile(profile)


def test_unknown_profile_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match="h100-llama3-8b"):
        get_profile("b200")


def test_h100_matches_the_mocker_prefill_up_to_its_constant() -> None:
    timing = get_profile("h100-llama3-8b").timing
    for tokens in (128, 1024, 8192):
        ours = timing.step_time(StepFeatures(prefill_tokens=tokens, attention_pairs=tokens**2))
        # Same T² and T terms; the constant is the shared 10.03 ms step overhead.
        assert ours - timing.overhead_s == pytest.approx(_mocker_prefill_s(tokens) - 0.0165)


def test_h100_decode_is_the_mocker_curve_linearised() -> None:
    profile = get_profile("h100-llama3-8b")
    assert profile.config.num_blocks * profile.config.block_size == MOCKER_KV_TOKENS
    for occupancy in (0.0, 0.25, 0.5, 0.75, 1.0):
        kv_tokens = int(occupancy * MOCKER_KV_TOKENS)
        ours = profile.timing.step_time(StepFeatures(decode_seqs=64, kv_tokens_read=kv_tokens))
        assert abs(ours - _mocker_decode_s(occupancy)) < 0.0045  # a line's worst error: 4.3 ms


def test_a100_is_slower_than_h100() -> None:
    features = StepFeatures(prefill_tokens=2000, attention_pairs=4_000_000, decode_seqs=32,
                            kv_tokens_read=64_000)  # fmt: skip
    h100 = get_profile("h100-llama3-8b").timing.step_time(features)
    a100 = get_profile("a100-llama3-8b").timing.step_time(features)
    assert 1.5 * h100 < a100 < 3.5 * h100


def test_demo_makes_cache_hits_visible() -> None:
    timing = get_profile("demo").timing
    cold = timing.step_time(StepFeatures(prefill_tokens=2000, attention_pairs=2000 * 2000))
    warm = timing.step_time(StepFeatures(prefill_tokens=16, attention_pairs=16 * 2000))
    assert cold > 20 * warm


def test_load_profile_file_reads_json(tmp_path: Path) -> None:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(_profile_json()), encoding="utf-8")
    profile = load_profile_file(path)
    assert profile.name == "vllm-cpu-tiny"
    assert profile.config.block_size == 32
    assert profile.config.max_num_batched_tokens == 8192  # unspecified: EngineConfig default
    assert profile.timing.attention_s == 0


def test_profile_files_next_to_the_module_join_the_registry(tmp_path: Path) -> None:
    (tmp_path / "tiny.json").write_text(json.dumps(_profile_json()), encoding="utf-8")
    profiles = load_profiles(tmp_path)
    assert profiles["vllm-cpu-tiny"].config.num_blocks == 128
    assert "demo" in profiles
    (tmp_path / "clash.json").write_text(json.dumps(_profile_json(name="demo")), encoding="utf-8")
    with pytest.raises(ValueError, match="already defined"):
        load_profiles(tmp_path)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (_profile_json(extra=1), r"profile: unknown field\(s\) extra"),
        ({"name": "x"}, r"profile: missing field\(s\) config, description, source, timing"),
        (_profile_json(config={"block_sise": 16}), r"profile\.config: unknown field"),
        (_profile_json(config={"num_blocks": "many"}), r"profile\.config\.num_blocks"),
        (_profile_json(config={"num_blocks": 0}), r"profile\.config\.num_blocks"),
        (_profile_json(config={"enable_prefix_caching": 1}), r"enable_prefix_caching"),
        (_profile_json(timing={"overhead_s": 0.1}), r"profile: .*prefill_token_s"),
        (_profile_json(timing={**_profile_json()["timing"], "attention_s": -1}), "attention_s"),
        (_profile_json(name=3), r"profile\.name"),
        (_profile_json(frontend={"frontend_s": -0.1}), r"profile\.frontend\.frontend_s"),
        (_profile_json(frontend={"queue_s": 0.1}), r"profile\.frontend: unknown field"),
        (_profile_json(transfer={"bandwidth_bytes_s": 0}), r"transfer\.bandwidth_bytes_s"),
        (_profile_json(transfer={"bytes_per_token": 1.5}), r"transfer\.bytes_per_token"),
        (_profile_json(transfer={"rtt_s": 1}), r"profile\.transfer: unknown field"),
        ([], "expected an object"),
    ],
)
def test_parse_profile_names_the_bad_field(data: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_profile(data)


def test_the_front_end_is_optional_and_read_when_given() -> None:
    assert parse_profile(_profile_json()).frontend == FrontEnd()
    given = {"request_overhead_s": 0.02, "frontend_s": 0.005}
    assert parse_profile(_profile_json(frontend=given)).frontend == FrontEnd(0.02, 0.005)
    measured = get_profile("vllm-cpu-tiny").frontend
    # Fitted 2026-12-04: a burst's wait in the API server is shared work, not a FIFO.
    assert measured.request_overhead_s > 0 and measured.frontend_s >= 0


def test_the_transfer_link_is_optional_and_read_when_given() -> None:
    assert parse_profile(_profile_json()).transfer == KVTransferLink()
    given = {"bandwidth_bytes_s": 1e9, "latency_s": 0.001, "bytes_per_token": 512}
    assert parse_profile(_profile_json(transfer=given)).transfer == KVTransferLink(1e9, 0.001, 512)


def test_context_attention_is_optional_and_zero_in_the_builtin_profiles() -> None:
    assert parse_profile(_profile_json()).timing.context_attention_s == 0.0
    timing = {**_profile_json()["timing"], "context_attention_s": 1e-8}
    assert parse_profile(_profile_json(timing=timing)).timing.context_attention_s == 1e-8
    for name in ("h100-llama3-8b", "a100-llama3-8b", "demo"):
        assert get_profile(name).timing.context_attention_s == 0.0
    # Measured (2026-12-04): a prefill token's pairs with cached context cost more than
    # the in-chunk pairs that `attention_s` prices.
    assert get_profile("vllm-cpu-tiny").timing.context_attention_s > 0


def test_load_profile_file_reports_bad_json(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text("{", encoding="utf-8")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_profile_file(path)
