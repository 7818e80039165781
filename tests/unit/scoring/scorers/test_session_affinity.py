from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections import Counter

from scoring.scorers.session_affinity import SessionAffinityScorer, rendezvous_weight
from tests.unit.scoring.helpers import context, endpoint, request

KEYS = [f"session-{i}" for i in range(1000)]


def _top(key: str, ids: list[str]) -> str:
    scores = SessionAffinityScorer("aff").score(request(key), [endpoint(i) for i in ids], context())
    return max(scores, key=lambda i: scores[i])


def _ranking(key: str, ids: list[str]) -> list[str]:
    scores = SessionAffinityScorer("aff").score(request(key), [endpoint(i) for i in ids], context())
    return sorted(scores, key=lambda i: -scores[i])


def test_no_session_key_is_neutral() -> None:
    endpoints = [endpoint("a"), endpoint("b")]
    scorer = SessionAffinityScorer("aff")
    assert scorer.score(request(None), endpoints, context()) == {"a": 0.0, "b": 0.0}
    assert scorer.score(request(""), endpoints, context()) == {"a": 0.0, "b": 0.0}


def test_scores_step_by_rank() -> None:
    ids = ["a", "b", "c", "d"]
    scores = SessionAffinityScorer("aff").score(
        request("user-42"), [endpoint(i) for i in ids], context()
    )
    assert sorted(scores.values(), reverse=True) == [1.0, 0.375, 0.25, 0.125]
    by_weight = sorted(ids, key=lambda i: -rendezvous_weight("user-42", i))
    assert [scores[i] for i in by_weight] == [1.0, 0.375, 0.25, 0.125]


def test_top_endpoint_leads_by_half_in_large_pools() -> None:
    ids = [f"ep-{i}" for i in range(64)]
    scores = SessionAffinityScorer("aff").score(
        request("user-7"), [endpoint(i) for i in ids], context()
    )
    top, second = sorted(scores.values(), reverse=True)[:2]
    assert top == 1.0
    assert top - second >= 0.5


def test_weight_is_length_prefixed_blake2b_and_stable() -> None:
    digest = hashlib.blake2b(digest_size=8)
    for part in (b"session-1", b"ep-a"):
        digest.update(len(part).to_bytes(8, "big") + part)
    assert rendezvous_weight("session-1", "ep-a") == int.from_bytes(digest.digest(), "big")
    # Golden values: a change here would re-home every session in a rolling upgrade.
    assert rendezvous_weight("session-1", "ep-a") == 17824823370023509463
    assert rendezvous_weight("session-1", "ep-b") == 1695556215376857839


def test_same_answer_in_another_process_with_another_hash_seed() -> None:
    code = (
        "from scoring.scorers.session_affinity import rendezvous_weight as w;"
        "print(w('k', 'e1'), w('k', 'e2'))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout.split()
    assert out == [str(rendezvous_weight("k", "e1")), str(rendezvous_weight("k", "e2"))]


def test_sessions_spread_evenly() -> None:
    ids = [f"ep-{i}" for i in range(5)]
    counts = Counter(_top(k, ids) for k in KEYS)
    # Expected 200 each; sd ~ 12.6, so 140..260 is a > 4 sd band.
    assert set(counts) == set(ids)
    assert all(140 <= n <= 260 for n in counts.values()), counts


def test_adding_an_endpoint_only_moves_sessions_onto_it() -> None:
    before_ids = [f"ep-{i}" for i in range(5)]
    after_ids = [*before_ids, "ep-new"]
    moved = [k for k in KEYS if _top(k, before_ids) != _top(k, after_ids)]
    assert all(_top(k, after_ids) == "ep-new" for k in moved)
    # About 1/6 of sessions move to the new endpoint (expected 167, sd ~ 12).
    assert 110 <= len(moved) <= 225, len(moved)


def test_removing_an_endpoint_only_moves_its_sessions() -> None:
    before_ids = [f"ep-{i}" for i in range(5)]
    after_ids = [i for i in before_ids if i != "ep-2"]
    moved = [k for k in KEYS if _top(k, before_ids) != _top(k, after_ids)]
    assert moved == [k for k in KEYS if _top(k, before_ids) == "ep-2"]
    assert len({_top(k, after_ids) for k in moved}) == 4  # they spread over the survivors


def test_fallback_order_is_consistent_under_removal() -> None:
    ids = [f"ep-{i}" for i in range(6)]
    for key in KEYS[:100]:
        full = _ranking(key, ids)
        without_top = _ranking(key, full[1:])
        assert without_top == full[1:]


def test_independent_of_input_order() -> None:
    endpoints = [endpoint(f"ep-{i}") for i in range(5)]
    scorer = SessionAffinityScorer("aff")
    assert scorer.score(request("k"), endpoints, context()) == scorer.score(
        request("k"), endpoints[::-1], context()
    )
