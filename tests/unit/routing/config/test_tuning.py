from __future__ import annotations

import pytest

from routing.config.schema import ConfigError, parse_config
from routing.config.yaml_loader import load_yaml


def test_tuning_is_off_by_default_and_yaml_off_means_off() -> None:
    assert parse_config({}).tuning.mode == "off"
    raw = load_yaml(b"tuning: {mode: off, seeds: 2}\n")
    assert parse_config(raw).tuning.mode == "off"
    assert parse_config({"tuning": {"mode": "apply"}}).tuning.mode == "apply"


def test_the_lead_in_is_a_window_long_unless_set() -> None:
    assert parse_config({"tuning": {"window_s": 30}}).tuning.lead_in == 30.0
    assert parse_config({"tuning": {"window_s": 30, "lead_in_s": 0}}).tuning.lead_in == 0.0
    assert parse_config({"tuning": {"lead_in_s": 45}}).tuning.lead_in == 45.0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("mode", "on"),
        ("seeds", 0),
        ("min_gain", 1.0),
        ("confidence", 0),
        ("interval_s", 0),
        ("lead_in_s", -1),
        ("lead_in_s", 1e6),
    ],
)
def test_bad_tuning_fields_are_named(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=f"tuning.{field}"):
        parse_config({"tuning": {field: value}})
