from __future__ import annotations

import random

import pytest

from gateway.tracing.context import parse_traceparent
from gateway.tracing.setup import Tracing, build_tracing, tracing_settings
from gateway.tracing.spans import Outcome
from routing.config.schema import ConfigError

ON = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}


def test_off_by_default_and_when_disabled() -> None:
    assert build_tracing({}) is None
    assert tracing_settings({"OTEL_TRACES_EXPORTER": "none"}) is None
    assert tracing_settings({**ON, "OTEL_SDK_DISABLED": "true"}) is None


@pytest.mark.parametrize(
    ("env", "protocol"),
    [
        ({}, "grpc"),  # the Python SDK's default for otlp
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, "http/protobuf"),
        (
            {
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            },
            "http/protobuf",
        ),
        ({"OTEL_TRACES_EXPORTER": "otlp_proto_http"}, "http/protobuf"),
    ],
)
def test_the_protocol(env: dict[str, str], protocol: str) -> None:
    settings = tracing_settings({**ON, **env})
    assert settings is not None and settings.protocol == protocol


@pytest.mark.parametrize(
    "env",
    [
        {"OTEL_TRACES_EXPORTER": "zipkin"},
        {"OTEL_TRACES_EXPORTER": "otlp,console"},
        {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
    ],
)
def test_what_kvgate_cannot_do_fails_the_start(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        tracing_settings({**ON, **env})


def _sampled(env: dict[str, str], traceparent: str | None = None) -> bool:
    tracing = Tracing(tracing_settings({**ON, **env}), env)  # type: ignore[arg-type]
    trace = tracing.tracer.start("POST", "/v1/completions", traceparent, None)
    return trace.sampled


def test_the_sdk_sampler_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    assert not _sampled({})
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_always_on")
    assert _sampled({})
    unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
    assert not _sampled({}, unsampled)  # the caller's decision is followed


def test_an_unsampled_request_queues_nothing_but_still_propagates() -> None:
    from gateway.tracing.spans import Tracer

    queued: list[object] = []
    tracer = Tracer(lambda *_: False, lambda t, o: queued.append(t), random.Random(3))
    header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    t = tracer.start("POST", "/v1/chat/completions", header, "a=b")
    span = t.upstream("e1", "http://127.0.0.1:1", 1)
    [(name, value), (state_name, state)] = t.propagation(span.span_id)
    parsed = parse_traceparent(value.decode())
    assert name == b"traceparent" and parsed is not None and not parsed.sampled
    assert parsed.trace_id == int("4bf92f3577b34da6a3ce929d0e0e4736", 16)
    assert parsed.span_id == span.span_id
    assert (state_name, state) == (b"tracestate", b"a=b")
    tracer.finish(t, Outcome(200, "m", False, None, None, None))
    assert queued == []
