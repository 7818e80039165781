from __future__ import annotations

from collections.abc import Mapping

import pytest

from routing import EndpointSnapshot, RoutingRequest
from scoring.scorers.lora_affinity import LoraAffinityScorer
from tests.unit.scoring.helpers import context, endpoint, metered


def _score(adapter: str | None, *endpoints: EndpointSnapshot) -> Mapping[str, float]:
    req = RoutingRequest(model="m", request_id="r1", lora_adapter=adapter)
    return LoraAffinityScorer("lora").score(req, list(endpoints), context())


def test_loaded_free_slot_queued_and_full() -> None:
    scores = _score(
        "sql",
        metered("loaded", running_loras=frozenset({"sql", "chat"}), max_loras=2),
        metered("free", running_loras=frozenset({"chat"}), max_loras=2),
        metered(
            "queued",
            running_loras=frozenset({"a", "b"}),
            waiting_loras=frozenset({"sql"}),
            max_loras=2,
        ),
        metered("full", running_loras=frozenset({"a", "b"}), max_loras=2),
    )
    assert scores == {"loaded": 1.0, "free": 0.8, "queued": 0.6, "full": 0.0}


def test_loaded_wins_even_if_also_waiting_and_without_max() -> None:
    both = metered("x", running_loras=frozenset({"sql"}), waiting_loras=frozenset({"sql"}))
    assert _score("sql", both) == {"x": 1.0}


def test_free_slot_counts_adapters_waiting_to_load() -> None:
    # One running + one other waiting fill both slots: no free slot for "sql".
    taken = metered(
        "x", running_loras=frozenset({"a"}), waiting_loras=frozenset({"b"}), max_loras=2
    )
    # Queued itself with a slot still free: the free slot ranks first (0.8 over 0.6).
    queued_free = metered(
        "y", running_loras=frozenset({"a"}), waiting_loras=frozenset({"sql"}), max_loras=3
    )
    assert _score("sql", taken, queued_free) == {"x": 0.0, "y": 0.8}


def test_unreported_max_loras_is_not_a_free_slot() -> None:
    assert _score("sql", metered("x"), metered("y", waiting_loras=frozenset({"sql"}))) == {
        "x": 0.0,
        "y": 0.6,
    }


@pytest.mark.parametrize("adapter", [None, ""])
def test_no_adapter_is_neutral(adapter: str | None) -> None:
    scores = _score(
        adapter, metered("a", max_loras=1, running_loras=frozenset({"z"})), endpoint("b")
    )
    assert scores == {"a": 1.0, "b": 1.0}


def test_unknown_metrics_score_as_the_worst_known_candidate() -> None:
    scores = _score(
        "sql",
        metered("loaded", running_loras=frozenset({"sql"}), max_loras=1),
        metered("free", max_loras=4),
        endpoint("stale"),
    )
    assert scores == {"loaded": 1.0, "free": 0.8, "stale": 0.8}
    assert _score("sql", endpoint("a"), endpoint("b")) == {"a": 0.5, "b": 0.5}


def test_single_and_empty() -> None:
    assert _score("sql", metered("x", max_loras=1)) == {"x": 0.8}
    assert _score("sql") == {}
