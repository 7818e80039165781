"""The `objectives:` and `rewrites:` sections: defaults, validation naming the field path."""

from __future__ import annotations

import pytest

from routing.config.schema import ConfigError, parse_config


def test_objectives_and_rewrites_parse() -> None:
    cfg = parse_config(
        {
            "objectives": [{"name": "premium", "priority": 1}, {"name": "plain"}],
            "rewrites": [
                {"models": ["food"], "targets": [{"model": "v1", "weight": 3}, {"model": "v2"}]},
                {"targets": [{"model": "base"}]},
            ],
        }
    )
    assert [(o.name, o.priority) for o in cfg.objectives] == [("premium", 1), ("plain", 0)]
    first, generic = cfg.rewrites
    assert first.models == ["food"] and [(t.model, t.weight) for t in first.targets] == [
        ("v1", 3),
        ("v2", 1),
    ]
    assert generic.models == []


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        ({"objectives": [{"name": "a"}, {"name": "a", "priority": 2}]}, "two objectives"),
        ({"objectives": [{"name": ""}]}, "objectives.0.name"),
        ({"rewrites": [{"models": ["m"], "targets": []}]}, "rewrites.0.targets"),
        ({"rewrites": [{"targets": [{"model": "x", "weight": 0}]}]}, "a weight above 0"),
        ({"rewrites": [{"targets": [{"model": "x", "weight": -1}]}]}, "rewrites.0.targets.0"),
        ({"discovery": {"objects_api": "llm-d.ai"}}, "discovery.objects_api"),
        ({"admission": {"sheddable_holdback": 1.0}}, "admission.sheddable_holdback"),
    ],
)
def test_bad_entries_are_refused_naming_the_field(raw: object, where: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    assert where in str(info.value)


def test_the_objects_api_can_be_switched_off_or_to_the_older_group() -> None:
    assert parse_config({"discovery": {"objects_api": None}}).discovery.objects_api is None
    older = {"discovery": {"objects_api": "inference.networking.x-k8s.io/v1alpha2"}}
    assert parse_config(older).discovery.objects_api == "inference.networking.x-k8s.io/v1alpha2"
