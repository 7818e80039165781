"""The reference picker's per-request series: names, labels, error codes, bounded values."""

from __future__ import annotations

import random

import orjson
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gateway.app import GatewayApp
from gateway.compose import build_runtime
from gateway.epp.pb.envoy.config.core.v3 import base_pb2
from gateway.epp.pb.envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from gateway.epp.picker import EndpointPicker
from gateway.epp.processor import RequestStream
from gateway.epp.request_metrics import MAX_FAIRNESS_IDS, EppRequestMetrics, error_code
from gateway.usage import Usage
from routing.config.schema import parse_config

MODEL = "m"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _samples(registry: CollectorRegistry) -> Samples:
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _labels(**extra: str) -> tuple[tuple[str, str], ...]:
    base = {"model_name": MODEL, "target_model_name": MODEL}
    base.setdefault("fairness_id", "default-flow")
    base.setdefault("priority", "0")
    return tuple(sorted({**base, **extra}.items()))


def _served(model: str) -> str:
    return model if model in {MODEL, ""} else "other"


def test_a_request_counted_when_picked_and_released_at_its_end() -> None:
    registry = CollectorRegistry()
    m = EppRequestMetrics(registry, _served)
    labels = m.labels(MODEL, MODEL, {})
    m.picked(labels, 1500)
    got = _samples(registry)
    assert got[("llm_d_epp_request_total", _labels())] == 1.0
    assert got[("llm_d_epp_request_running", _labels())] == 1.0
    assert got[("inference_objective_running_requests", (("model_name", MODEL),))] == 1.0
    twin = (("model_name", MODEL), ("target_model_name", MODEL))
    assert got[("inference_objective_request_sizes_count", twin)] == 1.0
    assert got[("llm_d_epp_request_size_bytes_bucket", _labels(le="2048.0"))] == 1.0
    m.finished(labels, 200, 2.5, Usage(prompt_tokens=300, cached_tokens=0, completion_tokens=9))
    got = _samples(registry)
    assert got[("llm_d_epp_request_running", _labels())] == 0.0
    assert got[("llm_d_epp_request_duration_seconds_sum", _labels())] == 2.5
    assert got[("inference_objective_request_duration_seconds_count", twin)] == 1.0
    assert got[("llm_d_epp_request_input_tokens_sum", _labels())] == 300.0
    assert got[("inference_objective_output_tokens_sum", twin)] == 9.0
    assert not any(k[0] == "llm_d_epp_request_error_total" for k in got)


def test_errors_in_the_references_words() -> None:
    registry = CollectorRegistry()
    m = EppRequestMetrics(registry, _served)
    labels = m.labels(MODEL, MODEL, {"x-llm-d-inference-fairness-id": "team-a"})
    m.refused(labels, 503)
    m.picked(labels, 10)
    m.finished(labels, 500, 0.1, None)  # the engine's error
    m.picked(labels, 10)
    m.finished(labels, 0, None, None)  # cut before an answer: no error, no duration
    got = _samples(registry)
    team = _labels(fairness_id="team-a")
    unavailable = _labels(fairness_id="team-a", error_code="ServiceUnavailable")
    assert got[("llm_d_epp_request_error_total", unavailable)] == 1.0
    engine = _labels(fairness_id="team-a", error_code="ModelServerError")
    assert got[("llm_d_epp_request_error_total", engine)] == 1.0
    twin = (("error_code", "ModelServerError"), ("model_name", MODEL), ("target_model_name", MODEL))
    assert got[("inference_objective_request_error_total", twin)] == 1.0
    assert got[("llm_d_epp_request_duration_seconds_count", team)] == 1.0
    assert got[("llm_d_epp_request_running", team)] == 0.0
    codes = {s: error_code(s) for s in (400, 404, 429, 500, 503, 418)}
    assert codes == {
        400: "BadRequest",
        404: "NotFound",
        429: "ResourceExhausted",
        500: "Internal",
        503: "ServiceUnavailable",
        418: "Unknown",
    }


def test_label_values_are_bounded() -> None:
    m = EppRequestMetrics(CollectorRegistry(), _served)
    assert m.labels("made-up", "made-up", {}).model == "other"
    old = {"x-gateway-inference-fairness-id": "legacy"}
    assert m.labels(MODEL, MODEL, old).fairness_id == "legacy"  # the old header name too
    for i in range(MAX_FAIRNESS_IDS):
        m.labels(MODEL, MODEL, {"x-llm-d-inference-fairness-id": f"t{i}"})
    assert m.labels(MODEL, MODEL, {"x-llm-d-inference-fairness-id": "one-more"}).fairness_id == (
        "other"
    )
    assert m.labels(MODEL, MODEL, {"x-llm-d-inference-fairness-id": "t7"}).fairness_id == "t7"


def _headers(**extra: str) -> pb.ProcessingRequest:
    values = {":method": "POST", ":path": "/v1/chat/completions", **extra}
    hm = base_pb2.HeaderMap(
        headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in values.items()]
    )
    return pb.ProcessingRequest(request_headers=pb.HttpHeaders(headers=hm))


def test_the_picker_counts_through_an_ext_proc_stream() -> None:
    raw = {"backends": [{"url": "http://10.0.0.1:8000", "models": [MODEL]}]}
    app = GatewayApp(build_runtime(parse_config(raw), clock=lambda: 1.0, rng=random.Random(1)))
    app.runtime.pool.get("10.0.0.1:8000").state.record_probe(True, 0.0)
    metrics = app.runtime.metrics
    counted = EppRequestMetrics(metrics.registry, metrics.model_label)
    picker = EndpointPicker(app.runtime.director, metrics=counted)
    body = orjson.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
    stream = RequestStream(picker, 1 << 20)
    stream.handle(_headers())
    stream.handle(pb.ProcessingRequest(request_body=pb.HttpBody(body=body, end_of_stream=True)))
    status = base_pb2.HeaderMap(headers=[base_pb2.HeaderValue(key=":status", raw_value=b"200")])
    stream.handle(pb.ProcessingRequest(response_headers=pb.HttpHeaders(headers=status)))
    stream.handle(pb.ProcessingRequest(response_body=pb.HttpBody(body=b"{}", end_of_stream=True)))
    refused = RequestStream(picker, 1 << 20)
    refused.handle(_headers())
    refused.handle(pb.ProcessingRequest(request_body=pb.HttpBody(body=b"{x", end_of_stream=True)))
    got = _samples(metrics.registry)
    assert got[("llm_d_epp_request_total", _labels())] == 1.0
    assert got[("llm_d_epp_request_running", _labels())] == 0.0
    bad = _labels(model_name="", target_model_name="", error_code="BadRequest")
    assert got[("llm_d_epp_request_error_total", bad)] == 1.0
