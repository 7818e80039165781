"""`kvgate serve --workers 2` as a real process in front of fake engines.

Both workers serve the one port; a prompt learned through one worker steers the request that
lands on the other (their own channel, or Redis), and a stored response made through one is
followed through the other; `/metrics` on either is the whole
gateway's; an admin change through one reaches the other; SIGTERM drains both, a killed
worker is started again, and a start-up that fails ends the master with its status.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from sim.live.processes import ChildProcess, kvgate_command
from sim.workloads import synth_text
from tests.support.fixture_types import StartEngines
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_until

MODEL = "m1"
FAST_HEALTH = {"probe_interval_s": 0.1, "probe_timeout_s": 1.0, "scrape_interval_s": 0.2}
StartWorkers = Callable[..., "Workers"]


class Workers:
    """The master process, and clients that each stay on one worker (keep-alive)."""

    def __init__(self, child: ChildProcess, url: str) -> None:
        self.child = child
        self.url = url
        self._clients: list[httpx.Client] = []

    def client_of(self, index: int, within: float = 10.0) -> httpx.Client:
        """A client whose one connection landed on worker `index` (the kernel hashes each
        connection to a worker: new connections until one does)."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            c = httpx.Client(base_url=self.url, timeout=10, limits=httpx.Limits(max_connections=1))
            if c.get("/ready").json()["worker"]["index"] == index:
                self._clients.append(c)
                return c
            c.close()
        raise AssertionError(f"no connection landed on worker {index} within {within} s")

    def close(self) -> None:
        for c in self._clients:
            c.close()
        self.child.stop()


@pytest.fixture
def start_workers(tmp_path: Path) -> Iterator[StartWorkers]:
    started: list[Workers] = []

    def start(urls: list[str], workers: int = 2, *extra: str, **sections: Any) -> Workers:
        config = {
            "backends": [{"url": u} for u in urls],
            "health": FAST_HEALTH,
            "routing": {"policy": "prefix-aware", **sections.pop("routing", {})},
            "server": {"access_log": False, "drain_delay_s": 1.0, **sections.pop("server", {})},
            "security": {"backend_header": "id"},
            **sections,
        }
        path = tmp_path / f"kvgate-{len(started)}.yaml"
        path.write_text(yaml.safe_dump(config))
        command = kvgate_command("serve", "--config", str(path), "--port", "0", *extra)
        log = tmp_path / f"kvgate-{len(started)}.log"
        child = ChildProcess(command, log, env={"KVGATE_WORKERS": str(workers)})
        child.start()
        w = Workers(child, "")
        started.append(w)
        [m] = child.wait_for_line(r"workers serving (http://[0-9.:]+)", timeout_s=60)
        w.url = m.group(1)
        return w

    yield start
    for w in started:
        w.close()


def _chat(seed: int) -> dict[str, Any]:
    system = synth_text(random.Random(seed), 400)  # ~2 KB: about 30 routing blocks
    return {
        "model": MODEL,
        "max_tokens": 2,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": "hi"}],
    }


def _send(c: httpx.Client, body: dict[str, Any]) -> str:
    r = c.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    return r.headers["x-kvgate-backend"]


def _matched(c: httpx.Client, body: dict[str, Any]) -> dict[str, int]:
    route = c.post("/admin/route", json=body).json()
    return {e["id"]: e["matched_blocks"] for e in route["endpoints"]}


@pytest.fixture
def engines(fake_engines: StartEngines) -> list[str]:
    return [s.url for _, s in fake_engines(2)]


@pytest.mark.parametrize("channel", ["workers", "redis"])
def test_both_workers_serve_and_a_prefix_learned_through_one_steers_the_other(
    channel: str, engines: list[str], start_workers: StartWorkers, tmp_path: Path
) -> None:
    redis = RedisServer().start() if channel == "redis" else None
    try:
        extra = ("--redis", redis.url) if redis is not None else ()
        w = start_workers(engines, 2, *extra)
        w0, w1 = w.client_of(0), w.client_of(1)
        pids = {c.get("/ready").json()["worker"]["pid"] for c in (w0, w1)}
        assert len(pids) == 2 and w.child.pid not in pids  # two workers, not the master
        assert w1.get("/ready").json()["state"]["channel"] == channel
        body = _chat(1)
        assert set(_matched(w1, body).values()) == {0}
        chosen = _send(w0, body)
        wait_until(lambda: _matched(w1, body)[chosen] > 20, within=5)
        # The other worker routes the same prompt where the first sent it.
        assert _send(w1, body) == chosen
        for i in range(6):  # and every other prompt, whichever worker takes it
            body, (one, other) = _chat(10 + i), ((w0, w1), (w1, w0))[i % 2]
            first = _send(one, body)
            wait_until(lambda b=body, f=first, o=other: _matched(o, b)[f] > 0, within=5)
            assert _send(other, body) == first
    finally:
        if redis is not None:
            redis.stop()


def test_a_stored_response_made_through_one_worker_is_followed_through_the_other(
    engines: list[str], start_workers: StartWorkers
) -> None:
    w = start_workers(engines, 2, routing={"policy": "round-robin"})
    w0, w1 = w.client_of(0), w.client_of(1)
    for i in range(4):  # round-robin alone would send half the follow-ups elsewhere
        maker, follower = ((w0, w1), (w1, w0))[i % 2]
        created = maker.post("/v1/responses", json={"model": MODEL, "input": f"hi {i}"})
        assert created.status_code == 200, created.text
        owner, rid = created.headers["x-kvgate-backend"], created.json()["id"]
        follow = {"model": MODEL, "input": "more", "previous_response_id": rid}
        for _ in range(2):
            assert follower.post("/v1/responses", json=follow).headers["x-kvgate-backend"] == owner
        assert follower.get(f"/v1/responses/{rid}").headers["x-kvgate-backend"] == owner
    page = w0.get("/metrics").text
    assert 'kvgate_response_affinity_total{event="shared"} 4.0' in page  # asked of the sibling


def test_metrics_on_either_worker_are_the_whole_gateways(
    engines: list[str], start_workers: StartWorkers
) -> None:
    w = start_workers(engines, 2)
    w0, w1 = w.client_of(0), w.client_of(1)
    for i in range(3):
        _send(w0, _chat(i))
    for i in range(5):
        _send(w1, _chat(i))
    for c in (w0, w1):
        page = c.get("/metrics").text
        lines = [ln for ln in page.splitlines() if ln.startswith("kvgate_requests_total{")]
        assert sum(float(ln.rsplit(" ", 1)[1]) for ln in lines) == 8
        assert "kvgate_workers_scraped 2.0" in page
        assert 'kvgate_in_flight_requests{backend="' in page and 'worker="1"' in page


def test_an_admin_change_through_one_worker_is_made_by_the_other(
    engines: list[str], start_workers: StartWorkers
) -> None:
    w = start_workers(engines, 2)
    w0, w1 = w.client_of(0), w.client_of(1)
    backend = engines[0].split("://", 1)[1]
    r = w0.post(f"/admin/backends/{backend}/drain")
    assert r.status_code == 200 and r.json()["workers"] == {"1": "ok"}

    def draining(c: httpx.Client) -> bool:
        state = c.get("/admin/backends").json()["backends"]
        return next(b["draining"] for b in state if b["id"] == backend)

    assert draining(w0) and draining(w1)
    for i in range(4):  # neither worker routes to the drained backend
        assert _send((w0, w1)[i % 2], _chat(50 + i)) != backend
    r = w1.post(f"/admin/backends/{backend}/resume")
    assert r.json()["workers"] == {"0": "ok"}
    assert not draining(w0) and not draining(w1)


def test_sigterm_drains_every_worker_and_the_gateway_exits_0(
    engines: list[str], start_workers: StartWorkers
) -> None:
    w = start_workers(engines, 2)
    w0, w1 = w.client_of(0), w.client_of(1)
    os.kill(w.child.pid, signal.SIGTERM)
    for c in (w0, w1):  # each still serves, and says it is draining
        wait_until(lambda c=c: c.get("/ready").status_code == 503, within=2)
        assert c.get("/ready").json()["draining"] is True
    _send(w1, _chat(3))
    assert w.child._proc is not None
    assert w.child._proc.wait(timeout=15) == 0
    assert "2 workers serving" in w.child.log_tail(100_000)


def test_sighup_reloads_every_worker(engines: list[str], start_workers: StartWorkers) -> None:
    w = start_workers(engines, 2)
    w0, w1 = w.client_of(0), w.client_of(1)
    path = Path(w.child.command[w.child.command.index("--config") + 1])
    config = yaml.safe_load(path.read_text())
    config["backends"] = config["backends"][:1]
    path.write_text(yaml.safe_dump(config))
    os.kill(w.child.pid, signal.SIGHUP)
    for c in (w0, w1):
        wait_until(lambda c=c: len(c.get("/admin/backends").json()["backends"]) == 1, within=5)


def test_a_worker_that_dies_is_started_again(
    engines: list[str], start_workers: StartWorkers
) -> None:
    w = start_workers(engines, 2)
    w1 = w.client_of(1)
    old = w1.get("/ready").json()["worker"]["pid"]
    w1.close()
    os.kill(old, signal.SIGKILL)
    wait_until(lambda: "worker 1 (pid" in w.child.log_tail(100_000), within=5)

    def restarted() -> bool:
        try:
            ready = w.client_of(1, within=1).get("/ready")
        except (AssertionError, httpx.HTTPError):
            return False
        return ready.status_code == 200 and ready.json()["worker"]["pid"] != old

    wait_until(restarted, within=15, step=0.2)
    _send(w.client_of(0), _chat(4))


def test_a_bad_routing_profile_fails_the_start_once_with_status_2(
    engines: list[str], tmp_path: Path
) -> None:
    config = {
        "backends": [{"url": u} for u in engines],
        "routing": {
            "profiles": {
                "bad": {
                    "scorers": [{"type": "no-such-scorer"}],
                    "picker": {"type": "max-score-picker"},
                }
            }
        },
    }
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    child = ChildProcess(
        kvgate_command("serve", "--config", str(path), "--port", "0", "--workers", "2"),
        tmp_path / "bad.log",
    ).start()
    try:
        assert child._proc is not None
        assert child._proc.wait(timeout=30) == 2
        log = child.log_tail()
        assert log.count("unknown scorer type 'no-such-scorer'") == 1  # the master's check
        assert "worker" not in log  # none was started
    finally:
        child.stop()


def test_a_start_up_that_fails_in_the_workers_ends_the_master_with_their_status(
    engines: list[str], tmp_path: Path
) -> None:
    config = {
        "backends": [{"url": u} for u in engines],
        "tokenizers": [{"model": "*", "source": "local", "path": str(tmp_path / "none")}],
    }
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    child = ChildProcess(
        kvgate_command("serve", "--config", str(path), "--port", "0", "--workers", "2"),
        tmp_path / "bad.log",
    ).start()
    try:
        assert child._proc is not None
        assert child._proc.wait(timeout=30) == 2
        assert "exited with status 2 before serving: stopping" in child.log_tail()
    finally:
        child.stop()


def test_the_admin_port_is_shared_by_the_workers_and_serves_the_whole_gateway(
    engines: list[str], start_workers: StartWorkers
) -> None:
    w = start_workers(engines, 2, server={"admin_port": 0})
    [m] = w.child.wait_for_line(r"admin listener on (http://[0-9.:]+)")
    admin = m.group(1)
    seen = set()
    for _ in range(40):  # new connections, spread over both workers
        with httpx.Client(base_url=admin, timeout=5) as c:
            seen.add(c.get("/admin/backends").json()["worker"]["index"])
            assert "kvgate_workers_scraped 2.0" in c.get("/metrics").text
        if seen == {0, 1}:
            break
    assert seen == {0, 1}
    assert w.client_of(0).get("/metrics").status_code == 404  # not on the API port
