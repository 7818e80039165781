"""Fuzzed request bodies (hypothesis): never a 500, a traceback or a gateway down.

Bodies are arbitrary JSON, valid requests with one field replaced by arbitrary JSON, or
arbitrary bytes, sent to every inference path. The engine behind answers anything with 200,
so any 5xx is the gateway's own. Seeded (``derandomize``) so a run is repeatable.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.chaos.checks import assert_survived, is_openai_error
from tests.chaos.conftest import StartGateway
from tests.support import misbehaviour
from tests.support.gateway_process import gateway_config
from tests.support.raw_engine import RawEngine

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(300)]

PATHS = (
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
    "/v1/responses",
)
BASE = {
    "/v1/chat/completions": {"model": "m1", "messages": [{"role": "user", "content": "hi"}]},
    "/v1/completions": {"model": "m1", "prompt": "hi"},
    "/v1/embeddings": {"model": "m1", "input": "hi"},
    "/v1/responses": {"model": "m1", "input": "hi"},
}
FIELDS = (
    "model",
    "messages",
    "prompt",
    "input",
    "stream",
    "stream_options",
    "max_tokens",
    "n",
    "user",
    "tools",
    "content",
    "role",
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5)
    ),
    max_leaves=25,
)


def _dumps(value: object) -> bytes:
    # The stdlib writes integers past 64 bits (orjson refuses): clients can send them.
    return json.dumps(value).encode()


@st.composite
def request_bodies(draw: st.DrawFn) -> tuple[str, bytes]:
    path = draw(st.sampled_from(PATHS))
    kind = draw(st.sampled_from(["mutated", "mutated", "json", "bytes", "message"]))
    if kind == "json":
        return path, _dumps(draw(json_values))
    if kind == "bytes":
        return path, draw(st.binary(max_size=200))
    body: dict[str, Any] = dict(BASE[path])
    if kind == "message":
        body["messages"] = [draw(st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=4))]
    else:
        for name in draw(st.lists(st.sampled_from(FIELDS), min_size=1, max_size=3)):
            body[name] = draw(json_values)
    return path, _dumps(body)


def test_fuzzed_request_bodies(
    gateway: StartGateway,
    raw_engines: Callable[..., RawEngine],
    figures: Callable[..., None],
) -> None:
    engine = raw_engines(misbehaviour.well(tokens=2))
    gw = gateway(gateway_config([engine.url], health={"passive_fail_threshold": 1000}))
    seen: dict[int, int] = {}

    with httpx.Client(base_url=gw.url, timeout=20.0) as client:

        @settings(
            max_examples=400,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(request_bodies())
        def one(case: tuple[str, bytes]) -> None:
            path, body = case
            resp = client.post(path, content=body, headers={"content-type": "application/json"})
            seen[resp.status_code] = seen.get(resp.status_code, 0) + 1
            assert resp.status_code < 500, (
                f"{path} {body[:200]!r}: {resp.status_code} {resp.text[:300]}"
            )
            if resp.status_code >= 400:
                assert is_openai_error(resp), f"{path} {body[:200]!r}: {resp.text[:300]}"

        try:
            one()
        finally:
            figures(
                requests=sum(seen.values()),
                statuses=" ".join(f"{k}:{v}" for k, v in sorted(seen.items())),
            )
    assert_survived(gw)
