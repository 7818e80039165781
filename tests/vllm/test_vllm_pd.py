"""kvgate's prefill/decode split through the front door, on a real vLLM P/D pair.

`kvgate serve --backend P,role=prefill --backend D,role=decode --pd-protocol vllm --pd-mode
always` runs as a child process on a free port in front of `tests.vllm.pd_pair`'s two
NixlConnector servers (seeded random weights, greedy decoding):

1. whole and streamed completions and chats: the client's answer equals D's alone (the
   reference; D's prefix cache is reset after it), D counted the whole prompt as
   `external_kv_transfer` (the KV crossed), the answer names both legs
   (`x-kvgate-backend`, `x-kvgate-prefill-backend`), the access log too, and the gateway
   counts split decisions and no fallback;
2. a client that leaves a long stream: D stops generating (no request running, its
   generation counter still, far below `max_tokens`), P holds no KV blocks, and the gateway
   has nothing in flight.

Writes out/vllm-pd/front-door.json. `make test-vllm`.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bench import REPO_ROOT
from sim.live.processes import ChildProcess, start_gateway
from tests.vllm.conftest import PD_OUT
from tests.vllm.pd_pair import PdPair, aggregated, read_counters, text, token_ids

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1200)]

MAX_TOKENS = 16
LONG_MAX_TOKENS = 1800  # the stream the client leaves: ~10 s of decoding at the least
LEAVE_AFTER_EVENTS = 20
STOPPED_WITHIN_S = 10.0


@dataclass(frozen=True, slots=True)
class Gateway:
    url: str
    process: ChildProcess
    prefill_id: str  # the gateway's ids of P and D: their host:port
    decode_id: str


@pytest.fixture(scope="module")
def gateway(pd_pair: PdPair) -> Iterator[Gateway]:
    backends = [f"{pd_pair.prefill},role=prefill", f"{pd_pair.decode},role=decode"]
    extra = ["--pd-protocol", "vllm", "--pd-mode", "always", "--log-format", "json"]
    process, url = start_gateway(backends, "prefix-aware", PD_OUT / "kvgate.log", extra)
    try:
        _wait_healthy(url, 2)
        yield Gateway(
            url,
            process,
            prefill_id=pd_pair.prefill.removeprefix("http://"),
            decode_id=pd_pair.decode.removeprefix("http://"),
        )
    finally:
        process.stop()


async def test_split_answers_equal_d_alone_and_the_kv_crossed(
    pd_pair: PdPair, gateway: Gateway
) -> None:
    rng = random.Random(7)
    words = sorted(set(re.findall(r"[A-Za-z]{3,}", (REPO_ROOT / "README.md").read_text())))
    rows: list[dict[str, Any]] = []
    async with httpx.AsyncClient(timeout=300.0) as client:
        for path, stream in (
            ("/v1/completions", False),
            ("/v1/completions", True),
            ("/v1/chat/completions", False),
            ("/v1/chat/completions", True),
        ):
            content = " ".join(rng.choice(words) for _ in range(rng.randrange(400, 900)))
            body: dict[str, Any] = {"model": pd_pair.model, "max_tokens": MAX_TOKENS}
            body["temperature"] = 0
            if path == "/v1/completions":
                body["prompt"] = content
            else:
                body["messages"] = [{"role": "user", "content": content}]
            rows.append(await _through_gateway(client, pd_pair, gateway, path, body, stream))
        metrics = _metrics((await client.get(gateway.url + "/metrics")).text)
    logged = _access_log(gateway, {row["request_id"] for row in rows})
    _write("front-door.json", {"requests": rows, "gateway_metrics": metrics, "log": logged})
    for row in rows:
        assert row["status"] == 200, row
        assert row["text"] == row["reference_text"], row
        if row["token_ids"] is not None:
            assert row["token_ids"] == row["reference_ids"], row
        assert row["d_external_tokens"] == row["prompt_tokens"], row  # D pulled the prompt
        assert row["d_local_compute_tokens"] <= pd_pair.block_size, row
        assert row["x-kvgate-backend"] and row["x-kvgate-prefill-backend"], row
        assert row["x-kvgate-backend"] != row["x-kvgate-prefill-backend"], row
        line = logged[row["request_id"]]
        assert (line["backend"], line["prefill_backend"]) == (
            gateway.decode_id,
            gateway.prefill_id,
        ), line
    assert metrics.get('kvgate_pd_decisions_total{path="split"}', 0) >= len(rows), metrics
    assert metrics.get("kvgate_pd_prefill_fallbacks_total", 0) == 0, metrics
    streamed = sum(row["stream"] for row in rows)  # a whole answer has no first-token time
    assert metrics.get("kvgate_pd_decode_first_token_seconds_count", 0) >= streamed, metrics


async def test_a_client_leaving_mid_stream_stops_both_legs(
    pd_pair: PdPair, gateway: Gateway
) -> None:
    rng = random.Random(8)
    ids = [rng.randrange(10, pd_pair.spec.vocab_size) for _ in range(200)]
    body = {
        "model": pd_pair.model,
        "prompt": ids,
        "max_tokens": LONG_MAX_TOKENS,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
    }
    async with httpx.AsyncClient(timeout=300.0) as client:
        before = await read_counters(client, pd_pair.decode)
        events = 0
        async with client.stream("POST", gateway.url + "/v1/completions", json=body) as resp:
            assert resp.status_code == 200, await resp.aread()
            assert resp.headers.get("x-kvgate-prefill-backend"), resp.headers
            async for line in resp.aiter_lines():
                events += line.startswith("data: ")
                if events >= LEAVE_AFTER_EVENTS:
                    break  # leaving the block closes the connection mid-stream
        left = time.monotonic()
        stopped = await _d_stopped(client, pd_pair)
        stopped_s = time.monotonic() - left
        after = await read_counters(client, pd_pair.decode)
        p_after = await read_counters(client, pd_pair.prefill)
        in_flight = (await client.get(gateway.url + "/admin/backends")).json()["backends"]
    row = {
        "events_read": events,
        "d_stopped_after_s": round(stopped_s, 2),
        "d_generated_tokens": after.generation_tokens - before.generation_tokens,
        "d_external_tokens": after.external - before.external,
        "d_running": after.running,
        "p_running": p_after.running,
        "p_kv_usage": p_after.kv_usage,
        "gateway_in_flight": {b["id"]: b["in_flight"] for b in in_flight},
    }
    _write("front-door-leave.json", row)
    assert stopped, row
    assert row["d_external_tokens"] == len(ids), row  # the split happened
    assert row["d_generated_tokens"] < LONG_MAX_TOKENS / 2, row
    assert row["d_running"] == 0 and row["p_running"] == 0, row
    assert row["p_kv_usage"] == 0, row  # D had pulled P's blocks: P holds nothing
    assert not any(row["gateway_in_flight"].values()), row


async def _through_gateway(
    client: httpx.AsyncClient,
    pair: PdPair,
    gateway: Gateway,
    path: str,
    body: dict[str, Any],
    stream: bool,
) -> dict[str, Any]:
    """The reference from D alone, then the same request through the gateway."""
    reference = await aggregated(client, pair, path, body)
    before = await read_counters(client, pair.decode)
    started = time.monotonic()
    sent = {**body, "return_token_ids": True}
    if stream:
        sent["stream"] = True
        status, headers, answer_text, ids = await _streamed(client, gateway.url + path, sent)
    else:
        resp = await client.post(gateway.url + path, json=sent)
        status, headers = resp.status_code, resp.headers
        answer = resp.json()
        answer_text, ids = text(answer), token_ids(answer)
    seconds = time.monotonic() - started
    after = await read_counters(client, pair.decode)
    return {
        "path": path,
        "stream": stream,
        "status": status,
        "request_id": headers.get("x-request-id"),
        "x-kvgate-backend": headers.get("x-kvgate-backend"),
        "x-kvgate-prefill-backend": headers.get("x-kvgate-prefill-backend"),
        "seconds": round(seconds, 3),
        "prompt_tokens": reference["usage"]["prompt_tokens"],
        "d_external_tokens": after.external - before.external,
        "d_local_compute_tokens": after.local_compute - before.local_compute,
        "text": answer_text,
        "reference_text": text(reference),
        "token_ids": ids,
        "reference_ids": token_ids(reference),
    }


async def _streamed(
    client: httpx.AsyncClient, url: str, body: dict[str, Any]
) -> tuple[int, httpx.Headers, str, list[int] | None]:
    """A streamed answer: status, headers, the text and the token ids of its events (None
    if the events carry none)."""
    parts: list[str] = []
    ids: list[int] = []
    with_ids = True
    async with client.stream("POST", url, json=body) as resp:
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line.removeprefix("data: "))
            for choice in event.get("choices", []):
                delta = choice.get("delta", {})
                parts.append(choice.get("text") or delta.get("content") or "")
                if choice.get("token_ids") is None:
                    with_ids = with_ids and not (choice.get("text") or delta.get("content"))
                else:
                    ids += choice["token_ids"]
        return resp.status_code, resp.headers, "".join(parts), ids if with_ids else None


async def _d_stopped(client: httpx.AsyncClient, pair: PdPair) -> bool:
    """Until D runs no request and its generation counter holds still for a second."""
    deadline = time.monotonic() + STOPPED_WITHIN_S
    last = None
    while time.monotonic() < deadline:
        now = await read_counters(client, pair.decode)
        if now.running == 0 and last is not None and now.generation_tokens == last:
            return True
        last = now.generation_tokens if now.running == 0 else None
        await asyncio.sleep(1.0)
    return False


def _wait_healthy(url: str, count: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready = httpx.get(url + "/ready", timeout=5.0)
        if ready.status_code == 200 and ready.json().get("healthy_backends", 0) >= count:
            return
        time.sleep(0.1)
    raise TimeoutError(f"{url}: {count} backends not healthy after {timeout_s} s")


def _metrics(page: str) -> dict[str, float]:
    """The gateway's `kvgate_pd_*` samples, by name and labels."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(page):
        for s in family.samples:
            if s.name.startswith("kvgate_pd_") and not s.name.endswith(("_created", "_bucket")):
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()) if k == "path")
                key = s.name + (f"{{{labels}}}" if labels else "")
                out[key] = out.get(key, 0.0) + s.value
    return out


def _access_log(gateway: Gateway, request_ids: set[str]) -> dict[str, dict[str, Any]]:
    """The gateway's access-log lines (JSON) of these requests, by request id."""
    found: dict[str, dict[str, Any]] = {}
    for line in gateway.process.log_path.read_text(errors="replace").splitlines():
        if not line.startswith("{"):
            continue
        record = json.loads(line)
        if record.get("request_id") in request_ids and "backend" in record:
            found[record["request_id"]] = record
    return found


def _write(name: str, figures: dict[str, Any]) -> None:
    PD_OUT.mkdir(parents=True, exist_ok=True)
    path = PD_OUT / name
    path.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"\nkvgate P/D through the front door ({path}):")
    for key, value in figures.items():
        rows = value if isinstance(value, list) else [value]
        for row in rows:
            print(f"  {key}: {_short(row)}")


def _short(row: Any) -> Any:
    if not isinstance(row, dict):
        return row
    return {k: v for k, v in row.items() if k not in ("text", "reference_text")}
