from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Callable, Sequence

import pytest

from routing.traces import TraceRequest
from sim.traces import agentic_loops, multi_turn_sessions, tenant_requests

Generator = Callable[..., list[TraceRequest]]
SMALL: list[tuple[Generator, dict[str, int]]] = [
    (tenant_requests, {"requests": 200}),
    (multi_turn_sessions, {"sessions": 40}),
    (agentic_loops, {"agents": 5, "steps": 20}),
]


def _assert_mooncake_ids(reqs: Sequence[TraceRequest]) -> None:
    """Chained (an id always has the same position and parent, so it names one prefix),
    numbered in order of first appearance, one per started block."""
    where: dict[int, tuple[int, int]] = {}
    fresh = 0
    for r in reqs:
        assert len(r.hash_ids) == math.ceil(r.input_tokens / r.block_tokens)
        parent = -1
        for i, h in enumerate(r.hash_ids):
            assert where.setdefault(h, (i, parent)) == (i, parent)
            assert h <= fresh
            fresh += h == fresh
            parent = h


def _by_session(reqs: Sequence[TraceRequest]) -> dict[str | None, list[TraceRequest]]:
    out: dict[str | None, list[TraceRequest]] = defaultdict(list)
    for r in reqs:
        out[r.session].append(r)
    return out


@pytest.mark.parametrize(("generate", "size"), SMALL)
def test_deterministic_per_seed(generate: Generator, size: dict[str, int]) -> None:
    a, b, c = generate(seed=3, **size), generate(seed=3, **size), generate(seed=4, **size)
    assert a == b
    assert a != c
    arrivals = [r.arrival_s for r in a]
    assert arrivals == sorted(arrivals) and arrivals[0] == 0.0
    _assert_mooncake_ids(a)


def test_tenants_share_their_system_prompt_only() -> None:
    reqs = tenant_requests(
        seed=1, requests=300, tenants=5, system_tokens=100, user_tokens=50, spread=0.0, model="m"
    )
    assert len(reqs) == 300 and {r.model for r in reqs} == {"m"}
    assert {(r.input_tokens, r.output_tokens) for r in reqs} == {(150, 200)}
    shared = 100 // 16  # full blocks of system prompt alone
    by_tenant = defaultdict(list)
    for r in reqs:
        by_tenant[r.hash_ids[:shared]].append(r)
    assert len(by_tenant) == 5
    sizes = sorted(len(v) for v in by_tenant.values())
    assert sizes[-1] > 2 * sizes[0]  # zipf weights: tenant 0 far busier than tenant 4
    owned = [set(r.hash_ids[shared:]) for r in reqs]  # the rest is each request's own
    assert sum(len(s) for s in owned) == len(set().union(*owned))
    tenant_ids = [set(k) for k in by_tenant]
    assert sum(len(s) for s in tenant_ids) == len(set().union(*tenant_ids))


def test_each_turn_extends_the_previous_one() -> None:
    reqs = multi_turn_sessions(seed=2, sessions=30, turns=5, tenants=3, system_tokens=200)
    sessions = _by_session(reqs)
    assert len(sessions) == 30 and all(len(turns) == 5 for turns in sessions.values())
    for turns in sessions.values():
        for prev, nxt in itertools.pairwise(turns):
            assert nxt.arrival_s > prev.arrival_s
            # the previous prompt, its answer and a new message
            assert nxt.input_tokens > prev.input_tokens + prev.output_tokens
            full = prev.input_tokens // prev.block_tokens
            assert nxt.hash_ids[:full] == prev.hash_ids[:full]
            if full < len(prev.hash_ids):  # a partial last block is not shared
                assert prev.hash_ids[full] not in nxt.hash_ids
    firsts = {turns[0].hash_ids[0] for turns in sessions.values()}
    assert len(firsts) == 3  # sessions of a tenant share its system prompt


def test_agent_loops_grow_a_long_context_on_shared_tools() -> None:
    reqs = agentic_loops(seed=5, agents=6, steps=40, system_tokens=1600, output_tokens=40)
    agents = _by_session(reqs)
    assert len(agents) == 6
    tools = 1600 // 16
    assert len({r.hash_ids[:tools] for r in reqs}) == 1  # every agent shares the tools
    for steps in agents.values():
        assert len(steps) == 40
        for prev, nxt in itertools.pairwise(steps):
            full = prev.input_tokens // prev.block_tokens
            assert nxt.hash_ids[:full] == prev.hash_ids[:full]
        assert steps[-1].input_tokens > steps[0].input_tokens + 39 * 300 * 0.5
        assert max(r.output_tokens for r in steps) <= 60  # short tool calls
