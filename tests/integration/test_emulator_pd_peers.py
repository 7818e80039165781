"""Peer routers' own P/D modes, unmodified, in front of `kvgate emulate` P/D fleets: sglang-router
(`--pd-disaggregation`, SGLang's bootstrap protocol) and vllm-router (`--vllm-pd-disaggregation`,
vLLM's NixlConnector flow). Marked slow; skipped unless `bench.peers.ensure_peer` installed them."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bench.peers import PD_PROTOCOL, PEERS_ROOT, PeerInstall, ensure_peer, pd_peer_command
from sim.live.processes import ChildProcess, PDFleet, free_port, start_pd_emulator
from sim.workloads import synth_text

pytestmark = pytest.mark.slow

MODEL = "emu"


def _installed(name: str) -> PeerInstall:
    if not (PEERS_ROOT / name / ".installed").exists():
        pytest.skip(
            f"{name} is not installed in {PEERS_ROOT}: python -c 'from bench.peers import "
            f'ensure_peer; ensure_peer("{name}")\''
        )
    return ensure_peer(name)  # installed: reads its version only


@pytest.fixture(params=sorted(PD_PROTOCOL))
def routed(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, PDFleet]]:
    install = _installed(request.param)
    emulator, fleet = start_pd_emulator(
        1, 1, PD_PROTOCOL[install.name], tmp_path / "emulator.log", model=MODEL, speedup=5.0
    )
    with emulator:
        port = free_port()
        command = pd_peer_command(
            install, port=port, prefill=fleet.prefill, decode=fleet.decode, metrics_port=free_port()
        )
        with ChildProcess(command, tmp_path / "router.log", cwd=tmp_path) as router:
            router.start().wait_for_http(f"http://127.0.0.1:{port}/health", timeout_s=60)
            yield f"http://127.0.0.1:{port}", fleet


def _external(url: str) -> float:
    for family in text_string_to_metric_families(httpx.get(url + "/metrics").text):
        for s in family.samples:
            if s.labels.get("source") == "external_kv_transfer":
                return s.value
    raise AssertionError("no external_kv_transfer sample")


@pytest.mark.parametrize("kind", ["completion", "chat"])
@pytest.mark.parametrize("stream", [False, True])
def test_peer_pd_mode_runs_against_the_emulator(
    routed: tuple[str, PDFleet], kind: str, stream: bool
) -> None:
    router, fleet = routed
    d_url = fleet.decode[0]
    text = synth_text(random.Random(hash((kind, stream)) % 1000), 200)
    body: dict[str, object] = {"model": MODEL, "max_tokens": 6, "stream": stream}
    if kind == "chat":
        path, body["messages"] = "/v1/chat/completions", [{"role": "user", "content": text}]
    else:
        path, body["prompt"] = "/v1/completions", text
    if stream:
        body["stream_options"] = {"include_usage": True}
    before = _external(d_url)
    r = httpx.post(router + path, json=body, timeout=60)
    assert r.status_code == 200, r.text
    if stream:
        lines = [ln[6:] for ln in r.text.splitlines() if ln.startswith("data: ")]
        assert lines[-1] == "[DONE]"
        usage = json.loads(lines[-2])["usage"]
    else:
        usage = r.json()["usage"]
    assert usage["completion_tokens"] == 6
    # D's answer: its prompt's KV came from P, every token of it.
    assert _external(d_url) - before == usage["prompt_tokens"]
    p_url = fleet.prefill[0][0]
    view = httpx.get(p_url + "/kvgate/pd/handoffs").json()
    assert view["held_blocks"] == 0 and view["handoffs"] == []
