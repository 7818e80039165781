from __future__ import annotations

import asyncio
import logging

import orjson
import pytest

from health.fetch import FetchError, FetchResult
from health.pool import Backend, BackendPool, BackendSpec
from health.prober import Prober, ProbeSettings, parse_model_list
from health.state import HealthPolicy
from routing.types import Health
from tests.unit.health.conftest import URL, FakeClock, FakeFetcher, page

HEALTH = URL + "/health"
MODELS = URL + "/v1/models"

# GET /v1/models as vLLM 0.32 answers it.
VLLM_MODELS = (
    b'{"object":"list","data":[{"id":"tiny","object":"model","created":1795966205,'
    b'"owned_by":"vllm","root":"/tmp/testbed/tiny","parent":null,"max_model_len":4096,'
    b'"permission":[{"id":"modelperm-9c650ab22e6de6c8","object":"model_permission",'
    b'"created":1795966205,"allow_create_engine":false,"allow_sampling":true,'
    b'"allow_logprobs":true,"allow_search_indices":false,"allow_view":true,'
    b'"allow_fine_tuning":false,"organization":"*","group":null,"is_blocking":false}]}]}'
)


def _models_body(*ids: str) -> bytes:
    return orjson.dumps({"object": "list", "data": [{"id": i, "object": "model"} for i in ids]})


def _prober(
    fetcher: FakeFetcher, clock: FakeClock, *specs: BackendSpec, refresh_s: float = 30.0
) -> tuple[Prober, BackendPool]:
    pool = BackendPool(specs or (BackendSpec(url=URL),), HealthPolicy(), clock)
    settings = ProbeSettings(interval_s=5.0, timeout_s=1.5, model_refresh_s=refresh_s)
    return Prober(pool, fetcher, settings), pool


def _backend(pool: BackendPool) -> Backend:
    return pool.get("engine:8000")


# -- probes -------------------------------------------------------------------------------


async def test_probe_ok_marks_healthy(fetcher: FakeFetcher, clock: FakeClock) -> None:
    fetcher.script(HEALTH, page())
    prober, pool = _prober(fetcher, clock)
    assert await prober.probe(_backend(pool)) is True
    assert _backend(pool).state.health(clock.now) is Health.HEALTHY
    assert fetcher.calls == [(HEALTH, 1.5)]


@pytest.mark.parametrize("status", [204, 404, 500, 503])
async def test_probe_non_200_marks_unhealthy(
    status: int, fetcher: FakeFetcher, clock: FakeClock
) -> None:
    fetcher.script(HEALTH, page(status=status))
    prober, pool = _prober(fetcher, clock)
    assert await prober.probe(_backend(pool)) is False
    state = _backend(pool).state
    assert state.health(clock.now) is Health.UNHEALTHY
    assert state.last_error == f"health probe returned {status}"


async def test_probe_fetch_error_marks_unhealthy(fetcher: FakeFetcher, clock: FakeClock) -> None:
    fetcher.script(HEALTH, FetchError("ConnectError: refused"))
    prober, pool = _prober(fetcher, clock)
    assert await prober.probe(_backend(pool)) is False
    state = _backend(pool).state
    assert state.health(clock.now) is Health.UNHEALTHY
    assert state.last_error == "health probe failed: ConnectError: refused"


async def test_probe_follows_the_thresholds(fetcher: FakeFetcher, clock: FakeClock) -> None:
    fetcher.script(HEALTH, page(), page(status=503))
    prober, pool = _prober(fetcher, clock)
    seen = []
    for _ in range(4):
        await prober.probe(_backend(pool))
        seen.append(_backend(pool).state.health(clock.now))
    assert seen == [Health.HEALTHY, Health.HEALTHY, Health.HEALTHY, Health.UNHEALTHY]


async def test_probe_logs_transitions_only(
    fetcher: FakeFetcher, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    fetcher.script(HEALTH, page())
    prober, pool = _prober(fetcher, clock)
    with caplog.at_level(logging.INFO, logger="health.prober"):
        await prober.probe(_backend(pool))
        await prober.probe(_backend(pool))
    assert [r.getMessage() for r in caplog.records] == [
        "backend engine:8000: unknown -> healthy (None)"
    ]


# -- model discovery ----------------------------------------------------------------------


async def test_initial_round_discovers_vllm_models(fetcher: FakeFetcher, clock: FakeClock) -> None:
    fetcher.script(HEALTH, page())
    fetcher.script(MODELS, page(VLLM_MODELS))
    prober, pool = _prober(fetcher, clock)
    clock.now = 12.0
    await prober.initial_round()
    backend = _backend(pool)
    assert backend.models == frozenset({"tiny"})
    assert backend.model_cards["tiny"]["max_model_len"] == 4096
    assert backend.model_cards["tiny"]["owned_by"] == "vllm"
    assert backend.discovered_at == 12.0
    assert pool.served_models() == {"tiny": backend.model_cards["tiny"]}
    assert fetcher.calls == [(HEALTH, 1.5), (MODELS, 1.5)]


# vLLM lists each adapter of `--lora-modules NAME=PATH` after the base model, with the base
# model as its parent and the adapter's path as its root (no max_model_len).
VLLM_MODELS_WITH_LORA = (
    b'{"object":"list","data":[{"id":"tiny","object":"model","created":1795966205,'
    b'"owned_by":"vllm","root":"/tmp/testbed/tiny","parent":null,"max_model_len":4096},'
    b'{"id":"sql-lora","object":"model","created":1795966205,"owned_by":"vllm",'
    b'"root":"/tmp/testbed/sql-lora","parent":"tiny","max_model_len":null}]}'
)


async def test_discovered_adapters_are_the_pools_lora_adapters(
    fetcher: FakeFetcher, clock: FakeClock
) -> None:
    fetcher.script(HEALTH, page())
    fetcher.script(MODELS, page(VLLM_MODELS_WITH_LORA))
    prober, pool = _prober(fetcher, clock)
    await prober.initial_round()
    assert _backend(pool).models == frozenset({"tiny", "sql-lora"})
    assert pool.lora_adapters() == frozenset({"sql-lora"})


async def test_initial_round_covers_every_backend(fetcher: FakeFetcher, clock: FakeClock) -> None:
    fetcher.script(HEALTH, page())
    fetcher.script(MODELS, page(_models_body("m")))
    fetcher.script("http://other:9000/health", page(status=503))
    fetcher.script("http://other:9000/v1/models", page(b"{}"))
    prober, pool = _prober(
        fetcher, clock, BackendSpec(url=URL), BackendSpec(url="http://other:9000")
    )
    await prober.initial_round()
    assert {b.id: b.state.health(0.0) for b in pool} == {
        "engine:8000": Health.HEALTHY,
        "other:9000": Health.UNHEALTHY,
    }
    assert fetcher.count("http://other:9000/v1/models") == 0  # no discovery on a failed probe
    assert pool.get("other:9000").models == frozenset()


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (page(b"<html>not json"), "unexpected character"),
        (page(b'{"data": "nope"}'), "models response has no 'data' list"),
        (page(b"[]"), "models response has no 'data' list"),
        (page(_models_body("other"), status=500), f"{MODELS} returned 500"),
        (FetchError("ConnectError: refused"), "ConnectError: refused"),
    ],
)
async def test_failed_discovery_keeps_the_old_models(
    answer: FetchResult | FetchError,
    reason: str,
    fetcher: FakeFetcher,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    fetcher.script(MODELS, page(_models_body("a", "b")), answer)
    prober, pool = _prober(fetcher, clock)
    backend = _backend(pool)
    await prober.discover_models(backend)
    assert backend.models == frozenset({"a", "b"})
    clock.now = 100.0
    with caplog.at_level(logging.WARNING, logger="health.prober"):
        await prober.discover_models(backend)
    assert fetcher.count(MODELS) == 2
    assert backend.models == frozenset({"a", "b"})
    assert backend.discovered_at == 0.0
    assert "backend engine:8000: model discovery failed: " in caplog.text
    assert reason in caplog.text


async def test_discovery_replaces_the_models(fetcher: FakeFetcher, clock: FakeClock) -> None:
    fetcher.script(MODELS, page(_models_body("a", "b")), page(_models_body("c")))
    prober, pool = _prober(fetcher, clock)
    backend = _backend(pool)
    await prober.discover_models(backend)
    await prober.discover_models(backend)
    assert backend.models == frozenset({"c"})


async def test_configured_models_skip_discovery(fetcher: FakeFetcher, clock: FakeClock) -> None:
    fetcher.script(HEALTH, page())
    fetcher.script(MODELS, page(_models_body("found")))
    prober, pool = _prober(fetcher, clock, BackendSpec(url=URL, models=("conf",)))
    await prober.initial_round()
    clock.now = 1000.0
    await prober.initial_round()
    assert fetcher.count(MODELS) == 0
    assert _backend(pool).models == frozenset({"conf"})


async def test_refresh_interval_is_respected(fetcher: FakeFetcher, clock: FakeClock) -> None:
    fetcher.script(HEALTH, page())
    fetcher.script(MODELS, page(_models_body("v1")), page(_models_body("v2")))
    prober, pool = _prober(fetcher, clock, refresh_s=30.0)
    backend = _backend(pool)
    await prober.initial_round()  # t=0: discovers
    for t in (5.0, 10.0, 29.9):
        clock.now = t
        await prober.initial_round()
    assert (fetcher.count(HEALTH), fetcher.count(MODELS)) == (4, 1)
    assert backend.models == frozenset({"v1"})
    clock.now = 30.0
    await prober.initial_round()
    assert fetcher.count(MODELS) == 2
    assert backend.models == frozenset({"v2"})
    assert backend.discovered_at == 30.0


async def test_failed_discovery_is_retried_on_the_next_probe(
    fetcher: FakeFetcher, clock: FakeClock
) -> None:
    fetcher.script(HEALTH, page())
    fetcher.script(MODELS, page(status=503), page(_models_body("m")))
    prober, pool = _prober(fetcher, clock)
    await prober.initial_round()
    assert _backend(pool).discovered_at is None
    clock.now = 5.0
    await prober.initial_round()
    assert fetcher.count(MODELS) == 2
    assert _backend(pool).models == frozenset({"m"})


async def test_run_polls_until_cancelled(fetcher: FakeFetcher, clock: FakeClock) -> None:
    three_probes = asyncio.Event()

    def answer() -> FetchResult:
        if fetcher.count(HEALTH) >= 3:
            three_probes.set()
        return page()

    fetcher.script(HEALTH, answer)
    fetcher.script(MODELS, page(_models_body("m")))
    pool = BackendPool((BackendSpec(url=URL),), HealthPolicy(), clock)
    prober = Prober(pool, fetcher, ProbeSettings(interval_s=0.0, timeout_s=1.0))
    task = asyncio.create_task(prober.run())
    await asyncio.wait_for(three_probes.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _backend(pool).state.health(clock.now) is Health.HEALTHY
    assert _backend(pool).models == frozenset({"m"})


async def test_a_backend_added_at_runtime_is_probed_at_once(
    fetcher: FakeFetcher, clock: FakeClock
) -> None:
    pool = BackendPool((), HealthPolicy(), clock)
    prober = Prober(pool, fetcher, ProbeSettings(interval_s=3600.0, timeout_s=1.0))
    task = asyncio.create_task(prober.run())
    fetcher.script(HEALTH, page())
    fetcher.script(MODELS, page(_models_body("m")))
    backend = pool.add(BackendSpec(url=URL))
    for _ in range(100):  # not after the hour-long interval: at once
        await asyncio.sleep(0.001)
        if backend.models:
            break
    assert backend.state.health(clock.now) is Health.HEALTHY
    assert backend.models == frozenset({"m"})
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


# -- parse_model_list ---------------------------------------------------------------------


def test_parse_model_list_skips_malformed_cards() -> None:
    body = orjson.dumps(
        {"data": [{"id": "ok"}, {"id": 3}, "text", {"object": "model"}, {"id": "ok2", "x": 1}]}
    )
    assert parse_model_list(body) == {"ok": {"id": "ok"}, "ok2": {"id": "ok2", "x": 1}}


@pytest.mark.parametrize("body", [b"{}", b'{"data": {}}', b"[]", b"not json", b""])
def test_parse_model_list_rejects_bad_bodies(body: bytes) -> None:
    with pytest.raises(ValueError):
        parse_model_list(body)


async def test_on_down_is_told_when_a_backend_turns_unhealthy(
    fetcher: FakeFetcher, clock: FakeClock
) -> None:
    """The gateway drops a replica's prefix-index entries when it goes down (cache lost)."""
    downs: list[str] = []
    pool = BackendPool((BackendSpec(url=URL),), HealthPolicy(fail_threshold=1), clock)
    prober = Prober(pool, fetcher, ProbeSettings(), on_down=downs.append)
    fetcher.script(HEALTH, page())
    await prober.probe(_backend(pool))
    assert downs == []
    fetcher.script(HEALTH, page(status=503))
    await prober.probe(_backend(pool))
    await prober.probe(_backend(pool))  # still down: told once, on the transition
    assert downs == ["engine:8000"]


async def test_any_error_of_a_probe_is_a_failed_probe_of_that_backend(
    fetcher: FakeFetcher, clock: FakeClock
) -> None:
    # Issue 15, defect 1: only FetchError was caught; anything else ended every probe loop.
    fetcher.script(HEALTH, OverflowError("odd answer"))
    prober, pool = _prober(fetcher, clock)
    assert await prober.probe(_backend(pool)) is False
    assert _backend(pool).state.health(clock.now) is Health.UNHEALTHY
    assert _backend(pool).state.last_error == "health probe failed: OverflowError: odd answer"


async def test_any_error_of_a_model_listing_keeps_the_old_models(
    fetcher: FakeFetcher, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    fetcher.script(HEALTH, page())
    fetcher.script(MODELS, page(_models_body("m")), RuntimeError("odd"))
    prober, pool = _prober(fetcher, clock, refresh_s=0.0)
    for _ in range(10):
        await prober._probe_and_discover(_backend(pool))
    assert _backend(pool).models == frozenset({"m"})
    failed = [r for r in caplog.records if "model discovery failed" in r.getMessage()]
    assert len(failed) == 1  # once per failing streak, not once per refresh


async def test_one_backends_crashing_probe_does_not_stop_the_others(
    fetcher: FakeFetcher, clock: FakeClock
) -> None:
    bad = "http://bad:8000"
    fetcher.script(HEALTH, page())
    fetcher.script(MODELS, page(_models_body("m")))
    fetcher.script(bad + "/health", RuntimeError("odd"))
    pool = BackendPool((BackendSpec(url=bad), BackendSpec(url=URL)), HealthPolicy(), clock)
    prober = Prober(pool, fetcher, ProbeSettings(interval_s=0.0, timeout_s=1.0))
    task = asyncio.create_task(prober.run())
    for _ in range(1000):
        await asyncio.sleep(0)
        if fetcher.count(HEALTH) >= 10:
            break
    assert not task.done()
    assert fetcher.count(HEALTH) >= 10
    assert pool.get("bad:8000").state.health(clock.now) is Health.UNHEALTHY
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_probes_ask_the_fetcher_for_at_most_max_bytes(
    fetcher: FakeFetcher, clock: FakeClock
) -> None:
    fetcher.script(HEALTH, page())
    pool = BackendPool((BackendSpec(url=URL),), HealthPolicy(), clock)
    prober = Prober(pool, fetcher, ProbeSettings(max_bytes=99))
    await prober.probe(_backend(pool))
    assert fetcher.max_bytes == 99
