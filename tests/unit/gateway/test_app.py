"""The front door's app over ASGI messages (no socket): every request ends in one access-log
line and in `kvgate_requests_total` through `Director.finish`, refused ones too; probes and
scrapes only when refused; `/ready` answers booleans."""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any

import orjson
import pytest

from gateway.app import GatewayApp
from gateway.auth import hash_key
from gateway.compose import build_runtime
from gateway.proxy import Proxy
from routing.config.schema import parse_config
from tests.unit.gateway.test_one_lifecycle import STREAMED, Clock, _Client

KEY, LIMITED_KEY, ADMIN_KEY = "k-team-a", "k-team-b", "k-admin"
CHAT = "/v1/chat/completions"
BODY = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})


def _app(**sections: Any) -> GatewayApp:
    raw = {
        "backends": [{"url": "http://10.0.0.1:8000", "id": "b1", "models": ["m"]}],
        "security": {
            "api_keys": [
                {"name": "team-a", "sha256": hash_key(KEY)},
                {"name": "team-b", "sha256": hash_key(LIMITED_KEY), "requests_per_minute": 1},
            ]
        },
        **sections,
    }
    clock = Clock()
    return GatewayApp(build_runtime(parse_config(raw), clock=clock, rng=random.Random(0)))


async def _call(
    app: GatewayApp,
    path: str,
    *,
    method: str = "POST",
    key: str | None = None,
    body: bytes = BODY,
    headers: dict[str, str] | None = None,
    client: str = "10.9.8.7",
) -> tuple[int, bytes]:
    raw = [(b"content-type", b"application/json")]
    if key is not None:
        raw.append((b"authorization", f"Bearer {key}".encode()))
    raw += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    scope = {
        "type": "http", "method": method, "path": path, "query_string": b"", "headers": raw,
        "client": (client, 40000), "scheme": "http",
    }  # fmt: skip
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        await asyncio.Event().wait()  # the client stays
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def _lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [orjson.loads(r.getMessage()) for r in caplog.records if r.name == "gateway.access"]


def _requests(app: GatewayApp, status: int) -> float:
    page = app.runtime.metrics_page().decode()
    for line in page.splitlines():
        if line.startswith("kvgate_requests_total{") and f'status="{status}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_refused_requests_each_end_in_one_access_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = _app(
        admission={"max_in_flight_per_backend": 1, "max_queue": 0},
        server={"max_body_bytes": 1000},
    )
    for backend in app.runtime.pool:
        backend.state.record_probe(True, 0.0)
    caplog.set_level(logging.INFO, logger="gateway.access")
    cases = [
        ({}, 401),  # no key
        ({"key": "not-a-key"}, 401),
        ({"key": KEY, "body": b"{" + b" " * 2000 + b"}"}, 413),
        ({"key": KEY, "headers": {"content-type": "text/plain"}}, 415),
        ({"key": KEY}, 429),  # the one place is taken, no queue: shed
        ({"key": LIMITED_KEY}, 503),  # admitted; no upstream client outside a server
        ({"key": LIMITED_KEY}, 429),  # over its 1 request a minute
    ]
    for kwargs, status in cases:
        app.runtime.admission.admitted = 1 if status == 429 and kwargs.get("key") == KEY else 0
        assert (await _call(app, CHAT, **kwargs))[0] == status, kwargs
    lines = _lines(caplog)
    assert [line["status"] for line in lines] == [status for _, status in cases]
    assert {line["client"] for line in lines} == {"10.9.8.7"}
    assert [line["key"] for line in lines] == [None, None] + ["team-a"] * 3 + ["team-b"] * 2
    assert all(line["backend"] is None and line["error"] for line in lines)
    assert not any(KEY in orjson.dumps(line).decode() for line in lines)  # names, never keys
    assert _requests(app, 401) == 2 and _requests(app, 429) == 2


async def test_admin_refusals_are_logged_and_probes_and_scrapes_are_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = _app(security={"admin_key_sha256": hash_key(ADMIN_KEY)})
    caplog.set_level(logging.INFO, logger="gateway.access")
    assert (await _call(app, "/health", method="GET"))[0] == 200
    assert (await _call(app, "/ready", method="GET"))[0] == 503  # no healthy backend yet
    assert (await _call(app, "/metrics", method="GET", key=ADMIN_KEY))[0] == 200
    assert _lines(caplog) == []
    assert (await _call(app, "/metrics", method="GET"))[0] == 401
    assert (await _call(app, "/admin/backends", method="GET", key="wrong"))[0] == 401
    assert (await _call(app, "/admin/backends", method="GET", key=ADMIN_KEY))[0] == 200
    lines = _lines(caplog)
    assert [(line["path"], line["status"]) for line in lines] == [
        ("/metrics", 401),
        ("/admin/backends", 401),
        ("/admin/backends", 200),
    ]
    assert lines[2]["key"] == "admin"


async def test_without_an_admin_key_a_remote_admin_call_is_refused_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = _app(security={})
    caplog.set_level(logging.INFO, logger="gateway.access")
    assert (await _call(app, "/admin/backends", method="GET"))[0] == 403
    [line] = _lines(caplog)
    assert (line["status"], line["client"]) == (403, "10.9.8.7")


async def test_an_answered_request_names_its_tenant_route_and_tokens(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = _app(security={}, admission={"tenant_header": "x-tenant"})
    rt = app.runtime
    for backend in rt.pool:
        backend.state.record_probe(True, 0.0)
    app.inference.proxy = Proxy(rt.director, _Client(STREAMED, Clock()), max_attempts=1)  # type: ignore[arg-type]
    caplog.set_level(logging.INFO, logger="gateway.access")
    stream = orjson.dumps({"model": "m", "stream": True, "messages": [{"role": "user"}]})
    status, _ = await _call(app, CHAT, body=stream, headers={"x-tenant": "acme"})
    assert status == 200
    [line] = _lines(caplog)
    assert line["key"] is None and line["tenant"] == "acme"
    assert (line["backend"], line["policy"], line["reason"]) == (
        "b1",
        "prefix-aware",
        "only_candidate",
    )
    assert (line["prompt_tokens"], line["cached_tokens"], line["completion_tokens"]) == (120, 0, 2)
    page = rt.metrics_page().decode()
    assert 'kvgate_prompt_tokens_total{model="m",tenant="acme"} 120.0' in page
    assert 'kvgate_completion_tokens_total{model="m",tenant="acme"} 2.0' in page


async def test_ready_answers_booleans() -> None:
    app = _app()
    status, body = await _call(app, "/ready", method="GET")
    assert status == 503
    ready = orjson.loads(body)
    assert ready["ready"] is False and ready["healthy_backends"] == 0
