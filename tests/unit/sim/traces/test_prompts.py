from __future__ import annotations

from routing.traces import TraceRequest
from sim.traces import block_token_ids, prompt_token_ids


def test_shared_ids_give_shared_tokens() -> None:
    a = TraceRequest(0.0, 40, 1, (0, 1, 2), block_tokens=16)
    b = TraceRequest(1.0, 45, 1, (0, 1, 3), block_tokens=16)
    pa, pb = prompt_token_ids(a), prompt_token_ids(b)
    assert (len(pa), len(pb)) == (40, 45)
    assert pa[:32] == pb[:32]
    assert pa[32:40] != pb[32:40]
    assert pa[:16] == list(block_token_ids(0, 16))


def test_block_size_defaults_to_the_requests() -> None:
    req = TraceRequest(0.0, 1000, 1, (0, 1))
    assert prompt_token_ids(req) == prompt_token_ids(req, 512)


def test_tokens_past_the_ids_are_the_requests_own() -> None:
    # A kvgate recording ids full blocks only; an Azure request has no ids at all.
    a = TraceRequest(0.0, 40, 1, (0, 1), block_tokens=16)
    b = TraceRequest(1.0, 40, 1, (0, 1), block_tokens=16)
    pa, pb = prompt_token_ids(a), prompt_token_ids(b)
    assert (len(pa), len(pb)) == (40, 40)
    assert pa[:32] == pb[:32]
    assert pa[32:] != pb[32:]
    assert pa == prompt_token_ids(a)  # deterministic
    assert len(prompt_token_ids(TraceRequest(0.0, 300, 1, ()))) == 300
