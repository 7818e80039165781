"""A request's P/D leg, read from its body by the replica's role and protocol."""

from __future__ import annotations

from typing import Any

import pytest

from sim.emulator import openai_api as api
from sim.emulator.disagg.legs import Leg, LegKind, parse_leg
from sim.emulator.disagg.settings import PDSettings

VLLM = PDSettings("both", "vllm")
P_PARAMS = {
    "do_remote_prefill": True,
    "do_remote_decode": False,
    "remote_block_ids": [1, 2],
    "remote_engine_id": "e-1",
    "remote_request_id": "cmpl-x-0",
    "remote_host": "10.0.0.5",
    "remote_port": 8001,
    "tp_size": 1,
}


@pytest.mark.parametrize("role", ["both", "prefill", "decode"])
def test_a_vllm_replica_plays_either_side_as_the_params_say(role: str) -> None:
    settings = PDSettings(role, "vllm")  # type: ignore[arg-type]
    to_p = {"kv_transfer_params": {"do_remote_decode": True, "do_remote_prefill": False}}
    assert parse_leg(to_p, settings) == Leg(LegKind.VLLM_PREFILL)
    to_d = {"kv_transfer_params": P_PARAMS}
    assert parse_leg(to_d, settings) == Leg(
        LegKind.VLLM_DECODE, "cmpl-x-0", "http://10.0.0.5:8001", "e-1"
    )
    assert parse_leg({"prompt": "x"}, settings) is None
    assert parse_leg({"kv_transfer_params": None}, settings) is None


def test_vllm_decode_params_without_an_address_are_a_load_to_fail() -> None:
    leg = parse_leg({"kv_transfer_params": {**P_PARAMS, "remote_host": None}}, VLLM)
    assert leg == Leg(LegKind.VLLM_DECODE)
    ipv6 = parse_leg({"kv_transfer_params": {**P_PARAMS, "remote_host": "::1"}}, VLLM)
    assert ipv6 is not None and ipv6.peer == "http://[::1]:8001"


SGLANG_BODY: dict[str, Any] = {
    "bootstrap_host": "10.0.0.5",
    "bootstrap_port": 8998,
    "bootstrap_room": 12345,
}


def test_sglang_bootstrap_fields_make_prefill_and_decode_legs() -> None:
    p = parse_leg(SGLANG_BODY, PDSettings("prefill", "sglang"))
    assert p == Leg(LegKind.SGLANG_PREFILL, key="12345")
    d = parse_leg(SGLANG_BODY, PDSettings("decode", "sglang"))
    assert d == Leg(LegKind.SGLANG_DECODE, key="12345", peer="http://10.0.0.5:8998")
    # A server without a disaggregation mode serves the request whole.
    assert parse_leg(SGLANG_BODY, PDSettings("both", "sglang")) is None
    # Each replica reads its own protocol's fields only.
    assert parse_leg(SGLANG_BODY, VLLM) is None
    assert parse_leg({"kv_transfer_params": P_PARAMS}, PDSettings("decode", "sglang")) is None


@pytest.mark.parametrize(
    ("body", "role", "message"),
    [
        ({**SGLANG_BODY, "bootstrap_room": [1, 2]}, "prefill", "batches are not emulated"),
        ({**SGLANG_BODY, "bootstrap_room": True}, "decode", "one integer"),
        ({"bootstrap_room": 1}, "decode", "needs bootstrap_host and bootstrap_port"),
    ],
)
def test_unusable_bootstrap_fields_are_a_bad_request(
    body: dict[str, Any], role: str, message: str
) -> None:
    with pytest.raises(api.ApiError, match=message) as caught:
        parse_leg(body, PDSettings(role, "sglang"))  # type: ignore[arg-type]
    assert caught.value.status == 400


def test_settings_check_their_values_and_say_what_a_replica_serves() -> None:
    with pytest.raises(ValueError, match="unknown P/D role"):
        PDSettings("proxy", "vllm")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lease_s"):
        PDSettings(lease_s=0)
    assert PDSettings("prefill", "sglang").serves_bootstrap
    assert not PDSettings("prefill", "vllm").serves_bootstrap
    assert not PDSettings("decode", "sglang").caches_prefixes
    assert PDSettings("decode", "sglang", decode_prefix_cache=True).caches_prefixes
    assert PDSettings("decode", "vllm").caches_prefixes
