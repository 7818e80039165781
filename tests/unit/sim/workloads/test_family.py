"""The workload family: pressure, popularity, and one seed giving the same live and
simulated workloads."""

from __future__ import annotations

import math
from collections import Counter
from itertools import pairwise

import orjson
import pytest

from sim.emulator.openai_api import render_chat
from sim.engine.tokenizer import BuiltinTokenizer
from sim.workloads import family
from sim.workloads.family import FamilyCell

FLEET_KV = 4 * 10_240  # four `demo` replicas


def _cell(**kw: object) -> FamilyCell:
    args: dict[str, object] = {
        "tenants": 3,
        "prefix_tokens": 64,
        "popularity": "hot",
        "conversations": 12,
        "user_tokens": 8,
        "output_tokens": 4,
        "seed": 7,
    }
    return FamilyCell(**{**args, **kw})  # type: ignore[arg-type]


def test_pressure_is_distinct_prefix_tokens_over_fleet_kv() -> None:
    assert family.pressure(30, 2048, FLEET_KV) == 1.5
    assert _cell(tenants=30, prefix_tokens=2048).pressure(FLEET_KV) == 1.5
    assert family.tenants_for_pressure(1.5, 2048, FLEET_KV) == 30
    assert family.tenants_for_pressure(0.25, 2048, FLEET_KV) == 5
    assert family.tenants_for_pressure(4, 2048, FLEET_KV) == 80
    assert family.tenants_for_pressure(0.001, 2048, FLEET_KV) == 1


def test_tenant_weights_per_popularity() -> None:
    assert family.tenant_weights("uniform", 4) == [0.25] * 4
    zipf = family.tenant_weights("zipf", 3)
    assert zipf == pytest.approx([6 / 11, 3 / 11, 2 / 11])
    hot = family.tenant_weights("hot", 8)
    assert hot[0] == pytest.approx(family.HOT_SHARE)
    assert hot[1:] == pytest.approx([(1 - family.HOT_SHARE) / 7] * 7)
    assert family.tenant_weights("hot", 1) == [1.0]
    with pytest.raises(ValueError, match="popularity"):
        family.tenant_weights("bursty", 3)


@pytest.mark.parametrize("popularity", ["uniform", "zipf", "hot"])
def test_chats_pick_tenants_by_popularity(popularity: str) -> None:
    cell = _cell(tenants=10, popularity=popularity, conversations=3000, prefix_tokens=8)
    counts = Counter(c.tenant for c in family.chats(cell))
    weights = family.tenant_weights(popularity, 10)
    for tenant, weight in enumerate(weights):
        assert counts[tenant] / 3000 == pytest.approx(weight, abs=0.03)


def test_turns_and_lengths_follow_the_cell() -> None:
    chats = family.chats(_cell(conversations=200))
    assert {len(c.user_turns) for c in chats} == {2, 3, 4}
    tokenizer = BuiltinTokenizer()
    chat = chats[0]
    assert len(tokenizer.encode(chat.system_prompt)) == 64
    assert [len(tokenizer.encode(u)) for u in chat.user_turns] == [8] * len(chat.user_turns)
    assert [len(tokenizer.encode(a)) for a in chat.answers] == [4] * len(chat.answers)


def test_tenants_share_their_prefix_across_conversations() -> None:
    chats = family.chats(_cell())
    prompts = {c.tenant: c.system_prompt for c in chats}
    assert all(c.system_prompt == prompts[c.tenant] for c in chats)
    assert len(set(prompts.values())) == len(prompts) > 1
    trace = family.chat_trace(chats, family.closed_arrivals(chats, 4, 1.0), block_tokens=16)
    tenant_of = {c.id: c.tenant for c in chats}
    first = {}
    for r in trace:
        first.setdefault(tenant_of[r.session], r.hash_ids)
    for r in trace:
        mine = first[tenant_of[r.session]]
        pairs = zip(r.hash_ids, mine, strict=False)
        differ = next((i for i, (a, b) in enumerate(pairs) if a != b), None)
        assert differ is None or differ >= 64 // 16  # the whole system prompt's blocks
        for tenant, theirs in first.items():
            if tenant != tenant_of[r.session]:
                assert r.hash_ids[0] != theirs[0]


def test_same_seed_gives_the_same_live_and_simulated_workloads() -> None:
    cell = _cell()
    chats = family.chats(cell)
    assert chats == family.chats(cell)
    assert chats != family.chats(_cell(seed=8))
    conversations = family.conversations(chats)
    assert [(c.id, c.system_prompt, c.user_turns) for c in conversations] == [
        (c.id, c.system_prompt, c.user_turns) for c in chats
    ]
    arrivals = family.open_arrivals(chats, 5.0, 1.0, seed=3)
    assert arrivals == family.open_arrivals(chats, 5.0, 1.0, seed=3)
    trace = family.chat_trace(chats, arrivals)
    requests = family.chat_requests(chats, arrivals, "m")
    assert len(trace) == len(requests) == sum(len(c.user_turns) for c in chats)
    tokenizer = BuiltinTokenizer()
    for r, t in zip(requests, trace, strict=True):
        body = orjson.loads(r.body)
        assert r.at_s == t.arrival_s and r.headers == {"x-session-id": t.session}
        # What the emulator will tokenize is exactly what the simulator replays.
        assert len(tokenizer.encode(render_chat(body["messages"]))) == t.input_tokens
        assert body["max_tokens"] == t.output_tokens == 4
        assert len(t.hash_ids) == math.ceil(t.input_tokens / t.block_tokens)
    assert trace == family.chat_trace(family.chats(cell), arrivals)


def test_a_turn_extends_the_previous_turns_prompt() -> None:
    chats = family.chats(_cell(conversations=1, prefix_tokens=200))
    trace = family.chat_trace(chats, family.closed_arrivals(chats, 1, 1.0))
    for earlier, later in pairwise(trace):
        full = earlier.input_tokens // earlier.block_tokens
        assert later.hash_ids[:full] == earlier.hash_ids[:full]


def test_closed_arrivals_give_each_client_the_next_chat_when_free() -> None:
    chats = family.chats(_cell(conversations=3))
    turns = [len(c.user_turns) for c in chats]
    arrivals = family.closed_arrivals(chats, 2, 1.0)
    assert arrivals[0] == tuple(float(k) for k in range(turns[0]))
    assert arrivals[1] == tuple(float(k) for k in range(turns[1]))
    start = float(min(turns[0], turns[1]))  # the client that finished first
    assert arrivals[2] == tuple(start + k for k in range(turns[2]))


def test_open_arrivals_start_chats_at_the_request_rate() -> None:
    chats = family.chats(_cell(conversations=2000, prefix_tokens=8))
    arrivals = family.open_arrivals(chats, 12.0, 0.5, seed=1)
    starts = [times[0] for times in arrivals]
    assert starts == sorted(starts)
    requests = sum(len(t) for t in arrivals)
    assert requests / starts[-1] == pytest.approx(12.0, rel=0.08)
    assert all(a < b for times in arrivals for a, b in pairwise(times))


def test_invalid_cells_are_refused() -> None:
    with pytest.raises(ValueError, match="popularity"):
        _cell(popularity="bursty")
    with pytest.raises(ValueError, match="max_turns"):
        _cell(min_turns=3, max_turns=2)
    with pytest.raises(ValueError, match=">= 1"):
        _cell(tenants=0)
