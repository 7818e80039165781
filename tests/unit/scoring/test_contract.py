"""Contract every registered filter, scorer and picker must meet.

Plugins are discovered from the registry, so a newly registered plugin is covered without
editing this file. A plugin that needs parameters to construct lists them in PARAMS.

The stateful plugins read a prefix index and a TTFT model shared by every case, as in the
gateway: the index is pre-populated with prompts that the random requests share prefixes with,
so their matches are partial, full or absent, and no plugin may change that state.
"""

from __future__ import annotations

import math
import random
import string
from collections.abc import Callable, Sequence
from types import MappingProxyType
from typing import Any

import pytest

from routing import (
    EndpointScores,
    EndpointSnapshot,
    EngineMetrics,
    Health,
    PluginRegistry,
    RoutingRequest,
    SchedulingContext,
)
from scoring.builtin import register_builtins
from scoring.state.prefix_hash import hash_blocks, prefix_seed
from scoring.state.prefix_index import PrefixIndex
from scoring.state.ttft_model import OnlineTtftModel, TtftCoefficients
from scoring.stateful_plugins import register_stateful_plugins

PARAMS: dict[str, dict[str, Any]] = {}  # type name -> params needed to construct it
CASES = 30
CALLS_PER_CASE = 3  # repeated calls expose state kept between picks
STATEFUL = ("prefix-match-scorer", "estimated-ttft-scorer")

ENDPOINT_IDS = [f"ep-{c}" for c in string.ascii_lowercase]
MODELS = ["m1", "m2", "m3"]
BLOCK_CHARS = 16
STEMS = [random.Random(stem).randbytes(3_000) for stem in range(3)]  # up to 157 blocks


def _prompt_hashes(rng: random.Random, model: str) -> tuple[int, ...]:
    """A prompt that shares a random-length prefix with one of the STEMS."""
    shared = rng.choice(STEMS)[: rng.randint(0, 3_000)]
    tail = rng.randbytes(rng.choice([0, 40]))
    return hash_blocks(shared + tail, prefix_seed(model), BLOCK_CHARS)


def _stateful() -> tuple[PrefixIndex, OnlineTtftModel]:
    rng = random.Random(2024)
    index = PrefixIndex(default_capacity_blocks=300)  # small enough that some tails are evicted
    for _ in range(300):
        model = rng.choice(MODELS)
        index.record(rng.choice(ENDPOINT_IDS), _prompt_hashes(rng, model))
    ttft = OnlineTtftModel(TtftCoefficients(0.02, 2e-4), min_samples=4)
    for endpoint_id in ENDPOINT_IDS[::3]:  # some endpoints have learned lines of their own
        overhead, per_token = rng.uniform(0, 0.1), rng.uniform(0, 1e-3)
        for _ in range(10):
            work = rng.randint(0, 8_000)
            ttft.observe(endpoint_id, work, overhead + per_token * work)
    return index, ttft


INDEX, TTFT = _stateful()


def _state_fingerprint(req: RoutingRequest) -> list[Any]:
    probes = [
        req.prefix_hashes,
        *(hash_blocks(s, prefix_seed(req.model), BLOCK_CHARS) for s in STEMS),
    ]
    return [
        [INDEX.blocks(i) for i in ENDPOINT_IDS],
        [sorted(INDEX.match(p, ENDPOINT_IDS).items()) for p in probes],
        [TTFT.coefficients(i) for i in ENDPOINT_IDS],
    ]


def _registry() -> PluginRegistry:
    registry = PluginRegistry()
    register_builtins(registry)
    register_stateful_plugins(registry, INDEX, TTFT)
    return registry


PLUGINS = [(kind, type_name) for kind, names in _registry().types().items() for type_name in names]


def _make(kind: str, type_name: str) -> Any:
    registry = _registry()
    make: Callable[[str, str, Any], Any] = {
        "filters": registry.make_filter,
        "scorers": registry.make_scorer,
        "pickers": registry.make_picker,
    }[kind]
    return make(type_name, type_name, PARAMS.get(type_name, {}))


def _endpoints(rng: random.Random) -> list[EndpointSnapshot]:
    ids = rng.sample(ENDPOINT_IDS, rng.randint(1, 8))
    return [
        EndpointSnapshot(
            id=i,
            url=f"http://{i}.test:8000",
            models=frozenset(rng.sample(["m1", "m2", "m3"], rng.randint(0, 3))),
            health=rng.choice(list(Health)),
            metrics=rng.choice([None, _metrics(rng)]),
            in_flight=rng.randint(0, 20),
            pending_prefill_tokens=rng.choice([0, rng.randint(0, 5_000)]),
        )
        for i in ids
    ]


def _metrics(rng: random.Random) -> EngineMetrics:
    return EngineMetrics(
        scraped_at=rng.uniform(0, 100),
        waiting=rng.randint(0, 10),
        running=rng.randint(0, 10),
        kv_usage=rng.random(),
        block_size=16,
        num_blocks=rng.randint(100, 1000),
        running_loras=frozenset(rng.sample(["l1", "l2"], rng.randint(0, 2))),
    )


def _request(rng: random.Random) -> RoutingRequest:
    model = rng.choice(MODELS)
    return RoutingRequest(
        model=model,
        request_id=f"r{rng.randint(0, 10**6)}",
        prefix_hashes=_prompt_hashes(rng, model),
        prefix_block_chars=BLOCK_CHARS,
        token_estimate=rng.randint(0, 4000),
        session_key=rng.choice([None, "", f"s{rng.randint(0, 50)}"]),
        lora_adapter=rng.choice([None, "l1"]),
        headers=MappingProxyType({"x-session-id": "s1"}),
    )


def _scored(rng: random.Random, endpoints: Sequence[EndpointSnapshot]) -> list[EndpointScores]:
    # A few repeated totals so that tie-breaking is exercised.
    totals = [0.0, 0.5, 1.0, rng.random(), rng.random() * 10]
    return [
        EndpointScores(e.id, MappingProxyType({"s": t}), t)
        for e in endpoints
        for t in [rng.choice(totals)]
    ]


def _run(kind: str, plugin: Any, case: int, seed: int) -> tuple[list[Any], list[Any]]:
    """Calls `plugin` CALLS_PER_CASE times on one random case; returns (outputs, inputs)."""
    rng = random.Random(case)
    endpoints = _endpoints(rng)
    req = _request(rng)
    ctx = SchedulingContext(clock=lambda: 1000.0, rng=random.Random(seed))
    items: list[Any] = _scored(rng, endpoints) if kind == "pickers" else endpoints
    before = (list(items), [repr(x) for x in items], repr(req))
    stateful = plugin.name in STATEFUL  # only these can reach the shared state
    state = _state_fingerprint(req) if stateful else None
    outputs: list[Any] = []
    for _ in range(CALLS_PER_CASE):
        if kind == "filters":
            outputs.append(list(plugin.filter(req, items, ctx)))
        elif kind == "scorers":
            outputs.append(dict(plugin.score(req, items, ctx)))
        else:
            outputs.append(list(plugin.pick(req, items, ctx)))
    after = (items, [repr(x) for x in items], repr(req))
    assert after[0] == before[0] and all(a is b for a, b in zip(after[0], before[0], strict=True))
    assert after[1:] == before[1:], "plugin mutated its inputs"
    if stateful:
        assert _state_fingerprint(req) == state, "plugin changed the prefix index or TTFT model"
    return outputs, items


@pytest.mark.parametrize(("kind", "type_name"), PLUGINS)
def test_outputs_are_well_formed(kind: str, type_name: str) -> None:
    plugin = _make(kind, type_name)
    assert plugin.name == type_name
    if kind == "filters":  # the scheduler may hand filters an empty pool
        ctx = SchedulingContext(clock=lambda: 0.0, rng=random.Random(0))
        assert list(plugin.filter(RoutingRequest(model="m"), [], ctx)) == []
    for case in range(CASES):
        outputs, items = _run(kind, plugin, case, seed=case)
        if kind == "pickers":
            ids = sorted(s.endpoint_id for s in items)
        else:
            ids = sorted(e.id for e in items)
        for out in outputs:
            if kind == "filters":
                assert all(any(e is x for x in items) for e in out), "filter invented endpoints"
            elif kind == "scorers":
                assert sorted(out) == ids, "scores must be keyed by exactly the candidate ids"
                assert all(0.0 <= v <= 1.0 and not math.isnan(v) for v in out.values()), out
            else:
                assert sorted(out) == ids, "picker must return a permutation of the candidates"


@pytest.mark.parametrize(("kind", "type_name"), PLUGINS)
def test_deterministic_under_a_seeded_rng(kind: str, type_name: str) -> None:
    first, second = _make(kind, type_name), _make(kind, type_name)
    for case in range(CASES):
        assert (
            _run(kind, first, case, seed=1000 + case)[0]
            == _run(kind, second, case, seed=1000 + case)[0]
        )


def test_contract_covers_the_builtins() -> None:
    assert len(PLUGINS) >= 6
    assert {("scorers", name) for name in STATEFUL} <= set(PLUGINS)


def test_stateful_plugins_see_partial_full_and_missing_matches() -> None:
    # Guards the fixture: without real matches the stateful scorers would only score zeros.
    prefix = _make("scorers", "prefix-match-scorer")
    ttft = _make("scorers", "estimated-ttft-scorer")
    prefix_scores: list[float] = []
    ttft_scores: list[float] = []
    for case in range(CASES):
        outputs, _ = _run("scorers", prefix, case, seed=case)
        prefix_scores += outputs[0].values()
        outputs, _ = _run("scorers", ttft, case, seed=case)
        ttft_scores += outputs[0].values()
    assert 0.0 in prefix_scores and 1.0 in prefix_scores
    assert any(0.0 < s < 1.0 for s in prefix_scores)
    assert any(0.0 < s < 1.0 for s in ttft_scores)
