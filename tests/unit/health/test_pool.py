from __future__ import annotations

import dataclasses

import pytest

from health.pool import BackendPool, BackendSpec, adapter_parent
from health.state import HealthPolicy
from routing.types import EndpointSnapshot, EngineMetrics, Health


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _pool(*specs: BackendSpec, clock: FakeClock | None = None) -> BackendPool:
    return BackendPool(specs, HealthPolicy(passive_fail_threshold=1), clock or FakeClock())


def test_spec_id_defaults_to_host_port() -> None:
    assert BackendSpec(url="http://10.0.0.1:8000").id == "10.0.0.1:8000"
    assert BackendSpec(url="https://engine.local/").id == "engine.local"


def test_spec_strips_trailing_slashes_and_keeps_a_given_id() -> None:
    spec = BackendSpec(url="http://h:1//", id="gpu-1", engine="vllm", models=("m",))
    assert (spec.url, spec.id, spec.engine, spec.models) == ("http://h:1", "gpu-1", "vllm", ("m",))


def test_a_backends_id_follows_its_spec() -> None:
    backend = _pool(BackendSpec(url="http://a:8000")).get("a:8000")
    assert backend.id == "a:8000"
    backend.spec = BackendSpec(url="http://a:8000", id="renamed")  # a reload's new spec
    assert backend.id == "renamed"
    assert dataclasses.replace(backend, in_flight=1).id == "renamed"


def test_duplicate_ids_are_rejected() -> None:
    with pytest.raises(ValueError, match="duplicate backend id 'h:1'"):
        _pool(BackendSpec(url="http://h:1"), BackendSpec(url="http://h:1/"))
    with pytest.raises(ValueError, match="duplicate backend id 'x'"):
        _pool(BackendSpec(url="http://a:1", id="x"), BackendSpec(url="http://b:1", id="x"))


def test_pool_keeps_config_order_and_lookup() -> None:
    pool = _pool(BackendSpec(url="http://b:1"), BackendSpec(url="http://a:1"))
    assert len(pool) == 2
    assert [b.id for b in pool] == ["b:1", "a:1"]
    assert pool.get("a:1").spec.url == "http://a:1"
    with pytest.raises(KeyError):
        pool.get("c:1")


def test_snapshot_of_a_new_backend() -> None:
    pool = _pool(BackendSpec(url="http://h:1", engine="vllm", models=("m",)))
    assert pool.snapshots() == (
        EndpointSnapshot(
            id="h:1",
            url="http://h:1",
            models=frozenset({"m"}),
            health=Health.UNKNOWN,
            engine="vllm",
            metrics=None,
            in_flight=0,
        ),
    )


def test_snapshots_reflect_health_in_flight_and_metrics() -> None:
    clock = FakeClock()
    pool = _pool(BackendSpec(url="http://a:1"), BackendSpec(url="http://b:1"), clock=clock)
    a, b = pool.get("a:1"), pool.get("b:1")
    a.state.record_probe(True, clock.now)
    b.state.record_probe(False, clock.now)
    a.in_flight = 3
    a.metrics = EngineMetrics(scraped_at=0.0, waiting=2)
    snaps = {s.id: s for s in pool.snapshots()}
    assert (snaps["a:1"].health, snaps["a:1"].in_flight) == (Health.HEALTHY, 3)
    assert snaps["a:1"].metrics == EngineMetrics(scraped_at=0.0, waiting=2)
    assert snaps["b:1"].health is Health.UNHEALTHY

    a.state.record_upstream_failure(clock.now, "boom")  # threshold 1: ejected for 5 s
    assert pool.snapshots()[0].health is Health.EJECTED
    clock.now = 5.0
    assert pool.snapshots()[0].health is Health.HEALTHY


def test_snapshots_are_values() -> None:
    pool = _pool(BackendSpec(url="http://a:1"))
    before = pool.snapshots()
    pool.get("a:1").in_flight = 9
    assert before[0].in_flight == 0
    assert pool.snapshots()[0].in_flight == 9


def test_configured_models_win_over_discovered() -> None:
    pool = _pool(BackendSpec(url="http://a:1", models=("conf",)), BackendSpec(url="http://b:1"))
    pool.get("a:1").model_cards = {"found": {"id": "found"}}
    pool.get("b:1").model_cards = {"found": {"id": "found"}}
    assert pool.get("a:1").models == frozenset({"conf"})
    assert pool.get("b:1").models == frozenset({"found"})
    assert {s.id: s.models for s in pool.snapshots()} == {
        "a:1": frozenset({"conf"}),
        "b:1": frozenset({"found"}),
    }


def test_served_models_only_from_healthy_backends() -> None:
    clock = FakeClock()
    pool = _pool(
        BackendSpec(url="http://a:1", models=("shared", "only-a")),
        BackendSpec(url="http://b:1"),
        BackendSpec(url="http://c:1", models=("only-c",)),
        clock=clock,
    )
    pool.get("a:1").state.record_probe(True, 0.0)
    pool.get("b:1").state.record_probe(True, 0.0)
    pool.get("c:1").state.record_probe(False, 0.0)
    b_card = {"id": "shared", "object": "model", "owned_by": "vllm", "max_model_len": 4096}
    pool.get("b:1").model_cards = {"shared": b_card, "only-b": {"id": "only-b"}}

    served = pool.served_models()
    assert sorted(served) == ["only-a", "only-b", "shared"]
    # a has no card for "shared" (configured) and is first: a minimal card is made up.
    assert served["shared"] == {"id": "shared", "object": "model"}
    assert served["only-b"] == {"id": "only-b"}
    assert [b.id for b in pool.healthy()] == ["a:1", "b:1"]
    assert pool.known_models() == {"shared", "only-a", "only-b", "only-c"}

    pool.get("a:1").state.record_upstream_failure(clock.now, "boom")  # ejected
    served = pool.served_models()
    assert sorted(served) == ["only-b", "shared"]
    assert served["shared"] == b_card


def test_unknown_backends_serve_nothing() -> None:
    pool = _pool(BackendSpec(url="http://a:1", models=("m",)))
    assert pool.served_models() == {}
    assert pool.healthy() == []
    assert pool.known_models() == {"m"}


def test_snapshot_carries_pending_prefill_tokens() -> None:
    pool = BackendPool([BackendSpec(url="http://a:1")], HealthPolicy(), lambda: 0.0)
    pool.get("a:1").pending_prefill_tokens = 512
    [snap] = pool.snapshots()
    assert snap.pending_prefill_tokens == 512


def test_an_unchanged_backend_hands_out_the_same_snapshot() -> None:
    clock = FakeClock()
    pool = _pool(BackendSpec(url="http://a:1"), clock=clock)
    pool.get("a:1").state.record_probe(True, 0.0)
    first = pool.snapshots()[0]
    clock.now = 1.0
    assert pool.snapshots()[0] is first  # nothing it is made of changed


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("in_flight", 4),
        ("pending_prefill_tokens", 100),
        ("metrics", EngineMetrics(scraped_at=0.0, waiting=7)),
        ("model_cards", {"found": {"id": "found"}}),
        ("spec", BackendSpec(url="http://a:1", engine="sglang")),
    ],
)
def test_assigning_a_snapshot_field_gives_a_fresh_snapshot(field: str, value: object) -> None:
    pool = _pool(BackendSpec(url="http://a:1"))
    backend = pool.get("a:1")
    first = pool.snapshots()[0]
    setattr(backend, field, value)
    fresh = pool.snapshots()[0]
    assert fresh is not first
    assert (
        fresh
        == backend.snapshot(0.0)
        == EndpointSnapshot(
            id="a:1",
            url="http://a:1",
            models=backend.models,
            health=Health.UNKNOWN,
            engine=backend.spec.engine,
            metrics=backend.metrics,
            in_flight=backend.in_flight,
            pending_prefill_tokens=backend.pending_prefill_tokens,
        )
    )
    backend.scrape_errors += 1  # not part of a snapshot: the snapshot is kept
    assert pool.snapshots()[0] is fresh


def test_cached_snapshots_follow_health_changes_without_assignments() -> None:
    clock = FakeClock()
    pool = _pool(BackendSpec(url="http://a:1"), clock=clock)
    state = pool.get("a:1").state
    state.record_probe(True, 0.0)
    assert pool.snapshots()[0].health is Health.HEALTHY
    state.record_upstream_failure(0.0, "boom")  # threshold 1: ejected for 5 s
    assert pool.snapshots()[0].health is Health.EJECTED
    clock.now = 5.0
    assert pool.snapshots()[0].health is Health.HEALTHY
    for _ in range(3):
        state.record_probe(False, clock.now)
    assert pool.snapshots()[0].health is Health.UNHEALTHY


def test_cached_snapshots_drop_metrics_once_stale_and_honour_a_clock_set_back() -> None:
    clock = FakeClock()
    pool = BackendPool([BackendSpec(url="http://a:1")], HealthPolicy(), clock, stale_after_s=1.0)
    metrics = EngineMetrics(scraped_at=0.0, waiting=3)
    pool.get("a:1").metrics = metrics
    assert pool.snapshots()[0].metrics is metrics
    clock.now = 1.0  # exactly at the bound: still fresh
    assert pool.snapshots()[0].metrics is metrics
    clock.now = 1.5
    assert pool.snapshots()[0].metrics is None
    clock.now = 0.5  # an injected clock set back: fresh again, not a cached stale answer
    assert pool.snapshots()[0].metrics is metrics
    # The same backend asked with another staleness bound answers by that bound.
    assert pool.get("a:1").snapshot(0.5, stale_after_s=0.1).metrics is None
    assert pool.get("a:1").snapshot(0.5, stale_after_s=None).metrics is metrics


# vLLM's /v1/models cards: the base model has parent null, an adapter names its base model.
BASE_CARD = {"id": "llama", "object": "model", "root": "/models/llama", "parent": None}
SQL_CARD = {"id": "sql-lora", "object": "model", "root": "/adapters/sql", "parent": "llama"}


@pytest.mark.parametrize(
    ("card", "parent"),
    [
        (SQL_CARD, "llama"),
        (BASE_CARD, None),
        ({"id": "m"}, None),  # a generic OpenAI server's card: no parent at all
        ({"id": "m", "parent": "m"}, None),  # its own parent: not an adapter
        ({"id": "m", "parent": ""}, None),
        ({"id": "m", "parent": 3}, None),
    ],
)
def test_adapter_parent_reads_vllm_cards(card: dict[str, object], parent: str | None) -> None:
    assert adapter_parent(card) == parent


def test_lora_adapters_follow_the_discovered_cards() -> None:
    pool = _pool(BackendSpec(url="http://a:1"), BackendSpec(url="http://b:1"))
    assert pool.lora_adapters() == frozenset()
    pool.get("a:1").model_cards = {"llama": BASE_CARD, "sql-lora": SQL_CARD}
    assert pool.lora_adapters() == frozenset({"sql-lora"})
    chat = {"id": "chat-lora", "parent": "llama"}
    pool.get("b:1").model_cards = {"llama": BASE_CARD, "chat-lora": chat}
    assert pool.lora_adapters() == frozenset({"sql-lora", "chat-lora"})
    pool.get("a:1").model_cards = {"llama": BASE_CARD}  # sql-lora unloaded
    assert pool.lora_adapters() == frozenset({"chat-lora"})


# -- membership at runtime (pod discovery) -------------------------------------------------


async def test_add_and_remove_change_membership_and_wake_waiters() -> None:
    import asyncio

    pool = _pool(BackendSpec(url="http://a:1"))
    woken = asyncio.create_task(pool.wait_changed())
    await asyncio.sleep(0)
    added = pool.add(BackendSpec(url="http://b:2", engine="sglang"))
    await asyncio.wait_for(woken, 1)
    assert [b.id for b in pool] == ["a:1", "b:2"]
    assert pool.find("b:2") is added
    assert added.state.health(0.0) is Health.UNKNOWN
    with pytest.raises(ValueError, match="duplicate"):
        pool.add(BackendSpec(url="http://b:2"))
    woken = asyncio.create_task(pool.wait_changed())
    await asyncio.sleep(0)
    assert pool.remove("b:2") is added
    await asyncio.wait_for(woken, 1)
    assert pool.find("b:2") is None
    assert pool.remove("b:2") is None
    assert [s.id for s in pool.snapshots()] == ["a:1"]


def test_iterating_survives_membership_changes() -> None:
    pool = _pool(BackendSpec(url="http://a:1"), BackendSpec(url="http://b:2"))
    seen = []
    for backend in pool:
        seen.append(backend.id)
        pool.remove(backend.id)
        pool.add(BackendSpec(url=f"http://new-{backend.id.split(':')[0]}:3"))
    assert seen == ["a:1", "b:2"]
    assert len(pool) == 2


def test_known_models_follow_cards_and_membership() -> None:
    pool = _pool(BackendSpec(url="http://a:1", models=("m",)))
    assert pool.known_models() is pool.known_models()  # kept between changes
    pool.add(BackendSpec(url="http://b:1")).model_cards = {"n": {"id": "n"}}
    assert pool.known_models() == {"m", "n"}
    pool.get("b:1").model_cards = {"o": {"id": "o"}}
    assert pool.known_models() == {"m", "o"}
    pool.remove("a:1")
    assert pool.known_models() == {"o"}


def test_a_pool_with_a_prefill_member_is_disaggregated() -> None:
    pool = _pool(BackendSpec("http://d:1", role="decode"))
    assert not pool.disaggregated
    pool.add(BackendSpec("http://p:1", role="prefill"))
    assert pool.disaggregated
    assert pool.snapshots()[1].role == "prefill"
    pool.remove("p:1")
    assert not pool.disaggregated
    d = pool.get("d:1")
    d.spec = BackendSpec("http://d:1", role="prefill")  # a reload changed its role in place
    pool.roles_changed()
    assert pool.disaggregated
