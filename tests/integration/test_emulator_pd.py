"""P/D fleets of `kvgate emulate` (1 prefill + 1 decode replica), driven by hand as a router
drives them: vLLM's NixlConnector flow (P, then D with P's kv_transfer_params) and SGLang's
bootstrap flow (P and D at once, with the same bootstrap room)."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sim.live.processes import PDFleet, start_pd_emulator
from sim.workloads import synth_text

MODEL = "emu"
SPEEDUP = 5.0
LEASE_S = 10.0  # modelled: 2 s of real time at SPEEDUP
BLOCK = 16  # the demo profile's block size
NIXL_STUB = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}


def _fleet(protocol: str, tmp: Path) -> Iterator[PDFleet]:
    extra = ["--kv-lease", str(LEASE_S)]
    child, fleet = start_pd_emulator(
        1, 1, protocol, tmp / f"{protocol}.log", model=MODEL, speedup=SPEEDUP, extra=extra
    )
    try:
        yield fleet
    finally:
        child.stop()


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PDFleet]:
    yield from _fleet("vllm", tmp_path_factory.mktemp("vllm"))


@pytest.fixture(scope="module")
def sglang(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PDFleet]:
    yield from _fleet("sglang", tmp_path_factory.mktemp("sglang"))


def _body(kind: str, text: str, stream: bool, max_tokens: int = 6) -> tuple[str, dict[str, Any]]:
    body: dict[str, Any] = {"model": MODEL, "max_tokens": max_tokens, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    if kind == "chat":
        return "/v1/chat/completions", {**body, "messages": [{"role": "user", "content": text}]}
    return "/v1/completions", {**body, "prompt": text}


def _sources(url: str) -> dict[str, float]:
    found = {}
    for family in text_string_to_metric_families(httpx.get(url + "/metrics").text):
        for s in family.samples:
            if s.name == "vllm:prompt_tokens_by_source_total":
                found[s.labels["source"]] = s.value
    return found


def _delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before.get(k, 0.0) for k in after}


def _handoffs(url: str) -> dict[str, Any]:
    view: dict[str, Any] = httpx.get(url + "/kvgate/pd/handoffs").json()
    return view


def _answer(r: httpx.Response, stream: bool) -> tuple[int, int]:
    """(completion tokens, prompt tokens) of a streamed or whole answer."""
    assert r.status_code == 200, r.text
    if not stream:
        use = r.json()["usage"]
        return use["completion_tokens"], use["prompt_tokens"]
    lines = [ln[6:] for ln in r.text.splitlines() if ln.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    use = json.loads(lines[-2])["usage"]
    return use["completion_tokens"], use["prompt_tokens"]


def _wait(check: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def _vllm_prefill(fleet: PDFleet, path: str, body: dict[str, Any], rid: str) -> dict[str, Any]:
    ((p_url, _),) = fleet.prefill
    # What vLLM's toy proxy and vllm-router send P.
    p_body = {**body, "max_tokens": 1, "stream": False, "kv_transfer_params": NIXL_STUB}
    p_body.pop("stream_options", None)
    r = httpx.post(p_url + path, json=p_body, headers={"X-Request-Id": rid}, timeout=30)
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    assert answer["usage"]["completion_tokens"] == 1
    return answer


@pytest.mark.parametrize("kind", ["completion", "chat"])
@pytest.mark.parametrize("stream", [False, True])
def test_vllm_decode_pulls_what_it_lacks_and_prefill_frees_its_blocks(
    vllm: PDFleet, kind: str, stream: bool
) -> None:
    (p_url, _), d_url = vllm.prefill[0], vllm.decode[0]
    seed = hash((kind, stream)) % 1000
    path, body = _body(kind, synth_text(random.Random(seed), 200), stream)
    before = _sources(d_url)
    p_answer = _vllm_prefill(vllm, path, body, f"req-{seed}")
    params = p_answer["kv_transfer_params"]
    prompt_tokens = p_answer["usage"]["prompt_tokens"]
    assert params["do_remote_prefill"] is True and params["do_remote_decode"] is False
    assert len(params["remote_block_ids"]) == -(-prompt_tokens // BLOCK)
    assert f"{params['remote_host']}:{params['remote_port']}" == p_url.removeprefix("http://")
    held = _handoffs(p_url)
    assert held["held_blocks"] == len(params["remote_block_ids"])
    assert [h["key"] for h in held["handoffs"]] == [params["remote_request_id"]]

    d_body = {**body, "kv_transfer_params": params}
    r = httpx.post(d_url + path, json=d_body, headers={"X-Request-Id": f"req-{seed}"}, timeout=30)
    assert _answer(r, stream) == (6, prompt_tokens)
    # A fresh prompt: every token came over the link (vLLM counts the recomputed last one too).
    assert _delta(_sources(d_url), before) == {
        "local_compute": 0.0,
        "local_cache_hit": 0.0,
        "external_kv_transfer": float(prompt_tokens),
    }
    after = _handoffs(p_url)
    assert after["held_blocks"] == 0 and after["handoffs"] == []


def test_vllm_decode_pulls_only_the_blocks_past_its_cached_prefix(vllm: PDFleet) -> None:
    (p_url, _), d_url = vllm.prefill[0], vllm.decode[0]
    shared = synth_text(random.Random(7), 150)
    for turn, text in enumerate((shared, shared + " " + synth_text(random.Random(8), 60))):
        path, body = _body("completion", text, stream=False)
        before = _sources(d_url)
        params = _vllm_prefill(vllm, path, body, f"turn-{turn}")["kv_transfer_params"]
        r = httpx.post(d_url + path, json={**body, "kv_transfer_params": params}, timeout=30)
        _, prompt_tokens = _answer(r, stream=False)
        delta = _delta(_sources(d_url), before)
    # The second turn: D held the first turn's full blocks and pulled only the rest.
    first_len = len(
        httpx.post(d_url + "/tokenize", json={"model": MODEL, "prompt": shared}).json()["tokens"]
    )
    hit = (first_len // BLOCK) * BLOCK
    assert delta == {
        "local_compute": 0.0,
        "local_cache_hit": float(hit),
        "external_kv_transfer": float(prompt_tokens - hit),
    }
    assert _handoffs(p_url)["held_blocks"] == 0


def test_vllm_unread_handoff_expires_and_decode_computes_the_prompt(vllm: PDFleet) -> None:
    (p_url, _), d_url = vllm.prefill[0], vllm.decode[0]
    path, body = _body("completion", synth_text(random.Random(11), 120), stream=False)
    params = _vllm_prefill(vllm, path, body, "late")["kv_transfer_params"]
    assert _handoffs(p_url)["held_blocks"] > 0
    _wait(lambda: _handoffs(p_url)["held_blocks"] == 0, timeout_s=LEASE_S / SPEEDUP + 5)
    before = _sources(d_url)
    r = httpx.post(d_url + path, json={**body, "kv_transfer_params": params}, timeout=30)
    _, prompt_tokens = _answer(r, stream=False)
    delta = _delta(_sources(d_url), before)
    assert delta["external_kv_transfer"] == 0.0
    assert delta["local_compute"] == float(prompt_tokens)


async def _pair(fleet: PDFleet, path: str, body: dict[str, Any]) -> tuple[httpx.Response, ...]:
    (p_url, bootstrap), d_url = fleet.prefill[0], fleet.decode[0]
    assert bootstrap is not None
    room = random.randrange(2**63)
    body = {
        **body,
        "bootstrap_host": "127.0.0.1",
        "bootstrap_port": bootstrap,
        "bootstrap_room": room,
    }
    async with httpx.AsyncClient(timeout=30) as client:
        return tuple(
            await asyncio.gather(
                client.post(p_url + path, json=body), client.post(d_url + path, json=body)
            )
        )


@pytest.mark.parametrize("kind", ["completion", "chat"])
@pytest.mark.parametrize("stream", [False, True])
def test_sglang_decode_gets_every_block_pushed(sglang: PDFleet, kind: str, stream: bool) -> None:
    (p_url, _), d_url = sglang.prefill[0], sglang.decode[0]
    # The same prompt each time: D keeps no prefix cache, so every block crosses anyway.
    path, body = _body(kind, synth_text(random.Random(3), 200), stream)
    before = _sources(d_url)
    p_answer, d_answer = asyncio.run(_pair(sglang, path, body))
    assert _answer(p_answer, stream)[0] == 1  # SGLang's prefill server stops at one token
    _, prompt_tokens = _answer(d_answer, stream)
    assert _answer(d_answer, stream)[0] == 6
    assert _delta(_sources(d_url), before) == {
        "local_compute": 0.0,
        "local_cache_hit": 0.0,
        "external_kv_transfer": float(prompt_tokens),
    }
    view = _handoffs(p_url)
    assert view["held_blocks"] == 0 and view["handoffs"] == [] and view["pending"] == []


def test_sglang_prefill_gives_up_a_room_no_decode_joins(sglang: PDFleet) -> None:
    (p_url, bootstrap), _ = sglang.prefill[0], sglang.decode[0]
    path, body = _body("completion", synth_text(random.Random(5), 80), stream=False)
    body.update(bootstrap_host="127.0.0.1", bootstrap_port=bootstrap, bootstrap_room=42)
    started = time.monotonic()
    r = httpx.post(p_url + path, json=body, timeout=30)
    assert r.status_code == 500 and "bootstrap room 42" in r.text
    assert time.monotonic() - started >= LEASE_S / SPEEDUP * 0.9
    view = _handoffs(p_url)
    assert view["held_blocks"] == 0 and view["pending"] == []


def test_sglang_decode_that_hangs_up_leaves_its_room(sglang: PDFleet) -> None:
    (p_url, bootstrap), d_url = sglang.prefill[0], sglang.decode[0]
    path, body = _body("completion", synth_text(random.Random(6), 80), stream=True)
    body.update(bootstrap_host="127.0.0.1", bootstrap_port=bootstrap, bootstrap_room=43)

    async def hang_up() -> None:
        async with httpx.AsyncClient(timeout=30) as client:
            waiting = asyncio.ensure_future(client.post(d_url + path, json=body))
            for _ in range(200):  # until D has joined P's room and waits for its KV
                view = (await client.get(p_url + "/kvgate/pd/handoffs")).json()
                if "43" in view["pending"]:
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("D never joined the room")
            waiting.cancel()
            await asyncio.wait((waiting,))

    asyncio.run(hang_up())
    _wait(lambda: _handoffs(p_url)["pending"] == [])
    load = httpx.get(d_url + "/get_load").json()
    assert load["num_reqs"] == 0 and load["num_waiting_reqs"] == 0
