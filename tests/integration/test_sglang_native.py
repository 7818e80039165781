"""SGLang's native API through a real gateway in front of emulated SGLang engines: `/generate`
with text and with input_ids, streamed and not, in SGLang's shapes; routed prefix-aware and
graded by `meta_info.cached_tokens`; the precise index keyed by input_ids without a tokenizer;
rerank, score and vLLM's utility endpoints relayed."""

from __future__ import annotations

import random
import re
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from gateway.app import GatewayApp
from gateway.auth import hash_key
from sim.emulator.app import EmulatorApp
from sim.emulator.engines import Engine
from sim.emulator.replica import Replica
from sim.engine.profiles import get_profile
from sim.engine.tokenizer import BuiltinTokenizer
from sim.workloads import synth_text
from tests.integration.conftest import StartGateway
from tests.support.fixture_types import ServeApp
from tests.support.kv_emulator import Sockets, events_settled, replicas_with_events
from tests.support.servers import ServerThread

MODEL = "emu"
META_KEYS = [
    "id",
    "finish_reason",
    "prompt_tokens",
    "weight_version",
    "total_retractions",
    "completion_tokens",
    "cached_tokens",
]
# The routing sections every gateway here shares: metrics stay fresh on a busy machine.
HEALTH = {"metrics_stale_after_s": 5.0}
SECURITY = {"backend_header": "id"}


def _engine(serve_app: ServeApp, engine: Engine = "sglang", blocks: int = 640) -> ServerThread:
    base = get_profile("demo")
    profile = replace(base, config=replace(base.config, num_blocks=blocks))
    replica = Replica(profile, MODEL, speedup=50.0, engine=engine)
    return serve_app(EmulatorApp(replica, BuiltinTokenizer()), lifespan="on")


@pytest.fixture
def clients() -> Iterator[list[httpx.Client]]:
    """Clients closed after the test, whatever happens in it."""
    made: list[httpx.Client] = []
    yield made
    for c in made:
        c.close()


def _gateway(
    start_gateway: StartGateway,
    engines: list[tuple[ServerThread, Engine]],
    policy: str,
    clients: list[httpx.Client],
    **kw: Any,
) -> tuple[GatewayApp, httpx.Client]:
    backends = [{"url": s.url, "id": f"b{i}", "engine": e} for i, (s, e) in enumerate(engines)]
    app, server = start_gateway(
        backends, policy=policy, health=HEALTH, security={**SECURITY, **kw.pop("security", {})}
    )
    client = httpx.Client(base_url=server.url, timeout=30.0)
    clients.append(client)
    deadline = time.monotonic() + 10
    while len(app.runtime.pool.served_models()) < 1 or len(app.runtime.pool.healthy()) < len(
        engines
    ):
        assert time.monotonic() < deadline, "backends never became healthy"
        time.sleep(0.02)
    return app, client


def _shape(value: Any) -> Any:
    """Keys and nesting, values replaced by their JSON type."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(v) for v in value[:1]]
    return type(value).__name__


def _events(raw: bytes) -> list[Any]:
    chunks = raw.decode().split("\n\n")
    assert chunks[-2:] == ["data: [DONE]", ""], raw[-200:]
    return [orjson.loads(c.removeprefix("data: ")) for c in chunks[:-2]]


def _stream(client: httpx.Client, body: dict[str, Any]) -> tuple[httpx.Response, bytes]:
    with client.stream("POST", "/generate", json={**body, "stream": True}) as r:
        return r, r.read()


def _metric(text: str, name: str) -> float:
    return sum(float(v) for v in re.findall(rf"^{name}(?:\{{[^}}]*\}})? (\S+)$", text, re.M))


def test_generate_keeps_sglangs_shapes(
    serve_app: ServeApp, start_gateway: StartGateway, clients: list[httpx.Client]
) -> None:
    engine = _engine(serve_app)
    _, gw = _gateway(start_gateway, [(engine, "sglang")], "round-robin", clients)
    direct = httpx.Client(base_url=engine.url, timeout=30.0)
    clients.append(direct)
    ids = BuiltinTokenizer().encode(synth_text(random.Random(3), 60))
    params = {"max_new_tokens": 3}
    for prompt in ({"text": "Once upon a time"}, {"input_ids": ids}):
        body = {**prompt, "sampling_params": params, "rid": "r1"}
        r = gw.post("/generate", json=body)
        assert r.status_code == 200 and r.headers["x-kvgate-backend"] == "b0"
        answer = r.json()
        assert list(answer) == ["text", "output_ids", "meta_info"]
        assert list(answer["meta_info"]) == [*META_KEYS, "e2e_latency"]
        assert answer["meta_info"]["id"] == "r1"
        assert answer["meta_info"]["finish_reason"] == {"type": "length", "length": 3}
        assert _shape(answer) == _shape(direct.post("/generate", json=body).json())

        resp, raw = _stream(gw, body)
        assert resp.headers["content-type"].startswith("text/event-stream")
        events = _events(raw)
        assert [len(e["output_ids"]) for e in events] == [1, 2, 3]  # so far, in each event
        assert [list(e) for e in events] == [["text", "output_ids", "meta_info"]] * 3
        assert [list(e["meta_info"]) for e in events] == [META_KEYS] * 2 + [
            [*META_KEYS, "e2e_latency"]
        ]
        assert events[-1]["text"] == answer["text"]  # a prompt's answer is deterministic
        _, direct_raw = _stream(direct, body)
        assert [_shape(e) for e in events] == [_shape(e) for e in _events(direct_raw)]

    batch = {"input_ids": [ids, ids[:20]], "sampling_params": params, "rid": "b"}
    answers = gw.post("/generate", json=batch).json()
    assert [a["meta_info"]["id"] for a in answers] == ["b_0", "b_1"]
    _, raw = _stream(gw, {**batch, "text": ["x y", "z"]})
    assert sorted(e["index"] for e in _events(raw)) == [0, 0, 0, 1, 1, 1]


def test_same_prefix_lands_on_the_same_backend(
    serve_app: ServeApp, start_gateway: StartGateway, clients: list[httpx.Client]
) -> None:
    engines: list[tuple[ServerThread, Engine]] = [(_engine(serve_app), "sglang") for _ in range(4)]
    _, gw = _gateway(start_gateway, engines, "prefix-aware", clients)
    tok = BuiltinTokenizer()
    rng = random.Random(11)
    heads = [synth_text(random.Random(100 + t), 300) for t in range(4)]
    order = [t for t in range(4) for _ in range(4)]
    rng.shuffle(order)
    placed: dict[int, set[str]] = {t: set() for t in range(4)}
    cached: dict[int, list[int]] = {t: [] for t in range(4)}
    for i, tenant in enumerate(order):
        tail = f" question {i}: " + synth_text(rng, 10)
        if tenant % 2:  # half the tenants send token ids, half text
            prompt: dict[str, Any] = {"input_ids": tok.encode(heads[tenant] + tail)}
        else:
            prompt = {"text": heads[tenant] + tail}
        body = {**prompt, "sampling_params": {"max_new_tokens": 2}}
        r = gw.post("/generate", json=body) if i % 3 else None
        if r is None:  # every third request streamed
            resp, raw = _stream(gw, body)
            meta, backend = _events(raw)[-1]["meta_info"], resp.headers["x-kvgate-backend"]
        else:
            assert r.status_code == 200, r.text
            meta, backend = r.json()["meta_info"], r.headers["x-kvgate-backend"]
        placed[tenant].add(backend)
        cached[tenant].append(meta["cached_tokens"])
    assert all(len(b) == 1 for b in placed.values()), placed
    assert len(set.union(*placed.values())) >= 2, placed  # tenants are spread out
    # After each tenant's first request, its prefix is cached where it lands (~300 tokens).
    assert all(c[0] == 0 and min(c[1:]) >= 280 for c in cached.values()), cached


def test_cache_hits_are_graded_from_meta_info(
    serve_app: ServeApp, start_gateway: StartGateway, clients: list[httpx.Client]
) -> None:
    engine = _engine(serve_app)
    _, gw = _gateway(start_gateway, [(engine, "sglang")], "prefix-aware", clients)
    ids = BuiltinTokenizer().encode(synth_text(random.Random(5), 400))
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 2}}
    assert gw.post("/generate", json=body).json()["meta_info"]["cached_tokens"] == 0
    page = gw.get("/metrics").text
    assert _metric(page, "kvgate_observed_cache_hit_tokens_total") == 0
    assert _metric(page, "kvgate_observed_prompt_tokens_total") == len(ids)
    _, raw = _stream(gw, body)
    hit = _events(raw)[-1]["meta_info"]["cached_tokens"]
    text = {"text": synth_text(random.Random(5), 400), "sampling_params": {"max_new_tokens": 2}}
    gw.post("/generate", json=text)
    gw.post("/generate", json=text)
    page = gw.get("/metrics").text
    assert hit >= len(ids) - 16
    assert _metric(page, "kvgate_observed_cache_hit_tokens_total") >= hit
    assert _metric(page, "kvgate_predicted_cache_hit_tokens_total") > 0
    assert _metric(page, "kvgate_prefix_index_corrections_total") == 0
    state = gw.get("/admin/backends").json()["backends"][0]["cache_hits"]
    assert state["requests"] == 4
    # A batch's counts are not its first prompt's: not graded.
    gw.post("/generate", json={"input_ids": [ids, ids], "sampling_params": {"max_new_tokens": 1}})
    assert gw.get("/admin/backends").json()["backends"][0]["cache_hits"]["requests"] == 4


def test_generate_goes_only_to_sglang_backends(
    serve_app: ServeApp, start_gateway: StartGateway, clients: list[httpx.Client]
) -> None:
    engines: list[tuple[ServerThread, Engine]] = [
        (_engine(serve_app, "vllm"), "vllm"),
        (_engine(serve_app), "sglang"),
    ]
    _, gw = _gateway(start_gateway, engines, "round-robin", clients)
    body = {"text": "hello", "sampling_params": {"max_new_tokens": 1}}
    assert {gw.post("/generate", json=body).headers["x-kvgate-backend"] for _ in range(4)} == {"b1"}
    chat = {"model": MODEL, "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}
    served = {
        gw.post("/v1/chat/completions", json=chat).headers["x-kvgate-backend"] for _ in range(4)
    }
    assert served == {"b0", "b1"}
    route = gw.post("/admin/route?api=generate", json=body).json()
    excluded = {e["id"]: e["excluded_by"] for e in route["endpoints"]}
    assert excluded["b0"] == "not an sglang engine", route


def test_errors_take_sglangs_shape(
    serve_app: ServeApp, start_gateway: StartGateway, clients: list[httpx.Client]
) -> None:
    engine = _engine(serve_app)
    keys = {"api_keys": [{"name": "team", "sha256": hash_key("k")}]}
    _, gw = _gateway(start_gateway, [(engine, "sglang")], "round-robin", clients, security=keys)
    auth = {"authorization": "Bearer k"}
    r = gw.post("/generate", json={"sampling_params": {}}, headers=auth)
    assert r.status_code == 400
    assert r.json() == {
        "error": {"message": "Either text, input_ids or input_embeds should be provided."}
    }
    r = gw.post(
        "/generate", content=b"{not json", headers={**auth, "content-type": "application/json"}
    )
    assert r.status_code == 400 and list(r.json()["error"]) == ["message"]
    r = gw.post("/generate", json={"text": "x"})  # no key: refused before any routing
    assert r.status_code == 401 and list(r.json()["error"]) == ["message"]
    # What the engine refuses comes back as it said it.
    body = {"text": "x", "lora_path": "missing"}
    r = gw.post("/generate", json=body, headers=auth)
    assert (r.status_code, r.content) == (
        400,
        httpx.post(engine.url + "/generate", json=body).content,
    )
    # The OpenAI APIs keep kvgate's shape.
    r = gw.post("/v1/completions", json={"model": MODEL}, headers=auth)
    assert set(r.json()["error"]) == {"message", "type", "code"}


def test_utility_endpoints_are_relayed(
    serve_app: ServeApp, start_gateway: StartGateway, clients: list[httpx.Client]
) -> None:
    sglang_engine, vllm_engine = _engine(serve_app), _engine(serve_app, "vllm")
    _, sg = _gateway(start_gateway, [(sglang_engine, "sglang")], "prefix-aware", clients)
    _, vl = _gateway(start_gateway, [(vllm_engine, "vllm")], "prefix-aware", clients)
    for gw, engine in ((sg, sglang_engine), (vl, vllm_engine)):
        tokens = gw.post("/tokenize", json={"prompt": "hello there"})  # no model: the pool's
        assert tokens.status_code == 200, tokens.text
        assert (
            tokens.json()
            == httpx.post(engine.url + "/tokenize", json={"prompt": "hello there"}).json()
        )
        produced = gw.post("/v1/completions", json={"model": MODEL, "prompt": "a", "max_tokens": 2})
        text = produced.json()["choices"][0]["text"]
        ids = BuiltinTokenizer().encode(text)
        back = gw.post("/detokenize", json={"model": MODEL, "tokens": ids}).json()
        assert [v.strip() for v in back.values()] == [text.strip()]
    rerank = {"query": "red apple", "documents": ["a pear", "red apple"], "top_n": 1}
    r = sg.post("/v1/rerank", json=rerank)
    assert r.status_code == 200 and r.json()[0]["index"] == 1, r.text
    score = {"query": "q", "items": ["a", "b"], "label_token_ids": [1, 2], "model": MODEL}
    r = sg.post("/v1/score", json=score)
    assert r.json()["scores"] == [[0.5, 0.5], [0.5, 0.5]], r.text
    pooled = vl.post("/pooling", json={"model": MODEL, "input": ["a", "b"]}).json()
    assert len(pooled["data"]) == 2
    classified = vl.post("/classify", json={"input": "a"}).json()
    assert classified["data"][0]["num_classes"] == 2
    r = vl.post("/tokenize", json={"model": "other", "prompt": "x"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


@pytest.fixture
def sglang_with_events(tmp_path: Path) -> Iterator[tuple[list[str], Sockets]]:
    with replicas_with_events(tmp_path, "--engine", "sglang", "--num-gpu-blocks", "64") as r:
        yield r


def test_input_ids_key_the_precise_index_without_a_tokenizer(
    sglang_with_events: tuple[list[str], list[tuple[str, str]]], start_gateway: StartGateway
) -> None:
    urls, sockets = sglang_with_events
    backends = [
        {"url": u, "engine": "sglang", "kv_events": {"endpoint": pub, "replay": rep}}
        for u, (pub, rep) in zip(urls, sockets, strict=True)
    ]
    app, server = start_gateway(backends, policy="precise-prefix", health=HEALTH)
    tok = BuiltinTokenizer()
    rng = random.Random(7)
    heads = [tok.encode(synth_text(random.Random(t), 300)) for t in range(6)]
    with httpx.Client(base_url=server.url, timeout=10.0) as c:
        assert c.get("/metrics").text.count("sglang") == 0  # the gateway's own page
        for i in range(30):  # 6 tenants of ~300 tokens on 2 × 64 blocks of 16: evictions
            ids = heads[rng.randrange(6)] + tok.encode(f" turn {i}: " + synth_text(rng, 10))
            body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 4}}
            r = c.post("/generate", json=body)
            assert r.status_code == 200, r.text
            events_settled(app)
        state = c.get("/admin/backends").json()["backends"]
    graded = [b["precise_index"]["predictions"] for b in state]
    requests = sum(g["requests"] for g in graded)
    exact = sum(g["exact"] for g in graded)
    assert requests >= 26  # graded once a backend's events told its block size
    assert exact >= 0.95 * requests, graded
    assert sum(b["precise_index"]["events"]["removed_blocks"] for b in state) > 0
