"""Upstream faults against real servers: a full pool, hung and dying backends, stray bytes,
stale connections, the retry budget, Retry-After and what error messages reveal."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import httpx
import openai
import orjson
import pytest

from tests.integration.conftest import StartGateway
from tests.support.fixture_types import StartEngines
from tests.support.raw_backend import RawBackend, Reply, chunk, chunked_head, response
from tests.support.waiting import wait_until

CHAT = {"model": "m1", "messages": [{"role": "user", "content": "hello"}]}
MakeRaw = Callable[[Callable[[int, int], Reply]], RawBackend]


@pytest.fixture
def raw_backend() -> Iterator[MakeRaw]:
    made: list[RawBackend] = []

    def make(script: Callable[[int, int], Reply]) -> RawBackend:
        backend = RawBackend(script)
        made.append(backend)
        return backend

    yield make
    for backend in made:
        backend.close()


def _health(c: httpx.Client) -> dict[str, str]:
    return {b["id"]: b["health"] for b in c.get("/admin/backends").json()["backends"]}


def _concurrently(n: int, url: str) -> list[httpx.Response]:
    results: list[httpx.Response] = []

    def one() -> None:
        with httpx.Client(base_url=url, timeout=10) as c:
            results.append(c.post("/v1/chat/completions", json=CHAT))

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_full_connection_pool_sheds_load_without_ejecting_backends(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    """Issue 15 defect 2: waiting for a pool slot is the gateway's overload, not a backend
    timeout; it used to eject both backends, so everyone got 503 afterwards."""
    engines = fake_engines(2, ttft_delay=2.0)
    _, gw = start_gateway(
        [s.url for _, s in engines], upstream={"max_connections": 4, "pool_timeout_s": 0.2}
    )
    results = _concurrently(10, gw.url)
    assert sorted(r.status_code for r in results) == [200] * 4 + [503] * 6
    for r in results:
        if r.status_code == 503:
            err = r.json()["error"]
            assert (err["type"], err["code"]) == ("service_unavailable", "gateway_overloaded")
            assert r.headers["retry-after"] == "1"
    c = client(gw)
    assert set(_health(c).values()) == {"healthy"}
    assert "kvgate_upstream_errors_total{" not in c.get("/metrics").text
    for e, _ in engines:
        e.ttft_delay = 0.0
    assert [c.post("/v1/chat/completions", json=CHAT).status_code for _ in range(2)] == [200] * 2


_FIRST = orjson.dumps(
    {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "m1",
        "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}],
    }
)


@pytest.mark.parametrize(
    "partial",
    [b'data: {"id":"c2","choi', b'data: {"id":"c2"}\n', b'data: {"id":"c2"}\r\n'],
    ids=["mid-line", "after-a-line", "after-a-crlf-line"],
)
def test_stream_cut_mid_event_ends_with_a_parseable_error_event(
    raw_backend: MakeRaw, start_gateway: StartGateway, partial: bytes
) -> None:
    """Issue 15 defect 6: the error event used to be glued onto the half-sent event, so the
    client's SSE parser saw one broken `data` instead of the error."""
    body = chunk(b"data: " + _FIRST + b"\n\n" + partial)
    backend = raw_backend(lambda conn, n: Reply(chunked_head() + body, close=True))
    _, gw = start_gateway([backend.url])
    oai = openai.OpenAI(base_url=gw.url + "/v1", api_key="unused", max_retries=0)
    # Asking for usage: the gateway then relays the stream as it comes, with no usage event
    # to take out (a stream it takes one out of was already relayed in whole events).
    stream = oai.chat.completions.create(
        model="m1",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    received = []
    with pytest.raises(openai.APIError) as info:
        for event in stream:
            received.append(event)
    assert [e.choices[0].delta.content for e in received] == ["hi"]
    assert info.value.body == {
        "message": "the upstream backend's connection failed",
        "type": "upstream_error",
        "code": "upstream_protocol_error",
    }


def _numbered(conn: int, n: int) -> bytes:
    return response(b'{"conn":%d,"n":%d}' % (conn, n))


def test_second_response_in_one_read_is_not_merged_into_the_first(
    raw_backend: MakeRaw, start_gateway: StartGateway, client
) -> None:
    """Issue 15 defect 6: bytes after a complete response were parsed into it."""
    stray = response(b'{"unsolicited":true}')
    backend = raw_backend(lambda conn, n: Reply(_numbered(conn, n) + stray))
    _, gw = start_gateway([backend.url])
    c = client(gw)
    for expected in ({"conn": 0, "n": 0}, {"conn": 1, "n": 0}):
        r = c.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 200 and r.json() == expected  # never the stray answer


def test_unsolicited_answer_on_an_idle_connection_is_never_taken_as_the_next(
    raw_backend: MakeRaw, start_gateway: StartGateway, client
) -> None:
    stray = response(b'{"unsolicited":true}')
    backend = raw_backend(lambda conn, n: Reply(_numbered(conn, n), later=stray, pause_s=0.05))
    _, gw = start_gateway([backend.url])
    c = client(gw)
    assert c.post("/v1/chat/completions", json=CHAT).json() == {"conn": 0, "n": 0}
    threading.Event().wait(0.3)  # the stray answer reaches the idle pooled connection
    r = c.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 200 and r.json() == {"conn": 1, "n": 0}


def test_reused_connection_closed_before_any_byte_is_retried_on_a_fresh_one(
    raw_backend: MakeRaw, start_gateway: StartGateway, client
) -> None:
    """Issue 15 defect 8: a kept-alive connection the backend closes as the request goes out
    (its idle timeout racing ours) gave 502; the backend read nothing, so retry once."""

    def script(conn: int, n: int) -> Reply:
        return Reply(b"", close=True) if n == 1 else Reply(_numbered(conn, n))

    backend = raw_backend(script)
    app, gw = start_gateway([backend.url])
    c = client(gw)
    assert c.post("/v1/chat/completions", json=CHAT).json() == {"conn": 0, "n": 0}
    r = c.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 200 and r.json() == {"conn": 1, "n": 0}
    assert backend.posts == 3
    text = c.get("/metrics").text
    assert "kvgate_upstream_errors_total{" not in text  # not held against the backend
    assert "kvgate_retries_total{" not in text  # not a failover attempt
    assert app.runtime.pool.get(backend.url[7:]).state.last_error is None


def test_hung_backend_fails_over_after_the_first_byte_timeout(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    """Issue 15 defect 8: a hung backend held requests for the whole read timeout."""
    (hung, s1), (good, s2) = fake_engines(2)
    hung.ttft_delay = 60.0
    app, gw = start_gateway(
        [s1.url, s2.url],
        upstream={"first_byte_timeout_s": 0.3},
        health={"passive_fail_threshold": 100},
    )
    c = client(gw, timeout=5.0)
    for _ in range(2):  # round-robin: one of them goes to the hung backend first
        r = c.post("/v1/chat/completions", json={**CHAT, "stream": True})
        assert r.status_code == 200 and r.headers["x-fake-engine"] == good.name
    assert len(hung.inference_requests()) == 1
    text = c.get("/metrics").text
    assert f'kvgate_upstream_errors_total{{backend="{s1.url[7:]}",kind="timeout"}} 1.0' in text
    assert "FirstByteTimeout" in (app.runtime.pool.get(s1.url[7:]).state.last_error or "")


def test_hung_backend_with_no_attempt_left_is_504(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    [(_, s1)] = fake_engines(1, ttft_delay=60.0)
    _, gw = start_gateway([s1.url], upstream={"first_byte_timeout_non_stream_s": 0.3})
    r = client(gw, timeout=5.0).post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 504
    assert r.json()["error"]["code"] == "upstream_first_byte_timeout"


def test_requests_waiting_on_a_backend_declared_down_fail_over(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    """Issue 15 defect 8, non-streaming: no first-byte timeout can tell a hung backend from a
    long generation (vLLM sends the head when it is done), so the health probes do: once they
    declare the backend down, the requests waiting for its head fail over."""
    (hung, s1), (good, s2) = fake_engines(2)
    hung.ttft_delay = 60.0
    _app, gw = start_gateway([s1.url, s2.url], health={"passive_fail_threshold": 100})
    c = client(gw, timeout=10.0)
    answers: list[httpx.Response] = []
    # round-robin: one of the two goes to the hung backend first
    threads = [
        threading.Thread(target=lambda: answers.append(c.post("/v1/chat/completions", json=CHAT)))
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    wait_until(lambda: len(hung.inference_requests()) == 1)
    hung.health_status = 503  # the probes see it now
    for t in threads:
        t.join(timeout=10.0)
    assert [r.status_code for r in answers] == [200, 200]
    assert {r.headers["x-fake-engine"] for r in answers} == {good.name}


def test_stream_first_byte_timeout_leaves_non_streaming_requests_alone(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    """vLLM sends a non-streaming answer's head only once generation is done."""
    [(_, s1)] = fake_engines(1, ttft_delay=0.5)
    _, gw = start_gateway([s1.url], upstream={"first_byte_timeout_s": 0.1})
    assert client(gw).post("/v1/chat/completions", json=CHAT).status_code == 200


def test_retry_budget_stops_retries_amplifying_an_outage(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    engines = fake_engines(3)
    for e, _ in engines:
        e.fail_status = 503
    _, gw = start_gateway(
        [s.url for _, s in engines],
        upstream={"max_attempts": 3, "retry_budget_ratio": 0.0, "retry_budget_min_per_s": 0.1},
        health={"passive_fail_threshold": 100},
    )
    c = client(gw)
    for _ in range(3):
        r = c.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 503 and r.json()["error"]  # the backend's own answer
    # One retry in the budget (0.1/s over 10 s): 3 first attempts + 1 retry, not 3 × 3.
    assert sum(len(e.inference_requests()) for e, _ in engines) == 4
    text = c.get("/metrics").text
    assert "kvgate_retries_denied_total 3.0" in text
    assert 'kvgate_retries_total{model="m1"} 1.0' in text


def test_no_healthy_backend_retry_after_counts_down_to_readmission(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    """Issue 15 defect 8: Retry-After was always 1 s."""
    [(engine, s1)] = fake_engines(1)
    engine.fail_status = 503
    _, gw = start_gateway(
        [s1.url],
        health={"passive_fail_threshold": 1, "ejection_base_s": 30.0, "ejection_max_s": 60.0},
    )
    c = client(gw)
    assert c.post("/v1/chat/completions", json=CHAT).status_code == 503  # ejects it
    r = c.post("/v1/chat/completions", json=CHAT)
    assert r.json()["error"]["code"] == "no_healthy_backend"
    assert 28 <= int(r.headers["retry-after"]) <= 30


def test_error_messages_name_no_backend_address(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    """Issue 15 defect 7: internal host:port addresses appeared in 502 messages."""
    [(_, s1)] = fake_engines(1)
    _, gw = start_gateway([s1.url], health={"probe_interval_s": 60.0})
    s1.kill()  # down, but no probe has noticed yet
    r = client(gw).post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 502
    assert str(s1.port) not in r.text and "127.0.0.1" not in r.text
    assert r.json()["error"]["message"] == "cannot connect to the upstream backend"
