"""The endpoint picker on a prefill/decode pool: D is the destination, P is named in llm-d's
`x-prefiller-host-port`, and P's leg (run by D's sidecar before D answers) is accounted from
the pick to D's answer."""

from __future__ import annotations

import random

import orjson

from gateway.compose import build_runtime
from gateway.epp.picker import PREFILLER_HEADER, EndpointPicker, Exchange
from gateway.runtime import Runtime
from routing.config.schema import parse_config

MODEL = "m"
PATH = "/v1/chat/completions"
P, D1, D2 = "10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"
LONG = "a long prompt that D has never seen " * 60
SSE = "text/event-stream"


def _runtime(mode: str = "always") -> Runtime:
    raw = {
        "backends": [
            {"url": f"http://{P}", "models": [MODEL], "role": "prefill"},
            {"url": f"http://{D1}", "models": [MODEL], "role": "decode"},
            {"url": f"http://{D2}", "models": [MODEL], "role": "decode"},
        ],
        "routing": {"policy": "round-robin"},
        "disaggregation": {"protocol": "vllm", "mode": mode},
        "server": {"access_log": False},
    }
    rt = build_runtime(parse_config(raw), clock=lambda: 1.0, rng=random.Random(1))
    for backend in rt.pool:
        backend.state.record_probe(True, 0.0)
    return rt


def _pick(picker: EndpointPicker, content: str = LONG, stream: bool = True) -> Exchange:
    body = {"model": MODEL, "stream": stream, "messages": [{"role": "user", "content": content}]}
    return picker.pick(PATH, {":method": "POST"}, orjson.dumps(body), "r1")


def _in_flight(rt: Runtime) -> dict[str, int]:
    return {b.id: b.in_flight for b in rt.pool}


def _pending(rt: Runtime) -> dict[str, int]:
    return {b.id: b.pending_prefill_tokens for b in rt.pool}


def _decisions(rt: Runtime, path: str, why: str) -> float | None:
    labels = {"path": path, "why": why}
    return rt.metrics.registry.get_sample_value("kvgate_pd_decisions_total", labels)


def test_a_split_request_goes_to_d_and_names_p_in_llm_d_header() -> None:
    rt = _runtime()
    ex = _pick(EndpointPicker(rt.director, max_fallbacks=0))
    assert ex.destination in (D1, D2)
    assert (PREFILLER_HEADER, P.encode()) in ex.request_headers()
    assert ex.removed_headers() == []  # set, not removed
    assert ex.attempt is not None and ex.attempt.leg == "decode"
    assert _decisions(rt, "split", "mode_always") == 1
    assert _in_flight(rt) == {P: 1, ex.destination: 1, ({D1, D2} - {ex.destination}).pop(): 0}
    assert _pending(rt)[P] > 0  # P's predicted prefill is queued; D queues none
    assert _pending(rt)[ex.destination] == 0


def test_p_leg_is_over_once_d_answers_while_d_streams_on() -> None:
    rt = _runtime()
    picker = EndpointPicker(rt.director, max_fallbacks=0)
    ex = _pick(picker)
    d = ex.destination
    picker.response_status(ex, 200, SSE)  # D's sidecar ran P before D answered
    assert _in_flight(rt)[P] == 0 and _in_flight(rt)[d] == 1
    assert _pending(rt)[P] == 0
    picker.response_chunk(ex, b'data: {"choices": []}\n\n', end=False)
    picker.response_chunk(ex, b"data: [DONE]\n\n", end=True)
    picker.finish(ex, completed=True)
    assert _in_flight(rt) == {P: 0, D1: 0, D2: 0}
    assert (
        rt.metrics.registry.get_sample_value(
            "kvgate_requests_total", {"backend": d, "model": MODEL, "status": "200"}
        )
        == 1
    )


def test_a_request_cut_before_d_answered_releases_both_legs() -> None:
    rt = _runtime()
    picker = EndpointPicker(rt.director, max_fallbacks=0)
    ex = _pick(picker, stream=False)
    picker.finish(ex, completed=False)
    picker.finish(ex, completed=False)  # once only
    assert _in_flight(rt) == {P: 0, D1: 0, D2: 0} and _pending(rt) == {P: 0, D1: 0, D2: 0}


def test_a_fallback_decoder_that_served_takes_over_the_decode_leg() -> None:
    rt = _runtime()
    picker = EndpointPicker(rt.director, max_fallbacks=1)
    ex = _pick(picker)
    first, fallback = ex.destination.split(",")
    picker.served(ex, fallback)  # the proxy could not use the first D
    assert ex.attempt is not None and ex.attempt.endpoint.id == fallback
    assert ex.attempt.leg == "decode"  # KV comes from P: no prefill queued on D, no TTFT point
    assert _in_flight(rt) == {P: 1, first: 0, fallback: 1}
    assert _pending(rt)[fallback] == 0
    picker.response_status(ex, 200, SSE)
    picker.finish(ex, completed=True)
    assert _in_flight(rt) == {P: 0, D1: 0, D2: 0}


def test_conditional_keeps_a_short_prompt_on_d_without_naming_p() -> None:
    rt = _runtime("conditional")
    picker = EndpointPicker(rt.director, max_fallbacks=0)
    ex = _pick(picker, content="hi")
    assert ex.destination in (D1, D2) and ex.prefill is None
    assert all(name != PREFILLER_HEADER for name, _ in ex.request_headers())
    assert ex.removed_headers() == [PREFILLER_HEADER]  # only the picker names P
    assert ex.attempt is not None and ex.attempt.leg == "whole"
    assert _decisions(rt, "local", "cached") == 1
    assert _in_flight(rt)[P] == 0
    picker.response_status(ex, 200, "application/json")
    picker.finish(ex, completed=True)
    assert _in_flight(rt) == {P: 0, D1: 0, D2: 0}
