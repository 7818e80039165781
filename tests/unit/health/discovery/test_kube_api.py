from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml

from health.discovery.kube_api import (
    SERVICE_ACCOUNT_DIR,
    GoneError,
    KubeAPIError,
    _parse_event,
    resolve_connection,
)


def test_an_explicit_url_wins_and_carries_no_credentials() -> None:
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    conn = resolve_connection("http://127.0.0.1:8001/", env)
    assert conn.server == "http://127.0.0.1:8001"
    assert conn.token is None and conn.token_file is None


def test_in_cluster_uses_the_service_account(tmp_path: Path) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(KubeAPIError, match="no service account token"):
        resolve_connection(None, env, tmp_path)
    (tmp_path / "token").write_text("t0\n")
    conn = resolve_connection(None, env, tmp_path)
    assert conn.server == "https://[fd00::1]:443"
    assert conn.token_file == tmp_path / "token"
    assert conn.ca_file == str(tmp_path / "ca.crt")
    assert Path("/var/run/secrets/kubernetes.io/serviceaccount") == SERVICE_ACCOUNT_DIR


def test_the_token_is_read_per_request_as_the_kubelet_rotates_it(tmp_path: Path) -> None:
    import httpx

    from health.discovery.kube_api import KubeConnection, _BearerAuth

    token = tmp_path / "token"
    auth = _BearerAuth(KubeConnection(server="https://k", token_file=token))
    for value in ("first", "second"):
        token.write_text(value + "\n")
        request = next(auth.auth_flow(httpx.Request("GET", "https://k/api")))
        assert request.headers["Authorization"] == f"Bearer {value}"
    token.unlink()
    with pytest.raises(KubeAPIError, match="token"):
        next(auth.auth_flow(httpx.Request("GET", "https://k/api")))


def test_kubeconfig_current_context(tmp_path: Path) -> None:
    config = {
        "current-context": "dev",
        "contexts": [
            {"name": "other", "context": {"cluster": "x", "user": "x"}},
            {"name": "dev", "context": {"cluster": "kind", "user": "me"}},
        ],
        "clusters": [
            {
                "name": "kind",
                "cluster": {
                    "server": "https://127.0.0.1:6443",
                    "certificate-authority-data": base64.b64encode(b"PEM").decode(),
                },
            }
        ],
        "users": [{"name": "me", "user": {"token": "secret"}}],
    }
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(config))
    conn = resolve_connection(None, {"KUBECONFIG": str(path)})
    assert conn.server == "https://127.0.0.1:6443"
    assert conn.token == "secret"
    assert conn.ca_file is not None and Path(conn.ca_file).read_bytes() == b"PEM"
    Path(conn.ca_file).unlink()


def test_nowhere_to_connect_says_what_to_give(tmp_path: Path) -> None:
    with pytest.raises(KubeAPIError, match="--kube-api"):
        resolve_connection(None, {"KUBECONFIG": str(tmp_path / "missing"), "HOME": "/nonexistent"})


def test_watch_events_and_errors() -> None:
    event = _parse_event('{"type": "ADDED", "object": {"metadata": {"name": "a"}}}', "/p")
    assert event.type == "ADDED" and event.object["metadata"]["name"] == "a"
    with pytest.raises(GoneError):
        _parse_event('{"type": "ERROR", "object": {"kind": "Status", "code": 410}}', "/p")
    with pytest.raises(KubeAPIError) as info:
        _parse_event('{"type": "ERROR", "object": {"code": 500, "message": "boom"}}', "/p")
    assert info.value.status == 500 and not isinstance(info.value, GoneError)


def test_a_line_that_is_not_an_event_is_an_api_error() -> None:
    with pytest.raises(KubeAPIError, match="not an event"):
        _parse_event("<html>", "/p")
