from __future__ import annotations

from pathlib import Path

import pytest

from sim.replay.settings import PolicySpec, SimSettings, load_config


def test_the_gateway_config_file_gives_routing_and_scrape_settings(tmp_path: Path) -> None:
    path = tmp_path / "kvgate.yaml"
    path.write_text(
        "server: {port: 9000}\n"
        "backends: [{url: 'http://127.0.0.1:8001'}]\n"
        "health: {scrape_interval_s: 0.1, metrics_stale_after_s: 0.5, probe_interval_s: 3}\n"
        "routing:\n"
        "  policy: least-load\n"
        "  profiles:\n"
        "    mine: {scorers: [{type: in-flight-scorer}], picker: {type: max-score-picker}}\n"
    )
    settings = SimSettings(**load_config(path))
    assert settings.routing.policy == "least-load"
    assert "mine" in settings.routing.profiles
    assert (settings.scrape_interval_s, settings.stale_after_s) == (0.1, 0.5)
    assert load_config(None) == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("routing: {policy: nowhere}\n", "routing.policy: .*nowhere"),
        ("routing: {profiles: {x: {picker: {type: p}, bogus: 1}}}\n", "bogus"),
        ("health: {scrape_interval_s: -1}\n", "health.scrape_interval_s"),
        ("- a list\n", "valid dictionary"),
    ],
)
def test_a_bad_config_names_the_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_config(path)


def test_policy_names() -> None:
    assert PolicySpec.parse("oracle") == PolicySpec("oracle", "prefix-aware", True)
    assert PolicySpec.parse("oracle:least-load") == PolicySpec(
        "oracle:least-load", "least-load", True
    )
    assert PolicySpec.parse("round-robin") == PolicySpec("round-robin", "round-robin", False)


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="replicas"):
        SimSettings(replicas=0)
    with pytest.raises(ValueError, match="slo_ttft_s"):
        SimSettings(slo_ttft_s=0)
