"""Stored responses (Responses API) through two gateways that share Redis, in front of four
emulated replicas, each with its own response store: a chain of follow-ups alternating
between the gateways reaches the replica holding it every time (and fails without the
affinity); GET, DELETE and cancel reach it too; with that replica gone the gateways answer
as vLLM answers an unknown id."""

from __future__ import annotations

import itertools
import logging
import random
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from gateway.app import GatewayApp
from sim.emulator.app import EmulatorApp
from sim.emulator.replica import Replica
from sim.engine.profiles import get_profile
from sim.engine.tokenizer import BuiltinTokenizer
from sim.workloads import synth_text
from tests.integration.conftest import StartGateway
from tests.support.fixture_types import ServeApp
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_until

MODEL = "emu"
Gateways = list[tuple[GatewayApp, httpx.Client]]


@pytest.fixture
def replicas(serve_app: ServeApp) -> list[tuple[EmulatorApp, str]]:
    fleet = []
    for _ in range(4):
        app = EmulatorApp(Replica(get_profile("demo"), MODEL, speedup=50.0), BuiltinTokenizer())
        fleet.append((app, serve_app(app, lifespan="on").url))
    return fleet


@pytest.fixture
def start_pair(
    redis_server: RedisServer,
    start_gateway: StartGateway,
    replicas: list[tuple[EmulatorApp, str]],
) -> Iterator[Any]:
    """`start_pair(**responses) -> [(app, client), (app, client)]`: two gateways, one Redis."""
    clients: list[httpx.Client] = []

    def start(**responses: Any) -> Gateways:
        backends = [{"url": url, "id": f"r{i}"} for i, (_, url) in enumerate(replicas)]
        pair = []
        for _ in range(2):
            app, server = start_gateway(
                backends,
                policy="round-robin",  # without the affinity, consecutive turns move on
                state={"backend": "redis", "url": redis_server.url, "namespace": "test"},
                security={"backend_header": "id"},
                server={"access_log": True},
                responses=responses,
            )
            client = httpx.Client(base_url=server.url, timeout=30)
            clients.append(client)
            pair.append((app, client))
        for app, _ in pair:
            rt = app.runtime
            wait_until(lambda rt=rt: rt.shared.link is not None and rt.shared.link.up)
            wait_until(lambda rt=rt: len(rt.pool.healthy()) == 4)
        return pair

    yield start
    for c in clients:
        c.close()


def _id(answer: httpx.Response) -> str:
    """The response id of a create's answer, JSON or event stream."""
    if answer.headers["content-type"].startswith("text/event-stream"):
        first = answer.text.split("\n\n")[0]
        data = orjson.loads(first.split("data: ", 1)[1])
        assert data["type"] == "response.created"
        return str(data["response"]["id"])
    return str(answer.json()["id"])


def _usage(answer: httpx.Response) -> dict[str, Any]:
    if answer.headers["content-type"].startswith("text/event-stream"):
        last = [e for e in answer.text.split("\n\n") if e][-1]
        return dict(orjson.loads(last.split("data: ", 1)[1])["response"]["usage"])
    return dict(answer.json()["usage"])


def _chain(pair: Gateways, turns: int = 5) -> list[httpx.Response]:
    """A conversation of stored responses, turn i sent to gateway i % 2, streamed every
    other turn; stops at the first answer that is not a 200."""
    question = synth_text(random.Random(3), 200)
    answers: list[httpx.Response] = []
    previous: str | None = None
    for turn in range(turns):
        body: dict[str, Any] = {
            "model": MODEL,
            "input": f"{question} (turn {turn})" if turn == 0 else f"and then? ({turn})",
            "max_output_tokens": 4,
            "stream": turn % 2 == 1,
        }
        if previous is not None:
            body["previous_response_id"] = previous
        answer = pair[turn % 2][1].post("/v1/responses", json=body)
        answers.append(answer)
        if answer.status_code != 200:
            break
        previous = _id(answer)
    return answers


def _stored(replicas: list[tuple[EmulatorApp, str]]) -> list[set[str]]:
    return [set(app.responses.store) for app, _ in replicas]


def _metric(client: httpx.Client, event: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(f'kvgate_response_affinity_total{{event="{event}"}}'):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no affinity metric for {event}")


def test_every_follow_up_reaches_the_replica_holding_its_conversation(
    start_pair: Any, replicas: list[tuple[EmulatorApp, str]]
) -> None:
    pair = start_pair()
    answers = _chain(pair)
    assert [a.status_code for a in answers] == [200] * 5, answers[-1].text
    owners = {a.headers["x-kvgate-backend"] for a in answers}
    assert len(owners) == 1
    owner = int(owners.pop()[1:])
    ids = {_id(a) for a in answers}
    assert _stored(replicas)[owner] == ids  # every turn stored where its conversation is
    assert [s for i, s in enumerate(_stored(replicas)) if i != owner] == [set(), set(), set()]
    # Each turn's prompt holds the earlier turns, served from the owner's prefix cache.
    usages = [_usage(a) for a in answers]
    for before, after in itertools.pairwise(usages):
        cached = after["input_tokens_details"]["cached_tokens"]
        assert cached >= before["input_tokens"] - 16, (before, after)
    (_, a), (_, b) = pair
    assert _metric(a, "learned") == 3 and _metric(b, "learned") == 2
    assert _metric(a, "shared") == 2 and _metric(b, "shared") == 2  # the other's turns, by Redis
    assert _metric(a, "unknown") == _metric(b, "unknown") == 0


def test_without_the_affinity_the_chain_breaks(
    start_pair: Any, replicas: list[tuple[EmulatorApp, str]]
) -> None:
    pair = start_pair(affinity=False)
    answers = _chain(pair)
    assert answers[-1].status_code == 404  # a follow-up reached a replica without its history
    assert answers[-1].json()["error"]["param"] == "response_id"
    assert answers[-1].headers["x-kvgate-backend"] != answers[0].headers["x-kvgate-backend"]


def test_get_delete_and_cancel_reach_the_replica_holding_the_response(
    start_pair: Any, replicas: list[tuple[EmulatorApp, str]], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.access")
    (_, a), (app_b, b) = start_pair()
    created = a.post("/v1/responses", json={"model": MODEL, "input": "hi", "max_output_tokens": 4})
    assert created.status_code == 200
    owner, rid = created.headers["x-kvgate-backend"], created.json()["id"]
    for gateway in (a, b):  # whichever gateway is asked
        got = gateway.get(f"/v1/responses/{rid}")
        assert got.status_code == 200 and got.headers["x-kvgate-backend"] == owner
        assert got.json() == created.json()
        refused = gateway.post(f"/v1/responses/{rid}/cancel")  # the engine's own answer
        assert refused.status_code == 400 and refused.headers["x-kvgate-backend"] == owner
    # A background response: answered at once, polled through the other gateway.
    queued = a.post("/v1/responses", json={"model": MODEL, "input": "hi", "background": True})
    assert queued.status_code == 200 and queued.json()["status"] == "queued"
    bid = queued.json()["id"]
    wait_until(lambda: b.get(f"/v1/responses/{bid}").json()["status"] == "completed", within=10)
    assert (
        b.get(f"/v1/responses/{bid}").headers["x-kvgate-backend"]
        == queued.headers["x-kvgate-backend"]
    )
    deleted = b.delete(f"/v1/responses/{rid}")
    assert deleted.status_code == 200 and deleted.json()["deleted"] is True
    assert deleted.headers["x-kvgate-backend"] == owner
    affinity = app_b.runtime.director.affinity
    assert affinity is not None  # b forgets it once the answer is relayed, Redis first
    wait_until(lambda: affinity.owners.get(rid) is None)
    gone_b, gone_a = b.get(f"/v1/responses/{rid}"), a.get(f"/v1/responses/{rid}")
    assert gone_b.status_code == gone_a.status_code == 404
    assert gone_b.json() == gone_a.json()  # the gateway (b forgot it) answers as the engine (a)
    assert "x-kvgate-backend" not in gone_b.headers and gone_a.headers["x-kvgate-backend"] == owner
    assert b.put(f"/v1/responses/{rid}").status_code == 405
    lines = [orjson.loads(r.getMessage()) for r in caplog.records if r.name == "gateway.access"]
    logged = [(f["method"], f["path"], f["backend"], f["status"]) for f in lines]
    assert ("DELETE", f"/v1/responses/{rid}", owner, 200) in logged
    assert ("GET", f"/v1/responses/{rid}", None, 404) in logged


def test_a_response_whose_replica_is_gone_is_not_found_not_sent_elsewhere(
    start_pair: Any, replicas: list[tuple[EmulatorApp, str]]
) -> None:
    pair = start_pair()
    (_, a), (_, b) = pair
    answers = _chain(pair, turns=2)
    owner, rid = answers[0].headers["x-kvgate-backend"], _id(answers[1])
    for gateway in (a, b):
        removed = gateway.delete(f"/admin/backends/{owner}", params={"force": "true"})
        assert removed.status_code == 200, removed.text
    expected = {
        "error": {
            "message": f"Response with id '{rid}' not found.",
            "type": "invalid_request_error",
            "param": "response_id",
            "code": 404,
        }
    }
    follow = {"model": MODEL, "input": "still there?", "previous_response_id": rid}
    for gateway in (a, b):
        for answer in (
            gateway.post("/v1/responses", json=follow),
            gateway.get(f"/v1/responses/{rid}"),
        ):
            assert answer.status_code == 404 and answer.json() == expected
            assert "x-kvgate-backend" not in answer.headers  # the gateway's answer
        assert _metric(gateway, "gone") == 2
    # An id no gateway ever saw goes where routing sends it; that replica answers.
    unknown = a.post("/v1/responses", json={**follow, "previous_response_id": "resp_other"})
    assert unknown.status_code == 404 and "x-kvgate-backend" in unknown.headers
    assert unknown.json()["error"]["message"] == "Response with id 'resp_other' not found."
