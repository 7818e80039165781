from __future__ import annotations

import pytest

from routing.config.schema import ConfigError, parse_config
from routing.config.yaml_loader import load_yaml


def test_tuning_is_off_by_default_and_yaml_off_means_off() -> None:
    assert parse_config({}).tuning.mode == "off"
    raw = load_yaml(b"tuning: {mode: off, seeds: 2}\n")
    assert parse_config(raw).tuning.mode == "off"
    assert parse_config({"tuning": {"mode": "apply"}}).tuning.mode == "apply"


@pytest.mark.parametrize(
    ("field", "value"),
    [("mode", "on"), ("seeds", 0), ("min_gain", 1.0), ("confidence", 0), ("interval_s", 0)],
)
def test_bad_tuning_fields_are_named(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=f"tuning.{field}"):
        parse_config({"tuning": {field: value}})
