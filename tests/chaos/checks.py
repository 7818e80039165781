"""What every chaos case checks of the gateway it attacked, and small shared requests."""

from __future__ import annotations

import time
from typing import Any

import httpx

from tests.support.gateway_process import GatewayProcess

CHAT = {"model": "m1", "messages": [{"role": "user", "content": "hello there"}]}


def chat(gw: GatewayProcess, timeout: float = 20.0, **kw: Any) -> httpx.Response:
    """One non-streaming chat completion through the gateway (``kw`` to httpx)."""
    kw.setdefault("json", CHAT)
    return httpx.post(gw.url + "/v1/chat/completions", timeout=timeout, **kw)


def backend_states(gw: GatewayProcess) -> dict[str, str]:
    """Health of each backend by URL, from ``GET /admin/backends`` (open when no keys)."""
    body = httpx.get(gw.url + "/admin/backends", timeout=5.0).json()
    return {b["url"]: b["health"] for b in body["backends"]}


def wait_for(condition: Any, within: float, step: float = 0.02) -> float:
    """Poll until ``condition()`` is true; the seconds it took (AssertionError on timeout)."""
    t0 = time.monotonic()
    while True:
        try:
            if condition():
                return time.monotonic() - t0
        except httpx.HTTPError:
            pass
        if time.monotonic() - t0 > within:
            raise AssertionError(f"still not true after {within} s: {condition.__doc__ or ''}")
        time.sleep(step)


def is_openai_error(resp: httpx.Response) -> bool:
    """An OpenAI-shaped error body: ``{"error": {"message", "type", "code"}}``."""
    try:
        err = resp.json().get("error")
    except ValueError:
        return False
    return isinstance(err, dict) and {"message", "type", "code"} <= err.keys()


def assert_survived(gw: GatewayProcess, max_metrics_bytes: int = 2_000_000) -> None:
    """After an attack: the process lives, answers /health, its /metrics page stays bounded
    and its log holds no traceback."""
    assert gw.running, f"the gateway process died:\n{gw.log_text()[-3000:]}"
    assert gw.healthy(timeout=10.0), "the gateway stopped answering GET /health"
    size = len(httpx.get(gw.url + "/metrics", timeout=10.0).content)
    assert size <= max_metrics_bytes, f"/metrics grew to {size} bytes"
    log = gw.log_text()
    assert "Traceback" not in log, "traceback in the gateway log:\n" + _around(log, "Traceback")


def _around(text: str, needle: str, chars: int = 2500) -> str:
    at = text.find(needle)
    return text[max(0, at - 200) : at + chars]
