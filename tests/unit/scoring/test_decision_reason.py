"""Decision reasons: one word from a fixed set, naming what made the target win."""

from __future__ import annotations

import random
from dataclasses import replace

from routing import EndpointSnapshot, RoutingRequest, Scheduler
from routing.config.profiles import RoutingSection
from routing.scheduler import Profile, WeightedScorer
from routing.types import Decision
from scoring.decision_reason import REASONS, DecisionReasons
from scoring.stack import RoutingStack, build_routing_stack
from tests.unit.scoring.helpers import endpoint

HASHES = tuple(range(1000, 1016))  # a 16-block prompt


def _stack() -> RoutingStack:
    return build_routing_stack(RoutingSection(), lambda: 100.0, random.Random(0))


def _why(
    stack: RoutingStack,
    policy: str,
    endpoints: list[EndpointSnapshot],
    request: RoutingRequest | None = None,
) -> tuple[Decision, str]:
    request = request or RoutingRequest(model="m", prefix_hashes=HASHES, token_estimate=2000)
    decision = stack.scheduler.schedule(request, endpoints, profile=policy)
    profile = stack.scheduler.profiles[policy]
    reason = DecisionReasons(stack.index).reason(decision, profile, request, len(endpoints))
    assert reason in REASONS
    return decision, reason


def test_one_candidate_and_one_left_by_the_filters() -> None:
    stack = _stack()
    assert _why(stack, "prefix-aware", [endpoint("a")])[1] == "only_candidate"
    # The imbalance filter (abs 16) drops the hot spot: the one left won by elimination.
    hot, cool = endpoint("hot", in_flight=40), endpoint("cool", in_flight=0)
    decision, reason = _why(stack, "prefix-aware", [hot, cool])
    assert decision.target == "cool"
    assert reason == "filtered"


def test_scores_that_decide_nothing_leave_it_to_the_picker() -> None:
    stack = _stack()
    assert _why(stack, "round-robin", [endpoint("a"), endpoint("b")])[1] == "picker"
    # Equal load: the max-score picker breaks a tie.
    assert _why(stack, "least-in-flight", [endpoint("a"), endpoint("b")])[1] == "picker"


def test_the_load_scorers_lead() -> None:
    stack = _stack()
    decision, reason = _why(stack, "least-load", [endpoint("a", 5), endpoint("b", 1)])
    assert decision.target == "b"
    assert reason == "load"


def test_the_session_scorer_leads_when_the_request_has_a_session() -> None:
    stack = _stack()
    request = RoutingRequest(model="m", session_key="user-7")
    assert _why(stack, "session", [endpoint("a"), endpoint("b")], request)[1] == "session"


def test_estimated_ttft_is_split_into_prefix_and_load() -> None:
    stack = _stack()
    stack.index.record("b", HASHES)  # b holds the whole prompt
    decision, reason = _why(stack, "prefix-aware", [endpoint("a"), endpoint("b", 1)])
    assert decision.target == "b"
    assert reason == "prefix"
    # No replica holds anything of this prompt: the less loaded one wins, for its load.
    other = RoutingRequest(model="m", prefix_hashes=tuple(range(16)), token_estimate=2000)
    busy = replace(endpoint("a", 3), pending_prefill_tokens=4000)
    decision, reason = _why(stack, "prefix-aware", [busy, endpoint("b")], other)
    assert decision.target == "b"
    assert reason == "load"


class _Mystery:
    """A scorer of a type the reasons do not know."""

    name = "mystery"

    def score(
        self, request: object, endpoints: list[EndpointSnapshot], ctx: object
    ) -> dict[str, float]:
        return {e.id: 1.0 if e.id == "b" else 0.0 for e in endpoints}


def test_an_unknown_scorer_gives_other() -> None:
    stack = _stack()
    picker = stack.scheduler.profiles["least-in-flight"].picker
    profile = Profile("mine", picker, scorers=(WeightedScorer(_Mystery(), 1.0),))  # type: ignore[arg-type]
    scheduler = Scheduler({"mine": profile}, "mine", lambda: 0.0, random.Random(0))
    request = RoutingRequest(model="m")
    decision = scheduler.schedule(request, [endpoint("a"), endpoint("b")])
    assert decision.target == "b"
    assert DecisionReasons(stack.index).reason(decision, profile, request, 2) == "other"
