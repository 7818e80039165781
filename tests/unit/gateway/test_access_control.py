"""Who may call what on the API port, through the app's ASGI entry (no sockets)."""

from __future__ import annotations

import logging
from typing import Any

import orjson
import pytest

from gateway.access_control import AccessControl
from gateway.app import GatewayApp, build_app
from gateway.auth import ANONYMOUS, Principal, hash_key
from routing.config.schema import ConfigError, parse_config
from tests.support.asgi_types import Message

ADMIN_SHA = hash_key("admin-key")


def _app(monkeypatch: pytest.MonkeyPatch, **sections: Any) -> GatewayApp:
    for name in ("KVGATE_API_KEYS", "KVGATE_ADMIN_KEY", "KVGATE_UPSTREAM_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    raw = {"backends": [{"url": "http://127.0.0.1:9", "models": ["m1"]}], **sections}
    return build_app(parse_config(raw))


REMOTE = ("198.51.100.2", 5555)
LOOPBACK = ("127.0.0.1", 5555)


async def _call(
    app: GatewayApp,
    method: str,
    path: str,
    key: str | None = None,
    *,
    client: tuple[str, int] | None = REMOTE,
    headers: list[tuple[bytes, bytes]] | None = None,
    body: bytes = b"",
) -> tuple[int, Any, dict[str, Any]]:
    headers = list(headers or [])
    if key:
        headers.append((b"authorization", f"Bearer {key}".encode()))
    scope: dict[str, Any] = {
        "type": "http",
        "method": method,
        "path": path,
        "query_string": b"",
        "headers": headers,
        "client": client,
    }
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return sent[0]["status"], orjson.loads(body) if body.startswith(b"{") else body, scope


KEYS = {"api_keys": [{"name": "team-a", "sha256": hash_key("ka"), "tier": "gold"}]}


async def test_with_keys_a_request_without_one_is_401_openai_shaped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = _app(monkeypatch, security=KEYS)
    for key in (None, "wrong"):
        status, body, _ = await _call(app, "GET", "/v1/models", key)
        assert status == 401
        assert body["error"]["code"] == "invalid_api_key"
        assert body["error"]["type"] == "invalid_request_error"
    status, _, scope = await _call(app, "GET", "/v1/models", "ka")
    assert status == 200
    assert scope["kvgate.principal"] == Principal("team-a", "gold")


async def test_unknown_routes_need_the_key_too(monkeypatch: pytest.MonkeyPatch) -> None:
    app = _app(monkeypatch, security=KEYS)
    assert (await _call(app, "GET", "/v1/nothing"))[0] == 401
    assert (await _call(app, "GET", "/v1/nothing", "ka"))[0] == 404


async def test_probes_stay_open(monkeypatch: pytest.MonkeyPatch) -> None:
    app = _app(monkeypatch, security=KEYS)
    assert (await _call(app, "GET", "/health"))[0] == 200
    assert (await _call(app, "GET", "/ready"))[0] == 503  # not started: no healthy backend


async def test_without_keys_every_request_is_anonymous(monkeypatch: pytest.MonkeyPatch) -> None:
    app = _app(monkeypatch)
    status, _, scope = await _call(app, "GET", "/v1/models")
    assert status == 200
    assert scope["kvgate.principal"] is ANONYMOUS


async def test_env_keys_are_plaintext(monkeypatch: pytest.MonkeyPatch) -> None:
    app = _app(monkeypatch)
    monkeypatch.setenv("KVGATE_API_KEYS", "from-env")
    app = build_app(app.runtime.config)
    assert (await _call(app, "GET", "/v1/models"))[0] == 401
    assert (await _call(app, "GET", "/v1/models", "from-env"))[0] == 200


@pytest.mark.parametrize("path", ["/admin/backends", "/metrics"])
async def test_admin_on_the_api_port(monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    # Nothing configured: this machine's clients only for /admin/*, anyone for /metrics.
    assert (await _call(_app(monkeypatch), "GET", path, client=LOOPBACK))[0] == 200
    assert (await _call(_app(monkeypatch), "GET", path))[0] == (200 if path == "/metrics" else 403)
    # An admin key: needed, and an API key is not one.
    app = _app(monkeypatch, security={**KEYS, "admin_key_sha256": ADMIN_SHA})
    assert (await _call(app, "GET", path))[0] == 401
    assert (await _call(app, "GET", path, "ka"))[0] == 401
    assert (await _call(app, "GET", path, "admin-key"))[0] == 200
    # API keys but no admin credential: closed.
    assert (await _call(_app(monkeypatch, security=KEYS), "GET", path, "ka"))[0] == 404
    # An admin port: not served here at all, whatever the credential.
    split = _app(monkeypatch, server={"admin_port": 0}, security={"admin_key_sha256": ADMIN_SHA})
    assert (await _call(split, "GET", path, "admin-key"))[0] == 404


async def test_dry_run_on_the_api_port_needs_the_admin_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVGATE_ADMIN_KEY", "plain-admin")
    app = build_app(parse_config({"backends": [{"url": "http://127.0.0.1:9"}]}))
    assert (await _call(app, "POST", "/admin/route"))[0] == 401
    assert (await _call(app, "POST", "/admin/route", "plain-admin"))[0] == 400  # empty body


BACKEND = orjson.dumps({"url": "http://10.9.9.9:8000", "id": "theirs"})
WRITES = [
    ("POST", "/admin/backends", BACKEND),
    ("POST", "/admin/backends/127.0.0.1:9/drain", b""),
    ("POST", "/admin/backends/127.0.0.1:9/resume", b""),
    ("DELETE", "/admin/backends/127.0.0.1:9", b""),
    ("POST", "/admin/reload", b""),
    ("POST", "/admin/route", b"{}"),
    ("GET", "/admin/backends", b""),
]


@pytest.mark.parametrize(("method", "path", "body"), WRITES)
async def test_without_an_admin_key_a_remote_client_gets_403_and_changes_nothing(
    monkeypatch: pytest.MonkeyPatch, method: str, path: str, body: bytes
) -> None:
    app = _app(monkeypatch)
    for client in (REMOTE, ("10.1.2.3", 40000), ("::ffff:192.0.2.7", 1), ("2001:db8::1", 1), None):
        status, answer, _ = await _call(app, method, path, client=client, body=body)
        assert status == 403, client
        assert answer["error"]["code"] == "forbidden"
        assert "security.admin_key_sha256" in answer["error"]["message"]
    assert [b.id for b in app.runtime.pool] == ["127.0.0.1:9"]
    page = app.runtime.metrics_page().decode()
    assert 'kvgate_auth_refused_total{reason="admin_not_local"} 5.0' in page


@pytest.mark.parametrize(
    "client", [LOOPBACK, ("127.3.4.5", 1), ("::1", 1), ("::ffff:127.0.0.1", 1)]
)
async def test_without_an_admin_key_a_loopback_client_may_change_backends(
    monkeypatch: pytest.MonkeyPatch, client: tuple[str, int]
) -> None:
    app = _app(monkeypatch)
    status, _, _ = await _call(app, "POST", "/admin/backends", client=client, body=BACKEND)
    assert status == 201
    assert "theirs" in [b.id for b in app.runtime.pool]


@pytest.mark.parametrize(
    "header",
    [
        (b"X-Forwarded-For", b"127.0.0.1"),
        (b"forwarded", b"for=127.0.0.1"),
        (b"x-real-ip", b"127.0.0.1"),
    ],
)
async def test_forwarding_headers_never_make_a_client_local(
    monkeypatch: pytest.MonkeyPatch, header: tuple[bytes, bytes]
) -> None:
    app = _app(monkeypatch)
    # A remote client claiming to be loopback, and a local proxy relaying someone: both 403.
    for client in (REMOTE, LOOPBACK):
        status, _, _ = await _call(
            app, "POST", "/admin/backends", client=client, headers=[header], body=BACKEND
        )
        assert status == 403
    assert "theirs" not in [b.id for b in app.runtime.pool]


async def test_with_an_admin_key_remote_clients_may_change_backends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = _app(monkeypatch, security={"admin_key_sha256": ADMIN_SHA})
    assert (await _call(app, "POST", "/admin/backends", body=BACKEND))[0] == 401
    assert (await _call(app, "POST", "/admin/backends", client=LOOPBACK, body=BACKEND))[0] == 401
    status, _, _ = await _call(app, "POST", "/admin/backends", "admin-key", body=BACKEND)
    assert status == 201


def test_start_up_says_what_is_open(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="gateway.access_control"):
        _app(monkeypatch).runtime.access.log_start_up()
        assert "answers clients on this machine only" in caplog.text
        caplog.clear()
        _app(monkeypatch, security=KEYS).runtime.access.log_start_up()
        assert "are disabled" in caplog.text
        caplog.clear()
        _app(monkeypatch, server={"admin_port": 0}).runtime.access.log_start_up()
        assert caplog.text == ""
        everywhere = {"admin_port": 0, "admin_host": "0.0.0.0"}
        _app(monkeypatch, server=everywhere).runtime.access.log_start_up()
        assert "admin listener on 0.0.0.0 answers any client" in caplog.text
        caplog.clear()
        keyed = {"admin_key_sha256": ADMIN_SHA}
        _app(monkeypatch, server=everywhere, security=keyed).runtime.access.log_start_up()
        assert caplog.text == ""


def test_bad_security_settings_are_config_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KVGATE_UPSTREAM_API_KEY", raising=False)
    cfg = parse_config({"security": {"upstream_authorization": "replace"}})
    with pytest.raises(ConfigError, match=r"security: .*KVGATE_UPSTREAM_API_KEY"):
        AccessControl(cfg, {})


async def test_refusals_are_counted_by_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    app = _app(monkeypatch, security={**KEYS, "admin_key_sha256": ADMIN_SHA})
    await _call(app, "GET", "/v1/models")
    await _call(app, "GET", "/v1/models", "wrong")
    await _call(app, "GET", "/v1/models", "wrong")
    await _call(app, "GET", "/metrics", "ka")
    page = app.runtime.metrics_page().decode()
    assert 'kvgate_auth_refused_total{reason="missing_key"} 1.0' in page
    assert 'kvgate_auth_refused_total{reason="invalid_key"} 2.0' in page
    assert 'kvgate_auth_refused_total{reason="admin_key"} 1.0' in page
