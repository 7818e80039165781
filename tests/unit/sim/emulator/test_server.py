"""The emulator's fleet settings: each replica's P/D role and SGLang bootstrap port."""

from __future__ import annotations

import pytest

from sim.emulator.server import EmulatorSettings, make_apps


def test_a_mixed_fleet_lists_prefill_replicas_first() -> None:
    settings = EmulatorSettings(replicas=3, prefill=1, decode=2, pd_protocol="sglang")
    assert settings.roles() == ["prefill", "decode", "decode"]
    assert [settings.pd_settings(i).role for i in range(3)] == settings.roles()
    assert EmulatorSettings(replicas=2, role="decode").roles() == ["decode", "decode"]
    assert EmulatorSettings(replicas=2).roles() == ["both", "both"]
    with pytest.raises(ValueError, match="replicas = prefill \\+ decode"):
        EmulatorSettings(replicas=4, prefill=1, decode=1)


@pytest.mark.parametrize(
    ("port", "bootstrap", "expected"),
    [
        (8001, None, [8998, 8999, None]),
        (0, None, [0, 0, None]),
        (8001, 0, [0, 0, None]),
        (8001, 9100, [9100, 9101, None]),
    ],
)
def test_sglang_prefill_replicas_get_consecutive_bootstrap_ports(
    port: int, bootstrap: int | None, expected: list[int | None]
) -> None:
    settings = EmulatorSettings(
        replicas=3, port=port, prefill=2, decode=1, pd_protocol="sglang", bootstrap_port=bootstrap
    )
    assert [settings.pd_settings(i).bootstrap_port for i in range(3)] == expected
    vllm = EmulatorSettings(replicas=3, port=port, prefill=2, decode=1)
    assert [vllm.pd_settings(i).bootstrap_port for i in range(3)] == [None] * 3


def test_an_sglang_decode_replica_keeps_no_prefix_cache_unless_asked() -> None:
    settings = EmulatorSettings(replicas=2, prefill=1, decode=1, pd_protocol="sglang")
    p, d = make_apps(settings)
    assert p.replica.profile.config.enable_prefix_caching
    assert not d.replica.profile.config.enable_prefix_caching
    cached = EmulatorSettings(
        replicas=2, prefill=1, decode=1, pd_protocol="sglang", decode_prefix_cache=True
    )
    assert make_apps(cached)[1].replica.profile.config.enable_prefix_caching
