"""Prefill/decode legs on data-parallel engines each name their own rank: vLLM's header on
P's and D's requests; SGLang's `routed_dp_rank` on each and P's rank to D
(`disagg_prefill_dp_rank`). Fake engines record what they were sent."""

from __future__ import annotations

import asyncio
import time

import httpx
import orjson

from tests.integration.conftest import StartGateway
from tests.support.asgi_types import Receive, Scope, Send
from tests.support.fake_engine import FakeEngine
from tests.support.fixture_types import ServeApp

MODEL = "m1"
PROMPT = "a prompt long enough to be worth a prefill leg " * 40


class _Prefill:
    """A vLLM P: records each POST's headers and body, answers `kv_transfer_params`."""

    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine
        self.seen: list[tuple[dict[str, str], dict[str, object]]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.engine.app(scope, receive, send)
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        self.seen.append((headers, orjson.loads(body)))
        answer = orjson.dumps(
            {
                "id": "p",
                "object": "text_completion",
                "choices": [],
                "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
                "kv_transfer_params": {"do_remote_prefill": True, "remote_block_ids": [1]},
            }
        )
        head = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": head})
        await send({"type": "http.response.body", "body": answer})


class _BootstrappedDecode:
    """An SGLang D: like the real one, it answers only once P has the request (the KV comes
    from P through the bootstrap room), so the test never races the P leg's connection."""

    def __init__(self, engine: FakeEngine, prefill: FakeEngine) -> None:
        self.engine = engine
        self.prefill = prefill

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            wanted = len(self.engine.inference_requests()) + 1
            for _ in range(400):
                if len(self.prefill.inference_requests()) >= wanted:
                    break
                await asyncio.sleep(0.01)
        await self.engine.app(scope, receive, send)


def _ready(url: str, targets: int) -> None:
    for _ in range(400):
        r = httpx.get(url + "/ready")
        if r.status_code == 200 and r.json().get("healthy_backends", 0) >= targets:
            return
        time.sleep(0.025)
    raise TimeoutError("backends not healthy")


def test_vllm_legs_each_carry_their_rank_header(
    serve_app: ServeApp, start_gateway: StartGateway
) -> None:
    p = _Prefill(FakeEngine(models=[MODEL], name="p"))
    d = FakeEngine(models=[MODEL], name="d")
    p_url, d_url = serve_app(p).url, serve_app(d.app).url
    backends = [
        {"url": p_url, "role": "prefill", "dp_size": 2},
        {"url": d_url, "role": "decode", "dp_size": 4},
    ]
    _, gw = start_gateway(backends, policy="round-robin", disaggregation={"mode": "always"})
    _ready(gw.url, 6)
    with httpx.Client(base_url=gw.url, timeout=30) as c:
        for _ in range(4):
            r = c.post("/v1/completions", json={"model": MODEL, "prompt": PROMPT, "max_tokens": 2})
            assert r.status_code == 200, r.text
    p_ranks = {h["x-data-parallel-rank"] for h, _ in p.seen}
    d_sent = d.inference_requests()
    d_ranks = {r.headers["x-data-parallel-rank"] for r in d_sent}
    assert len(p.seen) == len(d_sent) == 4
    assert p_ranks and p_ranks <= {"0", "1"}
    assert len(d_ranks) >= 2 and d_ranks <= {"0", "1", "2", "3"}  # D's ranks in turn
    assert all("kv_transfer_params" in r.body for r in d_sent)
    assert all("routed_dp_rank" not in r.body for r in d_sent)


def test_sglang_legs_carry_their_rank_and_d_is_told_ps(
    serve_app: ServeApp, start_gateway: StartGateway
) -> None:
    p = FakeEngine(models=[MODEL], name="p")
    d = FakeEngine(models=[MODEL], name="d")
    p_url, d_url = serve_app(p.app).url, serve_app(_BootstrappedDecode(d, p)).url
    backends = [
        {"url": p_url, "role": "prefill", "dp_size": 2, "engine": "sglang", "models": [MODEL]},
        {"url": d_url, "role": "decode", "dp_size": 2, "engine": "sglang", "models": [MODEL]},
    ]
    _, gw = start_gateway(
        backends,
        policy="round-robin",
        disaggregation={"mode": "always", "protocol": "sglang"},
    )
    _ready(gw.url, 4)
    with httpx.Client(base_url=gw.url, timeout=30) as c:
        for _ in range(2):
            r = c.post("/v1/completions", json={"model": MODEL, "prompt": PROMPT, "max_tokens": 2})
            assert r.status_code == 200, r.text
    p_bodies = [r.body for r in p.inference_requests()]
    d_bodies = [r.body for r in d.inference_requests()]
    assert len(p_bodies) == len(d_bodies) == 2
    for pb, db in zip(p_bodies, d_bodies, strict=True):
        assert pb["bootstrap_room"] == db["bootstrap_room"]
        assert db["disagg_prefill_dp_rank"] == pb["routed_dp_rank"]
        assert "x-data-parallel-rank" not in d.inference_requests()[0].headers
    assert {b["routed_dp_rank"] for b in d_bodies} <= {0, 1}
