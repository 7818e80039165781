"""LoRA affinity end to end: emulated replicas serve adapters, the gateway discovers them in
`/v1/models` and sends each adapter's requests to the replica that runs it.

Two replicas serve adapters `sql` and `chat` with one adapter slot each (vLLM's default
`--max-loras 1`). A long request runs `sql` on replica A and another `chat` on replica B,
sent to the replicas directly. Through the gateway, under a profile led by
`lora-affinity-scorer`, `sql` then goes to A and `chat` to B: on the other replica the request
would wait for the slot the long request holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from gateway.app import build_app
from routing.config.schema import load_config
from sim.emulator.app import EmulatorApp
from sim.emulator.lora import LoraSettings
from sim.emulator.replica import Replica
from sim.engine.profiles import get_profile
from sim.engine.tokenizer import BuiltinTokenizer
from tests.support.fixture_types import ServeApp
from tests.support.servers import ServerThread
from tests.support.waiting import wait_until

MODEL = "emu"
CONFIG = """\
server: {access_log: false}
security: {backend_header: id}
health:
  probe_interval_s: 0.05
  # The replicas share this process's GIL with the test: a late scrape must not make the
  # adapters' metrics unknown.
  metrics_stale_after_s: 5.0
routing:
  policy: lora
  profiles:
    lora:
      scorers:
        - {type: lora-affinity-scorer, weight: 4}
        - {type: queue-depth-scorer, weight: 1}
      picker: {type: max-score-picker}
"""


def _replica(serve_app: ServeApp) -> ServerThread:
    lora = LoraSettings(("sql", "chat"), max_loras=1)
    replica = Replica(get_profile("demo"), MODEL, speedup=2.0, lora=lora)
    return serve_app(EmulatorApp(replica, BuiltinTokenizer()), lifespan="on")


def _gateway(serve_app: ServeApp, tmp_path: Path, urls: list[str]) -> ServerThread:
    entries = zip("AB", urls, strict=True)
    backends = "".join(f"  - {{url: '{u}', id: {name}}}\n" for name, u in entries)
    path = tmp_path / "kvgate.yaml"
    path.write_text(CONFIG + "backends:\n" + backends)
    return serve_app(build_app(load_config(path)), lifespan="on")


@contextmanager
def _running(url: str, adapter: str) -> Iterator[None]:
    """A long streamed request for `adapter` on one replica, running until the block ends."""
    body = {"model": adapter, "prompt": "hold the slot", "max_tokens": 8000, "stream": True}
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=30) as r:
        assert r.status_code == 200
        lines = r.iter_lines()  # kept: a collected iterator would close the connection
        next(lines)  # the first token: the adapter runs
        yield


def _chat(model: str) -> dict[str, Any]:
    return {"model": model, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}


def _lora_scores(gw: httpx.Client, model: str) -> dict[str, float]:
    out = gw.post("/admin/route", json=_chat(model)).json()
    return {e["id"]: e["scores"]["lora-affinity-scorer"] for e in out["endpoints"]}


def test_adapter_requests_go_to_the_replica_running_the_adapter(
    serve_app: ServeApp, tmp_path: Path
) -> None:
    a, b = _replica(serve_app), _replica(serve_app)
    gw_server = _gateway(serve_app, tmp_path, [a.url, b.url])
    with httpx.Client(base_url=gw_server.url, timeout=10) as gw:
        models = {m["id"]: m["parent"] for m in gw.get("/v1/models").json()["data"]}
        assert models == {MODEL: None, "sql": MODEL, "chat": MODEL}

        out = gw.post("/admin/route", json=_chat(MODEL)).json()
        assert out["request"]["lora_adapter"] is None
        assert {e["scores"]["lora-affinity-scorer"] for e in out["endpoints"]} == {1.0}
        # Nothing runs yet: both replicas have a free adapter slot.
        wait_until(lambda: _lora_scores(gw, "sql") == {"A": 0.8, "B": 0.8})

        with _running(a.url, "sql"), _running(b.url, "chat"):
            wait_until(lambda: _lora_scores(gw, "sql") == {"A": 1.0, "B": 0.0})
            out = gw.post("/admin/route", json=_chat("chat")).json()
            assert out["request"]["lora_adapter"] == "chat"
            assert out["decision"]["ranked"] == ["B", "A"]

            served = []
            for model in ("sql", "chat") * 3:
                r = gw.post("/v1/chat/completions", json=_chat(model))
                assert r.status_code == 200, r.text
                assert r.json()["model"] == model
                served.append((model, r.headers["x-kvgate-backend"]))
            assert served == [("sql", "A"), ("chat", "B")] * 3
