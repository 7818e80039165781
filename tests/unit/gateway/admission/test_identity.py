"""Identity: tenant and band from the principal, the operator's headers, or defaults."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from gateway.admission.identity import Identifier, Identity
from gateway.admission.limits import format_duration
from gateway.errors import BadRequestError
from routing.admission.objectives import Objectives
from routing.config.schema import AdmissionSection


@dataclass(frozen=True)
class Principal:
    name: str
    tier: str
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None


def _who(headers: dict[str, str] | None = None, principal: Any = None, **section: Any) -> Identity:
    scope = {} if principal is None else {"kvgate.principal": principal}
    return Identifier(AdmissionSection(**section)).identify(scope, headers or {})


def test_defaults_anonymous_standard_and_headers_ignored() -> None:
    who = _who({"x-kvgate-priority": "critical", "x-tenant": "t"})
    assert who == Identity("anonymous", 1, "standard")


def test_a_principal_is_the_tenant_and_its_tier_the_band() -> None:
    who = _who(
        {"x-kvgate-priority": "sheddable"},
        Principal("team-a", "gold", 60, 10_000),
        tiers={"gold": "critical"},
        priority_header="X-KVGate-Priority",
    )
    assert who == Identity("team-a", 0, "critical", "team-a", 60, 10_000)


def test_the_priority_header_counts_only_when_the_operator_names_it() -> None:
    assert _who({"x-p": "Sheddable"}, priority_header="x-p").band_name == "sheddable"
    assert _who({"x-p": "critical"}, Principal("k", "free"), priority_header="x-p").band == 0


def test_an_unknown_priority_is_a_400_naming_the_bands() -> None:
    with pytest.raises(BadRequestError) as info:
        _who({"x-p": "urgent"}, priority_header="x-p")
    assert info.value.code == "unknown_priority"
    assert "critical, standard, sheddable" in info.value.message


def test_the_anonymous_principal_falls_back_to_the_tenant_header() -> None:
    who = _who(
        {"x-tenant": "acme" * 100}, Principal("anonymous", "default"), tenant_header="X-Tenant"
    )
    assert who.key is None and who.tenant == ("acme" * 100)[:128]


def test_bands_without_standard_default_to_the_last() -> None:
    assert _who(bands=["high", "low"]).band_name == "low"


def test_limits_that_are_not_positive_integers_are_no_limits() -> None:
    who = _who(principal=Principal("k", "t", requests_per_minute=0, tokens_per_minute=None))
    assert who.requests_per_minute is None and who.tokens_per_minute is None


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.0123, "13ms"), (1.0, "1s"), (1.5, "1.5s"), (59.9, "59.9s"), (60.0, "1m0s"), (361, "6m1s")],
)
def test_durations_are_written_as_openai_writes_them(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def _objective_who(headers: dict[str, str], **section: Any) -> Identity:
    table = Objectives({"premium": 1, "standard-chat": 0, "batch": -1})
    return Identifier(AdmissionSection(**section), table).identify({}, headers)


@pytest.mark.parametrize(
    ("header", "name", "band"),
    [
        ("x-llm-d-inference-objective", "premium", "critical"),
        ("x-gateway-inference-objective", "premium", "critical"),  # the old name
        ("x-llm-d-inference-objective", "standard-chat", "standard"),
        ("x-llm-d-inference-objective", "batch", "sheddable"),
        ("x-llm-d-inference-objective", "unknown", "standard"),
    ],
)
def test_a_known_objective_places_the_request_by_its_priority(
    header: str, name: str, band: str
) -> None:
    assert _objective_who({header: name}).band_name == band


def test_an_api_key_tier_beats_the_objective_and_the_objective_beats_the_priority_header() -> None:
    table = Objectives({"batch": -1})
    tiered = Identifier(AdmissionSection(tiers={"gold": "critical"}), table).identify(
        {"kvgate.principal": Principal("k", "gold")}, {"x-llm-d-inference-objective": "batch"}
    )
    assert tiered.band_name == "critical"
    headers = {"x-llm-d-inference-objective": "batch", "x-p": "critical"}
    assert _objective_who(headers, priority_header="x-p").band_name == "sheddable"
    unknown = {"x-llm-d-inference-objective": "nope", "x-p": "critical"}
    assert _objective_who(unknown, priority_header="x-p").band_name == "critical"


def test_the_fairness_id_is_the_tenant_after_the_key_and_the_tenant_header() -> None:
    assert _objective_who({"x-llm-d-inference-fairness-id": "team-a"}).tenant == "team-a"
    assert _objective_who({"x-gateway-inference-fairness-id": "team-b"}).tenant == "team-b"
    both = {"x-llm-d-inference-fairness-id": "new", "x-gateway-inference-fairness-id": "old"}
    assert _objective_who(both).tenant == "new"
    named = {"x-tenant": "t", "x-llm-d-inference-fairness-id": "f"}
    assert _objective_who(named, tenant_header="x-tenant").tenant == "t"
    keyed = Identifier(AdmissionSection()).identify(
        {"kvgate.principal": Principal("k", "default")}, {"x-llm-d-inference-fairness-id": "f"}
    )
    assert keyed.tenant == "k"
