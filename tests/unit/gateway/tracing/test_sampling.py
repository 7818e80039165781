"""The tracer's sampling decision, read once from the SDK's sampler, matches what the SDK's
`should_sample` decides for every standard `OTEL_TRACES_SAMPLER[_ARG]`."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_ON,
    Decision,
    ParentBased,
    Sampler,
    SamplingResult,
    StaticSampler,
    TraceIdRatioBased,
)
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags

from gateway.tracing.context import RemoteParent
from gateway.tracing.otlp_native import NativeTracer
from gateway.tracing.sampling import ALWAYS, NEVER, Bounds, ratio_bound
from gateway.tracing.setup import static_bounds
from gateway.tracing.spans import Outcome, RequestTrace, Tracer

SAMPLERS = [
    ("always_on", None),
    ("always_off", None),
    ("parentbased_always_on", None),
    ("parentbased_always_off", None),
    ("traceidratio", "0.25"),
    ("traceidratio", "0"),
    ("traceidratio", "1"),
    ("traceidratio", "not a number"),  # the SDK's default rate: 1.0
    ("traceidratio", "1.5"),  # out of range: the same
    ("parentbased_traceidratio", "0.5"),
    ("parentbased_traceidratio", "0.001"),
    ("PARENTBASED_TRACEIDRATIO", "0.5"),  # the SDK lowercases the name
    ("no_such_sampler", None),  # the SDK's default: parentbased_always_on
    (None, None),  # unset: the same
]


def _sdk_sampler(monkeypatch: pytest.MonkeyPatch, name: str | None, arg: str | None) -> Sampler:
    for var, value in (("OTEL_TRACES_SAMPLER", name), ("OTEL_TRACES_SAMPLER_ARG", arg)):
        if value is None:
            monkeypatch.delenv(var, raising=False)
        else:
            monkeypatch.setenv(var, value)
    return TracerProvider().sampler  # what `setup.Tracing` asks the SDK for


def _sdk_decides(sampler: Sampler, trace_id: int, parent: RemoteParent | None) -> bool:
    ctx = None
    if parent is not None:
        remote = SpanContext(trace_id, parent.span_id, True, TraceFlags(parent.flags))
        ctx = trace.set_span_in_context(NonRecordingSpan(remote))
    result = sampler.should_sample(ctx, trace_id, "POST /v1/completions", SpanKind.SERVER)
    return result.decision is Decision.RECORD_AND_SAMPLE


trace_ids = st.integers(1, (1 << 128) - 1)
parents = st.none() | st.builds(
    RemoteParent, trace_ids, st.integers(1, (1 << 64) - 1), st.integers(0, 255)
)


@pytest.mark.parametrize(("name", "arg"), SAMPLERS)
def test_every_standard_sampler_is_read_as_bounds_that_decide_as_it_does(
    name: str | None, arg: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    sdk = _sdk_sampler(monkeypatch, name, arg)
    bounds = static_bounds(sdk)
    assert bounds is not None

    @settings(max_examples=300, deadline=None)
    @given(parent=parents, root_id=trace_ids)
    def decides_alike(parent: RemoteParent | None, root_id: int) -> None:
        trace_id = parent.trace_id if parent is not None else root_id
        assert bounds.sampled(trace_id, parent) is _sdk_decides(sdk, trace_id, parent)

    decides_alike()


@pytest.fixture(params=[Tracer, NativeTracer], ids=["reference", "compiled"])
def tracer_class(request: pytest.FixtureRequest) -> type[Tracer | NativeTracer]:
    return request.param  # type: ignore[no-any-return]


def _tracer(bounds: Bounds, cls: type[Tracer | NativeTracer]) -> Tracer | NativeTracer:
    return cls(bounds, lambda t, o: None, random.Random(7))


def _start(tracer: Tracer | NativeTracer, traceparent: str | None = None) -> RequestTrace:
    return tracer.start("POST", "/v1/completions", traceparent, None)


SAMPLED_PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
UNSAMPLED_PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"


@pytest.mark.parametrize(
    ("name", "root", "sampled_parent", "unsampled_parent"),
    [
        ("always_on", True, True, True),
        ("always_off", False, False, False),
        ("parentbased_always_on", True, True, False),  # the caller's decision is followed
        ("parentbased_always_off", False, True, False),
    ],
)
def test_the_static_samplers(
    name: str,
    root: bool,
    sampled_parent: bool,
    unsampled_parent: bool,
    monkeypatch: pytest.MonkeyPatch,
    tracer_class: type[Tracer | NativeTracer],
) -> None:
    bounds = static_bounds(_sdk_sampler(monkeypatch, name, None))
    assert bounds is not None
    tracer = _tracer(bounds, tracer_class)
    assert all(_start(tracer).sampled is root for _ in range(50))
    assert _start(tracer, SAMPLED_PARENT).sampled is sampled_parent
    assert _start(tracer, UNSAMPLED_PARENT).sampled is unsampled_parent
    # An invalid traceparent is ignored: the root sampler decides.
    assert _start(tracer, "00-" + "0" * 32 + "-00f067aa0ba902b7-01").sampled is root


def test_the_ratio_sampler_keeps_its_share_of_traces_by_their_ids(
    monkeypatch: pytest.MonkeyPatch, tracer_class: type[Tracer | NativeTracer]
) -> None:
    bounds = static_bounds(_sdk_sampler(monkeypatch, "traceidratio", "0.25"))
    assert bounds == Bounds.same(ratio_bound(0.25)) == Bounds.same(1 << 62)
    tracer = _tracer(bounds, tracer_class)
    traces = [_start(tracer) for _ in range(4000)]
    share = sum(t.sampled for t in traces) / len(traces)
    assert 0.2 < share < 0.3
    assert all(t.sampled is (t.trace_id & ((1 << 64) - 1) < 1 << 62) for t in traces)
    # Not parent-based: the caller's flag does not count, its trace id does.
    low = "00-4bf92f3577b34da6" + "0" * 16 + "-00f067aa0ba902b7-00"
    high = "00-4bf92f3577b34da6" + "f" * 16 + "-00f067aa0ba902b7-01"
    assert _start(tracer, low).sampled and not _start(tracer, high).sampled


def test_the_parent_based_ratio_sampler(
    monkeypatch: pytest.MonkeyPatch, tracer_class: type[Tracer | NativeTracer]
) -> None:
    bounds = static_bounds(_sdk_sampler(monkeypatch, "parentbased_traceidratio", "0.1"))
    assert bounds == Bounds(ratio_bound(0.1), ALWAYS, NEVER)
    tracer = _tracer(bounds, tracer_class)
    share = sum(_start(tracer).sampled for _ in range(4000)) / 4000
    assert 0.07 < share < 0.13
    high = "00-4bf92f3577b34da6" + "f" * 16 + "-00f067aa0ba902b7-01"
    low = "00-4bf92f3577b34da6" + "0" * 16 + "-00f067aa0ba902b7-00"
    assert _start(tracer, high).sampled  # the caller sampled it: so does kvgate
    assert not _start(tracer, low).sampled  # the caller did not: nor does kvgate


class _ByName(Sampler):
    """A sampler of its own: asked per request."""

    def should_sample(self, *args: Any, **kwargs: Any) -> SamplingResult:
        name = args[2] if len(args) > 2 else kwargs["name"]
        sampled = name.endswith("/v1/completions")
        return SamplingResult(Decision.RECORD_AND_SAMPLE if sampled else Decision.DROP)

    def get_description(self) -> str:
        return "ByName"


class _Inverted(TraceIdRatioBased):
    def should_sample(self, *args: Any, **kwargs: Any) -> SamplingResult:
        result = super().should_sample(*args, **kwargs)
        sampled = result.decision is Decision.RECORD_AND_SAMPLE
        flipped = Decision.DROP if sampled else Decision.RECORD_AND_SAMPLE
        return SamplingResult(flipped)


@pytest.mark.parametrize(
    "sampler",
    [
        _ByName(),
        _Inverted(0.5),  # the SDK's class, with a decision of its own
        ParentBased(_ByName()),
        ParentBased(ALWAYS_ON, remote_parent_not_sampled=_ByName()),
        StaticSampler(Decision.RECORD_ONLY),
    ],
)
def test_another_sampler_is_not_read_as_bounds(sampler: Sampler) -> None:
    assert static_bounds(sampler) is None


def test_another_sampler_is_asked_per_request(tracer_class: type[Tracer | NativeTracer]) -> None:
    from gateway.tracing.setup import _sampling

    queued: list[RequestTrace] = []
    tracer = tracer_class(_sampling(_ByName()), lambda t, o: queued.append(t), random.Random(1))
    kept = tracer.start("POST", "/v1/completions", None, None)
    dropped = tracer.start("POST", "/v1/chat/completions", None, None)
    assert kept.sampled and not dropped.sampled
    for t in (kept, dropped):
        tracer.finish(t, Outcome(200, "m", False, None, None, None))
    assert queued == [kept]
