"""What peer routers probe on an emulated replica (SGLang's router, vllm-router), over HTTP."""

from __future__ import annotations

import httpx
import pytest

from sim.emulator.app import EmulatorApp
from sim.emulator.replica import Replica
from sim.engine.profiles import get_profile
from sim.engine.tokenizer import BuiltinTokenizer
from tests.support.fixture_types import ServeApp
from tests.support.servers import ServerThread

MODEL = "emu-probes"


@pytest.fixture
def replica_url(serve_app: ServeApp) -> str:
    # Slowed 20×, so a request is still running when the test looks at the load.
    replica = Replica(get_profile("demo"), MODEL, speedup=0.05)
    server: ServerThread = serve_app(EmulatorApp(replica, BuiltinTokenizer()), lifespan="on")
    return server.url


@pytest.mark.parametrize("path", ["/server_info", "/get_server_info"])
def test_server_info_names_the_model_and_kv_geometry(replica_url: str, path: str) -> None:
    config = get_profile("demo").config
    resp = httpx.get(replica_url + path)
    assert resp.status_code == 200
    body = resp.json()
    assert body["served_model_name"] == MODEL
    assert body["page_size"] == config.block_size
    assert body["max_total_num_tokens"] == config.num_blocks * config.block_size
    # No path: a router must not try to fetch a tokenizer for a model that does not exist.
    assert body["model_path"] is None


@pytest.mark.parametrize("path", ["/model_info", "/get_model_info"])
def test_model_info_says_generation_model(replica_url: str, path: str) -> None:
    resp = httpx.get(replica_url + path)
    assert resp.status_code == 200
    assert resp.json()["is_generation"] is True
    assert resp.json()["served_model_name"] == MODEL


def test_get_load_counts_requests_in_flight(replica_url: str) -> None:
    idle = httpx.get(replica_url + "/get_load").json()
    assert idle["load"] == 0
    assert idle["num_reqs"] == 0
    assert idle["num_waiting_reqs"] == 0
    assert idle["num_tokens"] == 0
    body = {"model": MODEL, "prompt": "hello " * 50, "max_tokens": 8, "stream": True}
    with (
        httpx.Client(base_url=replica_url, timeout=30) as client,
        client.stream("POST", "/v1/completions", json=body) as resp,
    ):
        assert resp.status_code == 200
        # Keep the iterator: a dropped one closes the stream, which aborts the request.
        lines = resp.iter_lines()
        next(lines)  # the first token is out: the request is running
        busy = client.get("/get_load").json()
        assert busy["load"] == 1
        assert busy["num_reqs"] + busy["num_waiting_reqs"] == 1
        assert busy["num_tokens"] > 0
        assert sum(1 for line in lines if line.startswith("data: {")) == 7


@pytest.mark.parametrize("path", ["/v1/completions/render", "/v1/chat/completions/render"])
def test_render_is_refused_with_403_openai_error(replica_url: str, path: str) -> None:
    resp = httpx.post(replica_url + path, json={"model": MODEL, "prompt": "hi"})
    assert resp.status_code == 403
    error = resp.json()["error"]
    assert set(error) >= {"message", "type", "code"}
    assert error["code"] == 403


def test_unknown_path_is_still_404(replica_url: str) -> None:
    assert httpx.get(replica_url + "/no_such_probe").status_code == 404
