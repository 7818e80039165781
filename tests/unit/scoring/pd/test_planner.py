"""The P/D planner: D by the profile, P only when the mode and the predictions say so."""

from __future__ import annotations

import random
from dataclasses import replace

from routing import EndpointSnapshot, RoutingRequest
from routing.config.disaggregation import DisaggregationSection
from routing.config.profiles import RoutingSection
from scoring.pd.planner import WHYS, PdPlan, PdPlanner, decide, new_link_model
from scoring.stack import RoutingStack, build_routing_stack, build_scheduler
from scoring.state.prefix_hash import covered_chars
from tests.unit.scoring.helpers import endpoint

HASHES = tuple(range(1000, 1016))  # the prompt's blocks of 64-byte base blocks
COVERED = covered_chars(len(HASHES), 64) // 4  # tokens they cover (4 bytes per token)


def _node(node_id: str, role: str, pending: int = 0) -> EndpointSnapshot:
    return replace(endpoint(node_id), role=role, pending_prefill_tokens=pending)


def _plan(
    nodes: list[EndpointSnapshot],
    stack: RoutingStack | None = None,
    tokens: int = 8000,
    **section: object,
) -> PdPlan:
    stack = stack or build_routing_stack(RoutingSection(), lambda: 0.0, random.Random(0))
    s = DisaggregationSection.model_validate(section)
    planner = PdPlanner(s, stack.index, stack.ttft_model, new_link_model(s), 4.0)
    req = RoutingRequest(model="m", prefix_hashes=HASHES, token_estimate=tokens)
    plan = planner.plan(req, nodes, lambda r, es: stack.scheduler.schedule(r, es, "prefix-aware"))
    assert plan.why in WHYS
    return plan


def test_a_long_uncached_prompt_on_a_busy_decoder_goes_through_prefill() -> None:
    plan = _plan([_node("p", "prefill"), _node("d", "decode", pending=20000)])
    assert plan.decode.target == "d"
    assert plan.split and plan.prefill is not None and plan.prefill.target == "p"
    assert plan.why == "faster"
    assert plan.split_ttft_s is not None and plan.local_ttft_s is not None
    assert plan.split_ttft_s < plan.local_ttft_s


def test_an_idle_decoder_prefills_alone_when_that_is_predicted_faster() -> None:
    # P is as busy as D is idle: through P is slower.
    plan = _plan([_node("p", "prefill", pending=50000), _node("d", "decode")])
    assert not plan.split
    assert plan.why == "slower"


def test_a_prompt_the_decoder_holds_is_not_split() -> None:
    stack = build_routing_stack(RoutingSection(), lambda: 0.0, random.Random(0))
    stack.index.record("d", HASHES)
    nodes = [_node("p", "prefill"), _node("d", "decode", pending=20000)]
    plan = _plan(nodes, stack, tokens=COVERED + 100)  # all but the last 100 tokens held
    assert plan.decode.target == "d"
    assert plan.uncached_on_decode == 100
    assert not plan.split and plan.why == "cached"


def test_modes_always_and_never() -> None:
    nodes = [_node("p", "prefill", pending=50000), _node("d", "decode")]
    assert _plan(nodes, mode="always").why == "mode_always"
    assert _plan(nodes, mode="always").split
    never = _plan([_node("p", "prefill"), _node("d", "decode", pending=20000)], mode="never")
    assert not never.split and never.why == "mode_never"


def test_an_sglang_decoder_cannot_prefill_and_receives_the_whole_prompt() -> None:
    stack = build_routing_stack(RoutingSection(), lambda: 0.0, random.Random(0))
    stack.index.record("d", HASHES)  # whatever the index says, it keeps no prefix cache
    nodes = [_node("p", "prefill", pending=50000), _node("d", "decode")]
    plan = _plan(nodes, stack, protocol="sglang")
    assert plan.split and plan.why == "cannot_prefill"
    assert plan.moved_tokens == 8000


def test_prefill_never_goes_to_the_chosen_decoder_and_prefill_only_nodes_never_decode() -> None:
    nodes = [_node("p", "prefill"), _node("b", "both"), _node("d", "decode", pending=20000)]
    plan = _plan(nodes, mode="always")
    assert plan.decode.target in {"b", "d"}
    assert "p" not in plan.decode.ranked
    assert plan.prefill is not None and plan.decode.target not in plan.prefill.ranked


def test_no_prefill_candidate_left_means_the_decoder_alone() -> None:
    plan = _plan([_node("b", "both")], mode="always")
    assert plan.decode.target == "b" and not plan.split and plan.why == "no_prefill"


def test_the_transfer_line_learns_from_decode_legs() -> None:
    s = DisaggregationSection()
    stack = build_routing_stack(RoutingSection(), lambda: 0.0, random.Random(0))
    planner = PdPlanner(s, stack.index, stack.ttft_model, new_link_model(s), 4.0)
    prior = planner.link.coefficients("link").predict(10000)
    for moved in range(1000, 20000, 1000):  # a link 5x slower than the prior
        planner.observe_transfer(moved, 0.01 + 1e-5 * moved)
    learnt = planner.link.coefficients("link").predict(10000)
    assert learnt > 2 * prior


def test_round_robin_cycles_over_the_decoders_and_the_prefillers_each() -> None:
    """P has a scheduler of its own: one round-robin over both roles would pair the same P
    and D every time."""
    stack = build_routing_stack(RoutingSection(), lambda: 0.0, random.Random(0))
    s = DisaggregationSection(mode="always")
    p_scheduler = build_scheduler(RoutingSection(), stack.registry, lambda: 0.0, random.Random(1))
    planner = PdPlanner(
        s, stack.index, stack.ttft_model, new_link_model(s), 4.0, prefill_scheduler=p_scheduler
    )
    nodes = [_node("p0", "prefill"), _node("p1", "prefill"), _node("d0", "decode"),
             _node("d1", "decode")]  # fmt: skip
    pairs = set()
    for i in range(4):
        req = RoutingRequest(model="m", request_id=str(i), token_estimate=8000)
        _, plan = decide(
            planner, stack.scheduler, req, nodes, disaggregated=True, profile="round-robin"
        )
        assert plan is not None and plan.prefill is not None
        pairs.add((plan.decode.target, plan.prefill.target))
    assert {d for d, _ in pairs} == {"d0", "d1"}
    assert {p for _, p in pairs} == {"p0", "p1"}


def test_sglang_never_keeps_requests_off_decode_only_backends() -> None:
    nodes = [_node("p", "prefill"), _node("d", "decode"), _node("b", "both")]
    plan = _plan(nodes, protocol="sglang", mode="never")
    assert plan.decode.target == "b" and not plan.split
