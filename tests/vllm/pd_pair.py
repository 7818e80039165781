"""A prefill/decode pair of real vLLM CPU servers joined by NixlConnector; vLLM's P/D protocol.

`vllm_pd_pair(out_dir)` installs NIXL into the vLLM venv on first use
(`bench.calibrate.venv.ensure_nixl`), then starts two servers of the tiny Llama with seeded
random weights (`write_random_weights`: greedy answers depend on the whole prompt), prefix
caching, blocks of 32 tokens and `NIXL_CONNECTOR` (`kv_both`, CPU buffers): each engine on
its own core, each NIXL side channel on a free port of 127.0.0.1. It yields a `PdPair` once a
split request has succeeded (`_warm_up`); both are stopped by pid on exit. `prefill_body`
and `decode_body` are the two legs of vLLM's protocol, as the gateway sends them
(`routing.nixl_bodies`): P prefills with `max_tokens` 1 and `do_remote_decode` and answers
`kv_transfer_params`; D gets the client's body with those params and pulls P's blocks.
`read_counters` reads what an engine's `/metrics` counts of it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench.calibrate.server import NIXL_CONNECTOR, ServerSettings, vllm_servers
from bench.calibrate.tinymodel import ModelSpec, write_random_weights
from bench.live_vllm import prepare_vllm
from routing.nixl_bodies import decode_request, prefill_request
from sim.live.processes import free_port

log = logging.getLogger(__name__)

MODEL = "kvgate-vllm"
WARM_UP_ATTEMPTS = 5
prefill_body = prefill_request  # the legs' bodies, as the gateway sends them
decode_body = decode_request


@dataclass(frozen=True, slots=True)
class PdPair:
    prefill: str  # P's URL
    decode: str  # D's URL
    model: str  # the served model name
    block_size: int
    spec: ModelSpec
    side_channel_ports: tuple[int, int]  # P's, D's
    logs: tuple[Path, Path]
    warm_up_attempts: int  # split requests until D's first NIXL handshake with P succeeded


@dataclass(frozen=True, slots=True)
class EngineCounters:
    """What one vLLM server's `/metrics` counts (sums over its engines)."""

    prompt_tokens: dict[str, float]  # by source: local_compute, local_cache_hit, external_...
    running: float  # vllm:num_requests_running
    waiting: float  # vllm:num_requests_waiting
    generation_tokens: float  # vllm:generation_tokens_total
    nixl_bytes: float  # vllm:nixl_bytes_transferred_sum: KV bytes this server pulled
    kv_usage: float  # vllm:kv_cache_usage_perc: the share of KV blocks requests hold

    @property
    def external(self) -> float:
        return self.prompt_tokens.get("external_kv_transfer", 0.0)

    @property
    def local_compute(self) -> float:
        return self.prompt_tokens.get("local_compute", 0.0)


@contextlib.contextmanager
def vllm_pd_pair(
    out_dir: Path,
    *,
    block_size: int = 32,
    max_model_len: int = 2048,
    ready_timeout_s: float = 600.0,
) -> Iterator[PdPair]:
    """`with vllm_pd_pair(OUT) as pair:` — P and D healthy inside (started together), stopped
    by pid after."""
    python, model_dir, spec = prepare_vllm(out_dir, nixl=True)
    write_random_weights(model_dir, python)
    ports = (free_port(), free_port())
    while ports[1] == ports[0]:
        ports = (ports[0], free_port())
    logs = (out_dir / "vllm-prefill.log", out_dir / "vllm-decode.log")
    settings = [
        ServerSettings(
            block_size=block_size,
            max_model_len=max_model_len,
            served_model_name=MODEL,
            dev_mode=True,
            cpu_bind=str(i % (os.cpu_count() or 1)),
            load_format="auto",
            kv_transfer_config=NIXL_CONNECTOR,
            nixl_side_channel_port=port,
        )
        for i, port in enumerate(ports)
    ]
    started = time.monotonic()
    with vllm_servers(python, model_dir, settings, logs, ready_timeout_s=ready_timeout_s) as urls:
        attempts = _warm_up(urls[0], urls[1])
        log.info("P/D pair ready in %.0f s: P %s, D %s", time.monotonic() - started, *urls)
        yield PdPair(urls[0], urls[1], MODEL, block_size, spec, ports, logs, attempts)


def _warm_up(prefill_url: str, decode_url: str, attempts: int = WARM_UP_ATTEMPTS) -> int:
    """Split requests until one succeeds; how many it took. D meets P (the NIXL handshake)
    on its first split request and gives up if P's side channel has not answered within
    5 s, which a loaded machine can miss: D then answers 500 (see docs/prefill-decode.md)."""
    body = {"model": MODEL, "prompt": list(range(10, 74)), "max_tokens": 2}
    with httpx.Client(timeout=120.0) as client:
        for attempt in range(1, attempts + 1):
            headers = {"X-Request-Id": f"kvgate-warm-up-{attempt}"}
            answer = client.post(
                prefill_url + "/v1/completions", json=prefill_body(body), headers=headers
            )
            params = answer.raise_for_status().json()["kv_transfer_params"]
            resp = client.post(
                decode_url + "/v1/completions", json=decode_body(body, params), headers=headers
            )
            if resp.status_code == 200:
                return attempt
            log.warning("warm-up split request %d: D answered %d", attempt, resp.status_code)
    raise RuntimeError(f"D failed every one of {attempts} split requests: see its log")


async def prefill(
    client: httpx.AsyncClient, pair: PdPair, path: str, body: dict[str, Any], request_id: str
) -> dict[str, Any]:
    """The first leg: P's whole answer (its `kv_transfer_params` at the top level)."""
    resp = await client.post(
        pair.prefill + path, json=prefill_body(body), headers={"X-Request-Id": request_id}
    )
    answer: dict[str, Any] = resp.raise_for_status().json()
    return answer


async def aggregated(
    client: httpx.AsyncClient, pair: PdPair, path: str, body: dict[str, Any]
) -> dict[str, Any]:
    """The reference: D's answer to `body` alone (it prefills, `return_token_ids` on), then D
    forgets the prompt's blocks (`/reset_prefix_cache`), so that a split request after it
    must pull them from P."""
    resp = await client.post(pair.decode + path, json={**body, "return_token_ids": True})
    answer: dict[str, Any] = resp.raise_for_status().json()
    await reset_prefix_cache(client, pair.decode)
    return answer


def token_ids(answer: dict[str, Any]) -> list[int]:
    """The generated token ids of a completion or chat answer asked with `return_token_ids`."""
    ids: list[int] = answer["choices"][0]["token_ids"]
    return ids


def text(answer: dict[str, Any]) -> str:
    """The generated text of a completion or chat answer."""
    choice = answer["choices"][0]
    return str(choice["message"]["content"] if "message" in choice else choice["text"])


async def reset_prefix_cache(client: httpx.AsyncClient, url: str, attempts: int = 5) -> None:
    """`POST /reset_prefix_cache` until it reports success (it fails while blocks are held)."""
    for attempt in range(attempts):
        resp = (await client.post(url + "/reset_prefix_cache")).raise_for_status()
        if not resp.content or resp.json().get("success", True):
            return
        await asyncio.sleep(0.5 * (attempt + 1))
    raise AssertionError(f"{url}: /reset_prefix_cache failed {attempts} times")


async def read_counters(client: httpx.AsyncClient, url: str) -> EngineCounters:
    text = (await client.get(url + "/metrics")).raise_for_status().text
    by_source: dict[str, float] = {}
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "vllm:prompt_tokens_by_source_total":
                source = sample.labels["source"]
                by_source[source] = by_source.get(source, 0.0) + sample.value
            else:
                values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return EngineCounters(
        prompt_tokens=by_source,
        running=values.get("vllm:num_requests_running", 0.0),
        waiting=values.get("vllm:num_requests_waiting", 0.0),
        generation_tokens=values.get("vllm:generation_tokens_total", 0.0),
        nixl_bytes=values.get("vllm:nixl_bytes_transferred_sum", 0.0),
        kv_usage=values.get("vllm:kv_cache_usage_perc", 0.0),
    )
