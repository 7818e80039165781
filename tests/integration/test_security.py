"""Security defaults with the real gateway under uvicorn, in front of fake engines that record
what reaches them: API keys, the admin listener, the keys file, header policies."""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from pathlib import Path

import httpx
import openai
import pytest

from gateway.auth import hash_key
from tests.integration.conftest import StartGateway
from tests.support.fixture_types import StartEngines
from tests.support.gateway_process import GatewayProcess, gateway_config
from tests.support.waiting import wait_until

CHAT = {"model": "m1", "messages": [{"role": "user", "content": "hello"}]}
KEYS = {"api_keys": [{"name": "team-a", "sha256": hash_key("key-a")}]}


@pytest.fixture(autouse=True)
def _no_env_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KVGATE_API_KEYS", "KVGATE_ADMIN_KEY", "KVGATE_UPSTREAM_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def _bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def test_no_request_without_a_valid_key_reaches_an_engine(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    [(engine, s1)] = fake_engines(1)
    _, gw = start_gateway([s1.url], security=KEYS)
    c = client(gw)
    attempts = [
        {},
        _bearer("wrong"),
        {"authorization": "key-a"},  # no scheme
        {"authorization": "Basic a2V5LWE="},
        {"x-api-key": "key-a"},  # not read: OpenAI clients send Bearer
    ]
    for headers in attempts:
        r = c.post("/v1/chat/completions", json=CHAT, headers=headers)
        assert r.status_code == 401, headers
        assert r.json()["error"]["code"] == "invalid_api_key"
        assert r.headers["www-authenticate"] == "Bearer"
    assert c.get("/v1/models").status_code == 401
    assert engine.inference_requests() == []
    assert c.get("/health").status_code == 200
    assert c.get("/ready").status_code == 200
    r = c.post("/v1/chat/completions", json=CHAT, headers=_bearer("key-a"))
    assert r.status_code == 200
    [seen] = engine.inference_requests()
    assert "authorization" not in seen.headers  # the gateway key stays at the gateway


def test_openai_client_with_a_key(fake_engines: StartEngines, start_gateway: StartGateway) -> None:
    [(_engine, s1)] = fake_engines(1)
    _, gw = start_gateway([s1.url], security=KEYS)
    good = openai.OpenAI(base_url=gw.url + "/v1", api_key="key-a", max_retries=0)
    bad = openai.OpenAI(base_url=gw.url + "/v1", api_key="key-b", max_retries=0)
    with good, bad:
        assert good.chat.completions.create(**CHAT).choices[0].message.content  # type: ignore[call-overload]
        with pytest.raises(openai.AuthenticationError) as info:
            bad.chat.completions.create(**CHAT)  # type: ignore[call-overload]
    assert info.value.code == "invalid_api_key"


def test_admin_port_split(fake_engines: StartEngines, start_gateway: StartGateway, client) -> None:
    [(_engine, s1)] = fake_engines(1)
    app, gw = start_gateway([s1.url], server={"admin_port": 0})
    api = client(gw)
    for method, path in (
        ("GET", "/admin/backends"),
        ("GET", "/metrics"),
        ("POST", "/admin/route"),
        ("GET", "/docs"),  # the OpenAPI page is the admin listener's alone
        ("GET", "/openapi.json"),
    ):
        assert api.request(method, path, json=CHAT).status_code == 404, path
    assert api.post("/v1/chat/completions", json=CHAT).status_code == 200
    assert app.runtime.access.listener is not None
    with httpx.Client(base_url=f"http://127.0.0.1:{app.runtime.access.listener.port}") as admin:
        [state] = admin.get("/admin/backends").json()["backends"]
        assert state["id"] == s1.url[7:]
        metrics = admin.get("/metrics")
        assert metrics.headers["content-type"].startswith("text/plain")
        assert "kvgate_requests_total" in metrics.text
        route = admin.post("/admin/route?policy=round-robin", json=CHAT).json()
        assert route["decision"]["policy"] == "round-robin"
        bad = admin.post("/admin/route", json=[1])
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_json"
        bad = admin.post("/admin/route?api=bogus", json=CHAT)
        assert bad.status_code == 400 and "query parameter api" in bad.json()["error"]["message"]
        assert admin.get("/docs").status_code == 200
        paths = admin.get("/openapi.json").json()["paths"]
        assert {"/admin/backends", "/admin/route", "/metrics"} <= set(paths)
        assert admin.post("/v1/chat/completions", json=CHAT).status_code == 404


def test_the_api_port_never_serves_the_openapi_page(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    [(_engine, s1)] = fake_engines(1)
    _app, gw = start_gateway([s1.url])  # no admin port: /admin/* here, for this machine
    api = client(gw)
    assert api.get("/admin/backends").status_code == 200
    assert api.get("/docs").status_code == 404
    assert api.get("/openapi.json").status_code == 404


def test_admin_port_asks_for_the_admin_key(
    fake_engines: StartEngines, start_gateway: StartGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    [(_engine, s1)] = fake_engines(1)
    monkeypatch.setenv("KVGATE_ADMIN_KEY", "admin-secret")
    app, _gw = start_gateway([s1.url], server={"admin_port": 0}, security=KEYS)
    assert app.runtime.access.listener is not None
    with httpx.Client(base_url=f"http://127.0.0.1:{app.runtime.access.listener.port}") as admin:
        for headers in ({}, _bearer("key-a"), _bearer("wrong")):
            r = admin.get("/admin/backends", headers=headers)
            assert r.status_code == 401
            assert r.json()["error"]["code"] == "invalid_api_key"
        assert admin.get("/metrics", headers=_bearer("admin-secret")).status_code == 200
        assert admin.get("/admin/backends", headers=_bearer("admin-secret")).status_code == 200
        schemes = admin.get("/openapi.json").json()["components"]["securitySchemes"]
        assert schemes["HTTPBearer"]["scheme"] == "bearer"  # the docs page's Authorize button


def _own_address() -> str | None:
    """An address of this machine other than loopback (its default route's), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # UDP: picks the interface, sends nothing
        except OSError:
            return None
        host = str(probe.getsockname()[0])
    return None if ipaddress.ip_address(host).is_loopback else host


def test_without_an_admin_key_only_this_machine_may_change_backends(
    fake_engines: StartEngines, tmp_path: Path
) -> None:
    address = _own_address()
    if address is None:
        pytest.skip("this machine has no address but loopback")
    [(_engine, s1)] = fake_engines(1)
    config = gateway_config([s1.url], server={"host": "0.0.0.0"})
    gw = GatewayProcess(config, tmp_path / "gw")
    theirs = {"url": "http://10.9.9.9:8000", "id": "theirs"}
    try:
        gw.start()
        with httpx.Client(base_url=f"http://{address}:{gw.port}", timeout=10) as remote:
            r = remote.post("/admin/backends", json=theirs)
            assert r.status_code == 403
            assert r.json()["error"]["code"] == "forbidden"
            assert remote.get("/admin/backends").status_code == 403
            assert remote.post("/admin/reload").status_code == 403
            assert remote.get("/metrics").status_code == 200  # read-only, as engines' pages
            assert remote.post("/v1/chat/completions", json=CHAT).status_code == 200
        with httpx.Client(base_url=f"http://127.0.0.1:{gw.port}", timeout=10) as local:
            ids = [b["id"] for b in local.get("/admin/backends").json()["backends"]]
            assert "theirs" not in ids
            # A claim in X-Forwarded-For makes no client local; a loopback peer is.
            forged = {"x-forwarded-for": "127.0.0.1"}
            assert local.post("/admin/backends", json=theirs, headers=forged).status_code == 403
            assert local.post("/admin/backends", json=theirs).status_code == 201
    finally:
        gw.stop()


def test_keys_file_is_reloaded_without_restart(
    fake_engines: StartEngines, start_gateway: StartGateway, client, tmp_path: Path
) -> None:
    [(engine, s1)] = fake_engines(1)
    path = tmp_path / "keys.yaml"
    path.write_text(f"- {{name: a, sha256: {hash_key('key-a')}}}\n")
    os.utime(path, (1000.0, 1000.0))
    _, gw = start_gateway([s1.url], security={"api_keys_file": str(path)})
    c = client(gw)
    assert c.post("/v1/chat/completions", json=CHAT, headers=_bearer("key-a")).status_code == 200
    assert c.post("/v1/chat/completions", json=CHAT, headers=_bearer("key-b")).status_code == 401
    path.write_text(f"- {{name: b, sha256: {hash_key('key-b')}}}\n")
    os.utime(path, (2000.0, 2000.0))

    def accepted(key: str) -> bool:
        r = c.post("/v1/chat/completions", json=CHAT, headers=_bearer(key))
        return r.status_code == 200

    wait_until(lambda: accepted("key-b"), within=5.0, step=0.2)
    assert not accepted("key-a")  # removed from the file
    path.write_text("- {broken")  # a bad edit keeps the keys in force
    os.utime(path, (3000.0, 3000.0))
    for _ in range(3):
        assert accepted("key-b")
    assert len(engine.inference_requests()) == 5  # the accepted requests only


def test_headers_towards_engines_and_clients(
    fake_engines: StartEngines, start_gateway: StartGateway, client, monkeypatch: pytest.MonkeyPatch
) -> None:
    [(engine, s1)] = fake_engines(1)
    monkeypatch.setenv("KVGATE_UPSTREAM_API_KEY", "engine-key")
    _, gw = start_gateway([s1.url], security={**KEYS, "upstream_authorization": "replace"})
    r = client(gw).post(
        "/v1/chat/completions",
        json=CHAT,
        headers={**_bearer("key-a"), "x-forwarded-for": "203.0.113.7"},
    )
    assert r.status_code == 200
    tag = r.headers["x-kvgate-backend"]
    assert re.fullmatch(r"[0-9a-f]{12}", tag)  # opaque: no internal host:port
    assert s1.url[7:] not in tag
    [seen] = engine.inference_requests()
    assert seen.headers["authorization"] == "Bearer engine-key"
    assert seen.headers["x-forwarded-for"] == "203.0.113.7, 127.0.0.1"
    assert seen.headers["x-forwarded-proto"] == "http"


def test_backend_header_off_and_pass_through(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    [(engine, s1)] = fake_engines(1)
    _, gw = start_gateway([s1.url], security={"backend_header": "off"})
    r = client(gw).post("/v1/chat/completions", json=CHAT, headers=_bearer("engine-token"))
    assert r.status_code == 200
    assert "x-kvgate-backend" not in r.headers
    [seen] = engine.inference_requests()
    assert seen.headers["authorization"] == "Bearer engine-token"  # no gateway keys: passed


def test_policy_header_is_ignored_by_default(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    """A client cannot pick the profile (it could pin a backend past the load filters)."""
    engines = fake_engines(2)
    _, gw = start_gateway([s.url for _, s in engines], policy="round-robin")
    c = client(gw)
    served = set()
    for _ in range(4):
        r = c.post("/v1/chat/completions", json=CHAT, headers={"x-kvgate-policy": "nope"})
        assert r.status_code == 200  # not 400 unknown_policy: the header is not read
        served.add(r.headers["x-fake-engine"])
    assert served == {"e1", "e2"}


def test_admin_port_caps_the_dry_run_body(
    fake_engines: StartEngines, start_gateway: StartGateway
) -> None:
    [(_engine, s1)] = fake_engines(1)
    app, _gw = start_gateway([s1.url], server={"admin_port": 0, "max_body_bytes": 1000})
    assert app.runtime.access.listener is not None
    big = {"model": "m1", "messages": [{"role": "user", "content": "x" * 2000}]}
    with httpx.Client(base_url=f"http://127.0.0.1:{app.runtime.access.listener.port}") as admin:
        r = admin.post("/admin/route", json=big)
        assert r.status_code == 413
        assert r.json()["error"]["code"] == "payload_too_large"


def test_admin_port_has_the_api_ports_server_limits(
    fake_engines: StartEngines, start_gateway: StartGateway
) -> None:
    """A silent connection to the admin listener is closed by the head timeout, and a head
    with too many headers gets 431: slow or bloated clients cannot hold it either."""
    [(_engine, s1)] = fake_engines(1)
    server = {"admin_port": 0, "header_timeout_s": 0.3, "max_headers": 10}
    app, _gw = start_gateway([s1.url], server=server)
    assert app.runtime.access.listener is not None
    port = app.runtime.access.listener.port
    with socket.create_connection(("127.0.0.1", port), timeout=5) as silent:
        assert silent.recv(1024) == b""
    many = b"".join(b"x-%d: v\r\n" % i for i in range(11))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as big:
        big.sendall(b"GET /metrics HTTP/1.1\r\nhost: x\r\n" + many + b"\r\n")
        assert big.recv(4096).startswith(b"HTTP/1.1 431 ")
