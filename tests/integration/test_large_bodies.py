"""A 16 MiB body of tiny chat messages, parsed while the real gateway keeps serving others."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import orjson
import pytest

from gateway import large_body
from tests.integration.conftest import StartGateway
from tests.support.fixture_types import StartEngines


def test_other_requests_are_served_while_a_large_body_parses(
    fake_engines: StartEngines, start_gateway: StartGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    window: list[float] = []
    loads = large_body.loads_yielding

    def timed(body: bytes) -> Any:
        window.append(time.perf_counter())
        try:
            return loads(body)
        finally:
            window.append(time.perf_counter())

    monkeypatch.setattr(large_body, "loads_yielding", timed)
    [(engine, s1)] = fake_engines(1)
    # Probes that a busy machine cannot fail: the in-process engine parses 16 MiB too.
    _, gw = start_gateway([s1.url], health={"probe_interval_s": 30.0, "probe_timeout_s": 30.0})
    messages = [{"role": "user", "content": ""}] * ((16 * 1024 * 1024 - 65536) // 30)
    big = orjson.dumps({"model": "m1", "messages": messages, "max_tokens": 1})
    answered: list[int] = []

    def send_big() -> None:
        with httpx.Client(base_url=gw.url, timeout=120) as c:
            headers = {"content-type": "application/json"}
            answered.append(
                c.post("/v1/chat/completions", content=big, headers=headers).status_code
            )

    sender = threading.Thread(target=send_big)
    served: list[float] = []
    with httpx.Client(base_url=gw.url, timeout=30) as small:
        sender.start()
        while sender.is_alive():
            assert small.get("/health").status_code == 200
            served.append(time.perf_counter())
            time.sleep(0.005)
    sender.join()
    assert answered == [200]
    assert len(engine.inference_requests()) == 1
    start, end = window
    during = [t for t in served if start < t < end]
    assert len(during) >= 3, f"{len(during)} requests served during a {end - start:.2f} s parse"
