"""Contract every registered filter, scorer and picker must meet.

Plugins are discovered from the registry, so a newly registered plugin is covered without
editing this file. A plugin that needs parameters to construct lists them in PARAMS.
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

PARAMS: dict[str, dict[str, Any]] = {}  # type name -> params needed to construct it
CASES = 30
CALLS_PER_CASE = 3  # repeated calls expose state kept between picks


def _registry() -> PluginRegistry:
    registry = PluginRegistry()
    register_builtins(registry)
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
    ids = rng.sample([f"ep-{c}" for c in string.ascii_lowercase], rng.randint(1, 8))
    return [
        EndpointSnapshot(
            id=i,
            url=f"http://{i}.test:8000",
            models=frozenset(rng.sample(["m1", "m2", "m3"], rng.randint(0, 3))),
            health=rng.choice(list(Health)),
            metrics=rng.choice([None, _metrics(rng)]),
            in_flight=rng.randint(0, 20),
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
    return RoutingRequest(
        model=rng.choice(["m1", "m2", "m3"]),
        request_id=f"r{rng.randint(0, 10**6)}",
        prefix_hashes=tuple(rng.getrandbits(64) for _ in range(rng.randint(0, 6))),
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
