"""End-to-end relaying: non-streaming and streaming, every API, headers, models, policies."""

from __future__ import annotations

from collections import Counter

import httpx
import openai

from tests.integration.conftest import StartGateway
from tests.support.fixture_types import StartEngines
from tests.support.waiting import wait_until

CHAT = {"model": "m1", "messages": [{"role": "user", "content": "hello"}]}


def test_chat_and_completions_non_streaming(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    (_e1, s1), (_e2, s2) = fake_engines(2, tokens=3)
    _, gw = start_gateway([s1.url, s2.url], security={"backend_header": "id"})
    c = client(gw)
    served = Counter()
    for _ in range(4):
        r = c.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 200
        assert r.json()["choices"][0]["message"]["content"].count("tok") == 3
        served[r.headers["x-fake-engine"]] += 1
    assert served == {"e1": 2, "e2": 2}  # round-robin
    r = c.post("/v1/completions", json={"model": "m1", "prompt": "once upon"})
    assert r.status_code == 200
    assert r.json()["object"] == "text_completion"
    assert r.headers["x-kvgate-backend"] in {s1.url[7:], s2.url[7:]}


def test_embeddings_and_responses_relayed(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    [(engine, s1)] = fake_engines(1)
    _, gw = start_gateway([s1.url])
    c = client(gw)
    r = c.post("/v1/embeddings", json={"model": "m1", "input": ["a", "b"]})
    assert r.status_code == 200 and len(r.json()["data"]) == 2
    r = c.post("/v1/responses", json={"model": "m1", "input": "hi"})
    assert r.status_code == 200 and r.json()["object"] == "response"
    assert [q.path for q in engine.inference_requests()] == ["/v1/embeddings", "/v1/responses"]


def test_body_relayed_byte_for_byte_and_headers_cleaned(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    [(engine, s1)] = fake_engines(1)
    _, gw = start_gateway([s1.url])
    body = b'{"model":"m1",  "messages":[{"role":"user","content":"x"}], "extra_field": [1,2]}'
    r = client(gw).post(
        "/v1/chat/completions",
        content=body,
        headers={
            "content-type": "application/json",
            "x-request-id": "req-123",
            "authorization": "Bearer sk-test",
            "connection": "keep-alive, x-hop",
            "x-hop": "drop me",
            "proxy-authorization": "drop me too",
        },
    )
    assert r.status_code == 200
    assert r.headers["x-request-id"] == "req-123"
    [seen] = engine.inference_requests()
    assert seen.body == {
        "model": "m1",
        "messages": [{"role": "user", "content": "x"}],
        "extra_field": [1, 2],
    }
    assert seen.headers["x-request-id"] == "req-123"
    assert seen.headers["authorization"] == "Bearer sk-test"
    assert "x-hop" not in seen.headers and "proxy-authorization" not in seen.headers
    assert seen.headers["content-length"] == str(len(body))


def test_request_id_generated_when_absent(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    [(engine, s1)] = fake_engines(1)
    _, gw = start_gateway([s1.url])
    r = client(gw).post("/v1/chat/completions", json=CHAT)
    rid = r.headers["x-request-id"]
    assert len(rid) == 32
    assert engine.inference_requests()[0].headers["x-request-id"] == rid


def test_streaming_chat_with_openai_client(
    fake_engines: StartEngines, start_gateway: StartGateway
) -> None:
    [(_, s1)] = fake_engines(1, tokens=6, token_delay=0.005)
    _, gw = start_gateway([s1.url])
    oa = openai.OpenAI(base_url=gw.url + "/v1", api_key="unused", max_retries=0)
    try:
        stream = oa.chat.completions.create(
            model="m1",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        text, usage = "", None
        for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
            if chunk.usage:
                usage = chunk.usage
        assert text.count("tok") == 6
        assert usage is not None and usage.completion_tokens == 6
        done = oa.completions.create(model="m1", prompt="abc", max_tokens=4)
        assert done.choices[0].text.count("tok") >= 1
        models = [m.id for m in oa.models.list()]
        assert models == ["m1"]
    finally:
        oa.close()


def test_streaming_completions_arrive_incrementally(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    """Chunks reach the client as the engine produces them, not all at the end."""
    [(_, s1)] = fake_engines(1, tokens=5, token_delay=0.15)
    _, gw = start_gateway([s1.url])
    import time

    arrivals = []
    body = {"model": "m1", "prompt": "x", "stream": True}
    with client(gw).stream("POST", "/v1/completions", json=body) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: {"):
                arrivals.append(time.monotonic())
    assert len(arrivals) == 5
    # Unbuffered: the first token arrived well before the last one was generated.
    assert arrivals[-1] - arrivals[0] > 0.4


def test_models_merged_and_requests_go_only_to_serving_backends(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    [(a, sa)] = fake_engines(1, models=("m1",))
    [(b, sb)] = fake_engines(1, models=("m1", "m2"))
    _, gw = start_gateway([sa.url, sb.url])
    c = client(gw)
    ids = sorted(m["id"] for m in c.get("/v1/models").json()["data"])
    assert ids == ["m1", "m2"]
    for _ in range(4):
        r = c.post("/v1/chat/completions", json={**CHAT, "model": "m2"})
        assert r.status_code == 200
        assert r.headers["x-fake-engine"] == b.name
    assert not a.inference_requests()


def test_unknown_model_is_404_listing_available(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    [(engine, s1)] = fake_engines(1, models=("m1", "m2"))
    _, gw = start_gateway([s1.url])
    r = client(gw).post("/v1/chat/completions", json={**CHAT, "model": "gpt-9"})
    assert r.status_code == 404
    err = r.json()["error"]
    assert err["code"] == "model_not_found"
    assert "gpt-9" in err["message"] and "m1, m2" in err["message"]
    assert not engine.inference_requests()


def test_session_policy_keeps_a_session_on_one_backend(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    servers = [s for _, s in fake_engines(4)]
    _, gw = start_gateway([s.url for s in servers], policy="session")
    c = client(gw)
    homes = {}
    for session in ("alice", "bob", "carol", "dave", "erin", "frank"):
        seen = {
            c.post("/v1/chat/completions", json=CHAT, headers={"x-session-id": session}).headers[
                "x-fake-engine"
            ]
            for _ in range(3)
        }
        assert len(seen) == 1
        homes[session] = seen.pop()
    assert len(set(homes.values())) > 1  # sessions spread over replicas
    # The OpenAI `user` field is the fallback session key.
    by_user = {
        c.post("/v1/chat/completions", json={**CHAT, "user": "zed"}).headers["x-fake-engine"]
        for _ in range(3)
    }
    assert len(by_user) == 1


def test_policy_header_selects_profile_and_rejects_unknown(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    servers = [s for _, s in fake_engines(3)]
    _app, gw = start_gateway(
        [s.url for s in servers], policy="round-robin", routing={"allow_policy_header": True}
    )
    c = client(gw)
    r = c.post("/v1/chat/completions", json=CHAT, headers={"x-kvgate-policy": "session"})
    assert r.status_code == 200
    r = c.post("/v1/chat/completions", json=CHAT, headers={"x-kvgate-policy": "nope"})
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "unknown_policy"
    metrics = c.get("/metrics").text
    assert "kvgate_routing_decisions_total{backend=" in metrics
    assert 'policy="session"' in metrics
    # The one decision made was timed, and shows under the Inference Extension's name too.
    assert 'kvgate_routing_decision_duration_seconds_count{policy="session"} 1.0' in metrics
    assert "inference_extension_scheduler_e2e_duration_seconds_count 1.0" in metrics


def test_admin_backends_and_dry_run_route(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    (e1, s1), (e2, s2) = fake_engines(2)
    _, gw = start_gateway([s1.url, s2.url], policy="session")
    c = client(gw)
    state = c.get("/admin/backends").json()["backends"]
    assert {b["health"] for b in state} == {"healthy"}
    assert all(b["models"] == ["m1"] for b in state)
    r = c.post("/admin/route", json={**CHAT, "user": "u1"})
    assert r.status_code == 200
    out = r.json()
    assert out["decision"]["policy"] == "session"
    assert out["decision"]["target"] == out["decision"]["ranked"][0]
    assert out["decision"]["reason"] == "session"  # the request's `user` is its session
    assert {e["id"] for e in out["endpoints"]} == {s1.url[7:], s2.url[7:]}
    for e in out["endpoints"]:
        assert set(e["scores"]) == {"session-affinity-scorer", "in-flight-scorer"}
    assert not e1.inference_requests() and not e2.inference_requests()  # nothing forwarded


def test_gateway_measures_ttft_and_itl(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    [(_, s1)] = fake_engines(1, tokens=4, token_delay=0.01)
    _, gw = start_gateway([s1.url])
    c = client(gw)
    with c.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True}) as r:
        r.read()
    # The gateway accounts for a request just after its last byte went out: poll briefly.
    wait_until(lambda: 'status="200"' in c.get("/metrics").text)
    text = c.get("/metrics").text
    ttft = _sample(text, "kvgate_time_to_first_token_seconds_count")
    itl = _sample(text, "kvgate_inter_token_latency_seconds_count")
    assert ttft == 1.0
    assert itl >= 3.0
    assert _sample(text, "kvgate_requests_total", 'status="200"') == 1.0


def _sample(text: str, name: str, must_contain: str = "") -> float:
    for line in text.splitlines():
        if line.startswith(name) and must_contain in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in metrics")


def test_health_and_ready(fake_engines: StartEngines, start_gateway: StartGateway, client) -> None:
    [(_, s1)] = fake_engines(1)
    _, gw = start_gateway([s1.url])
    c = client(gw)
    assert c.get("/health").json() == {"status": "ok"}
    r = c.get("/ready")
    assert r.status_code == 200 and r.json()["healthy_backends"] == 1


def test_upstream_errors_passed_through(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    [(engine, s1)] = fake_engines(1)
    _, gw = start_gateway([s1.url])
    engine.fail_status = 400
    r = client(gw).post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 400
    assert "error" in r.json()
    assert isinstance(httpx.Headers(r.headers), httpx.Headers)


def test_dry_run_explains_prefix_matches_learned_from_traffic(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    servers = [s for _, s in fake_engines(3)]
    _, gw = start_gateway(
        [s.url for s in servers], policy="prefix-aware", security={"backend_header": "id"}
    )
    c = client(gw)
    long_chat = {
        "model": "m1",
        "messages": [
            {"role": "system", "content": "You are helpful. " * 100},
            {"role": "user", "content": "hi"},
        ],
    }
    served = c.post("/v1/chat/completions", json=long_chat).headers["x-kvgate-backend"]
    out = c.post("/admin/route", json=long_chat).json()
    assert out["request"]["prefix_blocks"] >= 25  # ~1,700 bytes in 64-byte blocks
    matched = {e["id"]: e["matched_blocks"] for e in out["endpoints"]}
    assert matched[served] == out["request"]["prefix_blocks"]
    assert sorted(matched.values())[:2] == [0, 0]
    assert out["decision"]["target"] == served  # the replica holding the prefix wins
    target = next(e for e in out["endpoints"] if e["id"] == served)
    assert target["scores"]["prefix-match-scorer"] == 1.0
    state = {b["id"]: b for b in c.get("/admin/backends").json()["backends"]}
    assert state[served]["prefix_index_blocks"] == out["request"]["prefix_blocks"]


def test_dry_run_shows_what_a_placement_would_evict(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    """With a small tracked cache, a second prompt evicts the first where it was served; the
    dry run prices that (reuse-valued tokens) on that replica only, and the default routes
    the new prompt elsewhere."""
    servers = [s for _, s in fake_engines(2)]
    _, gw = start_gateway(
        [s.url for s in servers],
        policy="prefix-aware",
        routing={"prefix": {"block_tokens": 16, "capacity_blocks": 40}},
        security={"backend_header": "id"},
    )
    c = client(gw)

    def chat(system: str) -> dict[str, object]:
        return {
            "model": "m1",
            "messages": [
                {"role": "system", "content": system * 200},
                {"role": "user", "content": "hi"},
            ],
        }

    first = chat("Answer tersely. ")  # ~3,200 bytes: ~50 blocks of 64 bytes, over capacity
    served = {c.post("/v1/chat/completions", json=first).headers["x-kvgate-backend"]}
    served.add(c.post("/v1/chat/completions", json=first).headers["x-kvgate-backend"])
    assert len(served) == 1  # the second found it held: its blocks now count one reuse
    out = c.post("/admin/route", json=chat("Answer at length. ")).json()
    displaced = {e["id"]: e["displaced_tokens"] for e in out["endpoints"]}
    [home] = served
    assert displaced[home] > 0
    assert [v for k, v in displaced.items() if k != home] == [0.0]
    assert out["decision"]["target"] != home


def test_stream_usage_is_asked_for_and_hidden_from_clients_that_did_not(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    """The gateway needs every stream's usage: a client that did not ask for it gets the
    stream it would have had without the gateway; one that asked gets it untouched."""
    [(engine, s1)] = fake_engines(1, tokens=4)
    _, gw = start_gateway([s1.url])
    c = client(gw)

    def events(body: dict) -> list[str]:
        with c.stream("POST", "/v1/chat/completions", json=body) as r:
            return [line for line in r.iter_lines() if line.startswith("data: ")]

    plain = events({**CHAT, "stream": True})
    assert engine.inference_requests()[-1].body["stream_options"] == {"include_usage": True}
    assert len(plain) == 1 + 4 + 1 and plain[-1] == "data: [DONE]"  # role, tokens, done
    assert not any('"usage"' in e for e in plain)
    asked = events({**CHAT, "stream": True, "stream_options": {"include_usage": True}})
    assert engine.inference_requests()[-1].body["stream_options"] == {"include_usage": True}
    assert len(asked) == len(plain) + 1 and '"usage"' in asked[-2]
    unasked = events({**CHAT, "stream": True, "stream_options": {"include_usage": False}})
    assert engine.inference_requests()[-1].body["stream_options"] == {"include_usage": True}
    assert len(unasked) == len(plain) and not any('"usage"' in e for e in unasked)
    # Not streaming: the body goes as the client sent it.
    assert c.post("/v1/chat/completions", json=CHAT).status_code == 200
    assert "stream_options" not in engine.inference_requests()[-1].body
