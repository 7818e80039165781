"""The admin API's backend changes and config reload, on the API port (behind the admin key)
and on the admin listener (FastAPI, OpenAPI docs); drain lets requests in flight finish."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gateway.app import build_app
from gateway.auth import hash_key
from gateway.config_reload import ConfigReloader
from routing.config.schema import load_config
from tests.integration.conftest import FAST_HEALTH, StartGateway
from tests.support.fixture_types import ServeApp, StartEngines
from tests.support.waiting import wait_until

ADMIN = {"authorization": "Bearer adm"}
SECURITY = {"admin_key_sha256": hash_key("adm"), "backend_header": "id"}
CHAT = {"model": "m1", "messages": [{"role": "user", "content": "hi"}]}
Client = Callable[..., httpx.Client]


def _ids(admin: httpx.Client) -> dict[str, dict[str, Any]]:
    answer = admin.get("/admin/backends")
    assert answer.status_code == 200, answer.text
    return {b["id"]: b for b in answer.json()["backends"]}


def _served_by(client: httpx.Client, n: int) -> set[str]:
    """The backends that served `n` requests (each must succeed)."""
    answers = [client.post("/v1/chat/completions", json=CHAT) for _ in range(n)]
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    return {a.headers["x-kvgate-backend"] for a in answers}


def test_backends_are_added_drained_and_removed_on_the_api_port_with_the_admin_key(
    fake_engines: StartEngines, start_gateway: StartGateway, client: Client
) -> None:
    (_, s1), (_, s2) = fake_engines(2)
    _app, gw = start_gateway([{"url": s1.url, "id": "one"}], security=SECURITY)
    anonymous, admin = client(gw), client(gw, headers=ADMIN)
    entry = {"url": s2.url, "id": "two", "engine": "openai", "models": ["m1"]}
    assert anonymous.post("/admin/backends", json=entry).status_code == 401
    assert anonymous.delete("/admin/backends/one").status_code == 401
    added = admin.post("/admin/backends", json=entry)
    assert added.status_code == 201, added.text
    assert added.json()["backend"]["source"] == "admin"
    wait_until(lambda: _ids(admin)["two"]["health"] == "healthy")
    assert _served_by(admin, 4) == {"one", "two"}
    assert admin.post("/admin/backends", json=entry).status_code == 409
    drained = admin.post("/admin/backends/two/drain")
    assert drained.status_code == 200 and drained.json()["backend"]["health"] == "draining"
    assert _served_by(admin, 4) == {"one"}
    assert admin.post("/admin/backends/two/resume").json()["backend"]["draining"] is False
    removed = admin.delete("/admin/backends/two")
    assert removed.status_code == 200 and removed.json()["removed"] is True
    assert set(_ids(admin)) == {"one"}


B = "/admin/backends"
TEXT = {"content": b'{"url": "http://127.0.0.1:9"}', "headers": {"content-type": "text/plain"}}
# method, path, request arguments -> status, error code, part of the message
BAD_REQUESTS: list[tuple[str, str, dict[str, Any], int, str, str]] = [
    ("POST", B, {"json": {"id": "x"}}, 400, "invalid_backend", "url: Field required"),
    ("POST", B, {"json": {"url": "ftp://x"}}, 400, "invalid_backend", "url: "),
    ("POST", B, {"json": {"url": "http://h:1", "colour": 1}}, 400, "invalid_backend", "colour: "),
    ("POST", B, {"json": {"url": "http://h:1", "kv_events": {"endpoint": 5}}}, 400,
     "invalid_backend", "kv_events.endpoint: "),
    ("POST", B, {"json": ["x"]}, 400, "invalid_backend", "must be a JSON object"),
    ("POST", B, {}, 400, "invalid_backend", "must be a JSON object"),
    ("POST", B, {"content": b"{"}, 400, "invalid_json", "not valid JSON"),
    ("POST", B, TEXT, 415, "unsupported_media_type", "'text/plain'"),
    ("POST", B, {"json": {"url": "http://" + "a" * 5000}}, 413, "payload_too_large", "4096 bytes"),
    ("POST", B, {"json": {"url": "http://h:1", "id": "one"}}, 409, "conflict", "'one' is taken"),
    ("POST", B + "/nope/drain", {}, 404, "not_found", "no backend 'nope'"),
    ("POST", B + "/nope/resume", {}, 404, "not_found", "no backend 'nope'"),
    ("DELETE", B + "/nope", {}, 404, "not_found", "no backend 'nope'"),
    ("DELETE", B + "/one?force=perhaps", {}, 400, "invalid_request", "query parameter force"),
    ("POST", B + "/one/drain?remove=2", {}, 400, "invalid_request", "query parameter remove"),
    ("POST", "/admin/reload", {}, 409, "conflict", "no config to reload"),
    ("PUT", B, {}, 405, "method_not_allowed", "method PUT not allowed on /admin/backends"),
    ("GET", B + "/one", {}, 405, "method_not_allowed", "method GET not allowed on"),
    ("GET", "/admin/reload", {}, 405, "method_not_allowed", "method GET not allowed on"),
    ("GET", "/admin/nothing", {}, 404, "not_found", "no route for GET /admin/nothing"),
]  # fmt: skip


@pytest.mark.parametrize("listener", ["api-port", "admin-port"])
def test_bad_admin_requests_get_the_same_openai_shaped_errors_on_both_listeners(
    fake_engines: StartEngines, start_gateway: StartGateway, listener: str
) -> None:
    [(_, s1)] = fake_engines(1)
    server = {"max_body_bytes": 4096, **({"admin_port": 0} if listener == "admin-port" else {})}
    app, gw = start_gateway([{"url": s1.url, "id": "one"}], security=SECURITY, server=server)
    listening = app.runtime.access.listener
    url = gw.url if listening is None else f"http://127.0.0.1:{listening.port}"
    with httpx.Client(base_url=url, headers=ADMIN, timeout=10.0) as admin:
        for method, path, kwargs, status, code, text in BAD_REQUESTS:
            answer = admin.request(method, path, **kwargs)
            assert answer.status_code == status, (method, path, answer.text)
            error = answer.json()["error"]
            assert error["code"] == code and error["type"] == "invalid_request_error", error
            assert text in error["message"], (method, path, answer.text)
            if status == 405:
                assert answer.headers["allow"], answer.headers
        assert set(_ids(admin)) == {"one"}
        assert not _ids(admin)["one"]["draining"]


def test_drain_routes_new_requests_elsewhere_while_the_stream_in_flight_finishes(
    fake_engines: StartEngines, start_gateway: StartGateway, client: Client
) -> None:
    (_, slow), (_, fast) = fake_engines(2, tokens=20, token_delay=0.05)
    app, gw = start_gateway(
        [{"url": slow.url, "id": "slow"}, {"url": fast.url, "id": "fast"}], security=SECURITY
    )
    admin = client(gw, headers=ADMIN)
    streams: list[tuple[str, bytes]] = []

    def stream() -> None:
        with httpx.Client(base_url=gw.url, timeout=10.0) as c:
            body = {**CHAT, "stream": True}
            with c.stream("POST", "/v1/chat/completions", json=body, headers=ADMIN) as resp:
                streams.append((resp.headers["x-kvgate-backend"], resp.read()))

    readers = [threading.Thread(target=stream) for _ in range(2)]  # round-robin: one each
    for t in readers:
        t.start()
    wait_until(lambda: app.runtime.pool.get("slow").in_flight == 1)
    removal = admin.delete("/admin/backends/slow")  # busy: drained, removed when idle
    assert removal.status_code == 202 and removal.json()["backend"]["remove_when_idle"] is True
    assert _ids(admin)["slow"]["draining"] is True
    assert _served_by(admin, 4) == {"fast"}
    for t in readers:
        t.join(10)
    assert sorted(b for b, _ in streams) == ["fast", "slow"]
    assert all(body.rstrip().endswith(b"data: [DONE]") for _, body in streams)
    wait_until(lambda: "slow" not in _ids(admin))


def test_the_admin_listener_has_the_operations_and_documents_them(
    fake_engines: StartEngines, serve_app: ServeApp, client: Client, tmp_path: Path
) -> None:
    (_, s1), (_, s2) = fake_engines(2)
    path = tmp_path / "kvgate.yaml"
    raw = {
        "backends": [{"url": s1.url, "id": "one"}],
        "health": FAST_HEALTH,
        "server": {"admin_port": 0},
        "security": SECURITY,
    }
    path.write_text(yaml.safe_dump(raw))
    app = build_app(load_config(path))
    app.runtime.reloader = ConfigReloader(
        lambda: load_config(path), app.runtime.reconfigure, str(path)
    )
    gw = serve_app(app, lifespan="on")
    assert client(gw, headers=ADMIN).post("/admin/backends", json={}).status_code == 404
    assert app.runtime.access.listener is not None
    url = f"http://127.0.0.1:{app.runtime.access.listener.port}"
    assert httpx.post(f"{url}/admin/backends", json={"url": s2.url}).status_code == 401
    with httpx.Client(base_url=url, headers=ADMIN, timeout=10.0) as admin:
        added = admin.post("/admin/backends", json={"url": s2.url, "id": "two"})
        assert added.status_code == 201, added.text
        missing = admin.post("/admin/backends", json={"id": "x"})
        assert missing.status_code == 400
        assert missing.json()["error"]["message"] == "url: Field required"
        assert admin.post("/admin/backends/two/drain?remove=true").status_code == 200
        wait_until(lambda: "two" not in _ids(admin))
        assert admin.delete("/admin/backends/one").status_code == 200
        assert _ids(admin) == {}
        reloaded = admin.post("/admin/reload")  # the file still has `one`
        assert reloaded.status_code == 200, reloaded.text
        assert reloaded.json()["backends"]["added"] == ["one"]
        path.write_text(yaml.safe_dump({**raw, "health": {"fail_threshold": 0}}))
        rejected = admin.post("/admin/reload")
        assert rejected.status_code == 400
        assert "health.fail_threshold" in rejected.json()["error"]["message"]
        assert set(_ids(admin)) == {"one"}
        paths = admin.get("/openapi.json").json()["paths"]
    assert set(paths["/admin/backends"]) == {"get", "post"}
    assert "post" in paths["/admin/backends/{backend_id}/drain"]
    assert "post" in paths["/admin/backends/{backend_id}/resume"]
    assert "delete" in paths["/admin/backends/{backend_id}"]
    assert "post" in paths["/admin/reload"]
    body = paths["/admin/backends"]["post"]["requestBody"]["content"]["application/json"]
    schema = body["schema"]  # the config's `backends:` entry, nested models in place
    assert schema["required"] == ["url"]
    assert {"url", "id", "engine", "models", "kv_events"} <= set(schema["properties"])
    assert "$ref" not in str(schema)


def test_an_unexpected_failure_is_an_openai_shaped_500_and_the_listener_goes_on(
    fake_engines: StartEngines, start_gateway: StartGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    [(_, s1)] = fake_engines(1)
    app, _gw = start_gateway([{"url": s1.url, "id": "one"}], server={"admin_port": 0})
    assert app.runtime.access.listener is not None

    def broken(backend_id: str) -> dict[str, Any]:
        raise RuntimeError("a bug")

    monkeypatch.setattr(app.runtime.operations, "resume", broken)
    url = f"http://127.0.0.1:{app.runtime.access.listener.port}"
    with httpx.Client(base_url=url, timeout=10.0) as admin:
        answer = admin.post("/admin/backends/one/resume")
        assert answer.status_code == 500
        assert answer.json()["error"] == {
            "message": "internal gateway error",
            "type": "internal_error",
            "code": "internal_error",
        }
        assert "a bug" not in answer.text
        assert set(_ids(admin)) == {"one"}
