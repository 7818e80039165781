from __future__ import annotations

import random
from typing import Any

import pytest
from pydantic import ValidationError

from routing import PluginRegistry, RoutingRequest
from routing.config.profiles import (
    BUILTIN_PROFILES,
    PluginSpec,
    ProfileSpec,
    RoutingSection,
    effective_profiles,
)
from routing.registry import PluginError
from scoring.builtin import register_builtins
from scoring.scorers.session_affinity import SessionAffinityScorer
from scoring.stack import build_scheduler
from scoring.state.prefix_index import PrefixIndex
from scoring.state.ttft_model import OnlineTtftModel, TtftCoefficients
from scoring.stateful_plugins import register_stateful_plugins
from tests.unit.scoring.helpers import context, endpoint

MAX_SCORE = {"type": "max-score-picker"}


def _registry() -> PluginRegistry:
    registry = PluginRegistry()
    register_builtins(registry)
    register_stateful_plugins(
        registry, PrefixIndex(), OnlineTtftModel(TtftCoefficients(0.02, 2e-4))
    )
    return registry


def _scheduler(raw: dict[str, Any], seed: int = 0) -> Any:
    section = RoutingSection.model_validate(raw)
    return build_scheduler(section, _registry(), lambda: 0.0, random.Random(seed))


def _error_locs(exc: ValidationError) -> list[str]:
    return [".".join(str(part) for part in err["loc"]) for err in exc.errors()]


def test_defaults() -> None:
    section = RoutingSection()
    assert section.policy == "prefix-aware"
    assert section.allow_policy_header is False  # a client must not pick the profile
    assert section.session_header == "x-session-id"
    assert section.profiles == {}


def test_builtin_profiles_wiring() -> None:
    def wiring(spec: ProfileSpec) -> tuple[list[tuple[str, float]], str]:
        return [(s.type, s.weight) for s in spec.scorers], spec.picker.type

    assert {name: wiring(spec) for name, spec in BUILTIN_PROFILES.items()} == {
        "round-robin": ([], "round-robin-picker"),
        "random": ([], "random-picker"),
        "least-in-flight": ([("in-flight-scorer", 1.0)], "max-score-picker"),
        "power-of-two": ([("in-flight-scorer", 1.0)], "power-of-two-picker"),
        "session": (
            [("session-affinity-scorer", 10.0), ("in-flight-scorer", 1.0)],
            "max-score-picker",
        ),
        "least-load": (
            [
                ("queue-depth-scorer", 2.0),
                ("kv-utilization-scorer", 1.0),
                ("in-flight-scorer", 2.0),
            ],
            "max-score-picker",
        ),
        "prefix-aware": (
            [
                ("estimated-ttft-scorer", 4.0),
                ("prefix-match-scorer", 2.0),
                ("in-flight-scorer", 1.0),
                ("kv-utilization-scorer", 1.0),
                ("cache-headroom-scorer", 1.0),
            ],
            "max-score-picker",
        ),
        "precise-prefix": (
            [
                ("estimated-ttft-scorer", 4.0),
                ("prefix-match-scorer", 2.0),
                ("in-flight-scorer", 1.0),
                ("kv-utilization-scorer", 1.0),
                ("cache-headroom-scorer", 1.0),
            ],
            "max-score-picker",
        ),
        "estimated-ttft": ([("estimated-ttft-scorer", 1.0)], "max-score-picker"),
    }


def test_the_default_prices_evictions() -> None:
    [ttft] = [s for s in BUILTIN_PROFILES["prefix-aware"].scorers if s.type.startswith("est")]
    assert ttft.params == {"eviction_weight": 0.5}
    assert BUILTIN_PROFILES["estimated-ttft"].scorers[0].params == {}


def test_plugin_name_defaults_to_type() -> None:
    assert PluginSpec(type="in-flight-scorer").name == "in-flight-scorer"
    assert PluginSpec.model_validate({"type": "t", "name": "n"}).name == "n"


@pytest.mark.parametrize(
    ("raw", "loc"),
    [
        ({"polcy": "random"}, "polcy"),
        ({"profiles": {"p": {"picker": MAX_SCORE, "scorer": []}}}, "profiles.p.scorer"),
        (
            {"profiles": {"p": {"picker": MAX_SCORE, "scorers": [{"type": "t", "wieght": 2}]}}},
            "profiles.p.scorers.0.wieght",
        ),
        ({"profiles": {"p": {"scorers": []}}}, "profiles.p.picker"),
        (
            {"profiles": {"p": {"picker": MAX_SCORE, "scorers": [{"type": "t", "weight": -1}]}}},
            "profiles.p.scorers.0.weight",
        ),
        (
            {"profiles": {"p": {"picker": MAX_SCORE, "scorers": [{"type": "t", "weight": "inf"}]}}},
            "profiles.p.scorers.0.weight",
        ),
        ({"profiles": {"p": {"picker": {"type": ""}}}}, "profiles.p.picker.type"),
    ],
)
def test_errors_name_the_field_path(raw: dict[str, Any], loc: str) -> None:
    with pytest.raises(ValidationError) as info:
        RoutingSection.model_validate(raw)
    assert loc in _error_locs(info.value)


def test_unknown_policy_names_the_available_profiles() -> None:
    with pytest.raises(ValidationError, match=r"'nope' is not a profile.*least-in-flight.*session"):
        RoutingSection(policy="nope")


def test_user_profile_can_be_the_policy_and_replace_a_builtin() -> None:
    custom = {"picker": {"type": "random-picker"}}
    section = RoutingSection.model_validate(
        {"policy": "mine", "profiles": {"mine": custom, "session": custom}}
    )
    profiles = effective_profiles(section)
    assert set(profiles) == {*BUILTIN_PROFILES, "mine"}
    assert profiles["session"].picker.type == "random-picker"
    assert BUILTIN_PROFILES["session"].picker.type == "max-score-picker"


def test_duplicate_scorer_names_are_rejected() -> None:
    scorers: list[dict[str, Any]] = [
        {"type": "in-flight-scorer"},
        {"type": "in-flight-scorer", "weight": 2},
    ]
    with pytest.raises(ValidationError, match=r"duplicate scorer name.*'in-flight-scorer'"):
        RoutingSection.model_validate(
            {"profiles": {"p": {"scorers": scorers, "picker": MAX_SCORE}}}
        )
    scorers[1]["name"] = "load-again"
    RoutingSection.model_validate({"profiles": {"p": {"scorers": scorers, "picker": MAX_SCORE}}})


def test_weight_on_a_picker_is_rejected() -> None:
    with pytest.raises(ValidationError, match="picker 'max-score-picker': 'weight' only applies"):
        ProfileSpec.model_validate({"picker": {**MAX_SCORE, "weight": 2}})


def test_session_header_is_lower_cased() -> None:
    assert RoutingSection(session_header="X-Conversation").session_header == "x-conversation"


def test_build_scheduler_builds_every_profile_with_the_policy_as_default() -> None:
    scheduler = _scheduler({"policy": "power-of-two"})
    assert set(scheduler.profiles) == set(BUILTIN_PROFILES)
    assert scheduler.default_profile == "power-of-two"
    session = scheduler.profiles["session"]
    assert [(ws.scorer.name, ws.weight) for ws in session.scorers] == [
        ("session-affinity-scorer", 10.0),
        ("in-flight-scorer", 1.0),
    ]
    assert isinstance(session.scorers[0].scorer, SessionAffinityScorer)


def test_each_profile_gets_its_own_plugin_instances() -> None:
    custom = {"picker": {"type": "round-robin-picker"}}
    scheduler = _scheduler({"profiles": {"rr2": custom}})
    assert scheduler.profiles["rr2"].picker is not scheduler.profiles["round-robin"].picker


@pytest.mark.parametrize(
    ("profile", "match"),
    [
        ({"picker": {"type": "no-such-picker"}}, "profile 'bad': unknown picker type"),
        (
            {"scorers": [{"type": "no-such-scorer"}], "picker": MAX_SCORE},
            "profile 'bad': unknown scorer type 'no-such-scorer'",
        ),
        (
            {"filters": [{"type": "no-such-filter"}], "picker": MAX_SCORE},
            "profile 'bad': unknown filter type",
        ),
        (
            {"picker": {"type": "max-score-picker", "params": {"x": 1}}},
            "profile 'bad': picker 'max-score-picker': unknown parameter",
        ),
        (
            {"picker": {"type": "softmax-picker", "params": {"temperature": 0}}},
            "profile 'bad': picker 'softmax-picker': parameter 'temperature' must be a finite "
            "number and > 0, got 0",
        ),
        (
            {
                "filters": [{"type": "saturation-filter", "params": {"kv_threshold": True}}],
                "picker": MAX_SCORE,
            },
            "profile 'bad': filter 'saturation-filter': parameter 'kv_threshold' must be a "
            "finite number and >= 0 and <= 1, got True",
        ),
    ],
)
def test_plugin_errors_name_the_profile(profile: dict[str, Any], match: str) -> None:
    with pytest.raises(PluginError, match=match):
        _scheduler({"profiles": {"bad": profile}})


def test_build_fails_if_builtins_were_not_registered() -> None:
    with pytest.raises(PluginError, match=r"profile '.*': unknown"):
        build_scheduler(RoutingSection(), PluginRegistry(), lambda: 0.0, random.Random(0))


def test_least_in_flight_targets_the_idlest() -> None:
    endpoints = [endpoint("a", 5), endpoint("b", 1), endpoint("c", 9)]
    decision = _scheduler({"policy": "least-in-flight"}).schedule(
        RoutingRequest(model="m"), endpoints
    )
    assert decision.profile == "least-in-flight"
    assert decision.ranked == ("b", "a", "c")


def test_session_profile_sticks_with_a_key_and_balances_without() -> None:
    scheduler = _scheduler({"policy": "session"})
    endpoints = [endpoint(f"ep-{i}", in_flight=i) for i in range(4)]
    sticky = {scheduler.schedule(RoutingRequest(model="m", session_key="s1"), endpoints).target}
    loaded = [endpoint(e.id, in_flight=10 - i) for i, e in enumerate(endpoints)]
    sticky.add(scheduler.schedule(RoutingRequest(model="m", session_key="s1"), loaded).target)
    assert len(sticky) == 1
    scores = SessionAffinityScorer("a").score(
        RoutingRequest(model="m", session_key="s1"), endpoints, context()
    )
    assert sticky == {max(scores, key=lambda i: scores[i])}
    assert scheduler.schedule(RoutingRequest(model="m"), endpoints).target == "ep-0"
    assert scheduler.schedule(RoutingRequest(model="m"), loaded).target == "ep-3"


def test_round_robin_profile_rotates() -> None:
    scheduler = _scheduler({"policy": "round-robin"})
    endpoints = [endpoint("b"), endpoint("a")]
    targets = [scheduler.schedule(RoutingRequest(model="m"), endpoints).target for _ in range(4)]
    assert targets == ["a", "b", "a", "b"]
