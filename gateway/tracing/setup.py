"""Tracing from the standard `OTEL_*` environment variables; off unless asked for.

On: `OTEL_TRACES_EXPORTER=otlp` (or `otlp_proto_grpc`, `otlp_proto_http`), unless
`OTEL_SDK_DISABLED=true`. The protocol is `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`, else
`OTEL_EXPORTER_OTLP_PROTOCOL`: `grpc` (the Python SDK's default) or `http/protobuf`. The
exporters read their own `OTEL_EXPORTER_OTLP_[TRACES_]{ENDPOINT,HEADERS,TIMEOUT,COMPRESSION,
CERTIFICATE,INSECURE}`; the SDK's `TracerProvider` reads `OTEL_TRACES_SAMPLER[_ARG]`, and
its `Resource` `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` (service.name defaults to
`kvgate`); the batching reads `OTEL_BSP_*` (`gateway.tracing.export`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.tracing.context import RemoteParent
from gateway.tracing.sampling import ALWAYS, NEVER, Bounds
from gateway.tracing.spans import Outcome, RequestTrace, Sample, Tracer
from gateway.version import installed_version
from routing.config.schema import ConfigError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.sampling import Sampler

    from gateway.tracing.otlp_native import NativeTracer

log = logging.getLogger(__name__)

OTLP_EXPORTERS = {"otlp": None, "otlp_proto_grpc": "grpc", "otlp_proto_http": "http/protobuf"}
PROTOCOLS = ("grpc", "http/protobuf")
SCOPE = "kvgate"


@dataclass(frozen=True, slots=True)
class TracingSettings:
    """What the environment asked for: the OTLP protocol (tracing is on)."""

    protocol: str


def tracing_settings(environ: Mapping[str, str]) -> TracingSettings | None:
    """None when tracing is off; ConfigError for an exporter or protocol kvgate lacks."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    names = [n.strip() for n in environ.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip()]
    names = [n for n in names if n != "none"]
    if not names:
        return None
    unknown = [n for n in names if n not in OTLP_EXPORTERS]
    if unknown or len(names) > 1:
        raise ConfigError(
            f"OTEL_TRACES_EXPORTER={environ['OTEL_TRACES_EXPORTER']!r}: kvgate exports "
            "traces with one of otlp, otlp_proto_grpc, otlp_proto_http (or none)"
        )
    protocol = OTLP_EXPORTERS[names[0]]
    if protocol is None:
        raw = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get(
            "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"
        )
        protocol = raw.strip() or "grpc"
    if protocol not in PROTOCOLS:
        raise ConfigError(
            f"OTLP protocol {protocol!r} is not supported: use {' or '.join(PROTOCOLS)}"
        )
    return TracingSettings(protocol)


class Tracing:
    """The tracer the request path uses and the export thread behind it."""

    def __init__(self, settings: TracingSettings, environ: Mapping[str, str]) -> None:
        try:
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider

            from gateway.tracing.export import (
                BatchExport,
                BatchSettings,
                make_exporter,
                span_encoder,
            )
        except ImportError as exc:
            raise ConfigError(
                f"OTEL_TRACES_EXPORTER is set but OpenTelemetry is not installed ({exc}): "
                "pip install 'kvgate[otel]'"
            ) from None
        resource = Resource.create()
        if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
            resource = resource.merge(Resource({"service.name": SCOPE}))
        # The SDK's provider reads OTEL_TRACES_SAMPLER(_ARG); only its sampler is used.
        self.sampler = TracerProvider(resource=resource).sampler
        version = installed_version() or "unknown"
        encoder = span_encoder(dict(resource.attributes), SCOPE, version)  # type: ignore[arg-type]
        self.protocol = settings.protocol
        self.export = BatchExport(
            encoder, make_exporter(settings.protocol), BatchSettings.from_env(environ)
        )
        bounds = static_bounds(self.sampler)
        self.tracer = new_tracer(bounds or _sampling(self.sampler), self.export.add)

    async def run(self) -> None:
        """The export loop (a background loop of the gateway)."""
        log.info("tracing on: OTLP over %s, sampler %s", self.protocol, self.sampler)
        await self.export.run()

    async def close(self) -> None:
        """Export what is left, then stop the exporter."""
        await self.export.close()


def new_tracer(
    sample: Bounds | Sample, sink: Callable[[RequestTrace, Outcome], None]
) -> Tracer | NativeTracer:
    """The compiled tracer when it is built (with the compiled encoder), else `Tracer`."""
    try:
        from gateway.tracing.otlp_native import NativeTracer
    except ImportError:
        return Tracer(sample, sink)
    return NativeTracer(sample, sink)


def static_bounds(sampler: Sampler) -> Bounds | None:
    """The SDK's sampler as `Bounds` when it decides by the SDK's own code for the
    standard samplers (all that `OTEL_TRACES_SAMPLER` names), else None (`sampling`)."""
    from opentelemetry.sdk.trace.sampling import ParentBased

    if not _decides_as(sampler, ParentBased):
        bound = _bound(sampler)
        return Bounds.same(bound) if bound is not None else None
    assert isinstance(sampler, ParentBased)
    # A request's parent can only be remote: the local-parent samplers never decide.
    root = _bound(sampler._root)
    parent_sampled = _bound(sampler._remote_parent_sampled)
    parent_unsampled = _bound(sampler._remote_parent_not_sampled)
    if root is None or parent_sampled is None or parent_unsampled is None:
        return None
    return Bounds(root, parent_sampled, parent_unsampled)


def _decides_as(sampler: Sampler, kind: type[Sampler]) -> bool:
    """`sampler` is a `kind` whose `should_sample` is `kind`'s own."""
    return isinstance(sampler, kind) and type(sampler).should_sample is kind.should_sample


def _bound(sampler: Sampler) -> int | None:
    from opentelemetry.sdk.trace.sampling import Decision, StaticSampler, TraceIdRatioBased

    if _decides_as(sampler, TraceIdRatioBased):
        assert isinstance(sampler, TraceIdRatioBased)
        return sampler.bound
    if _decides_as(sampler, StaticSampler):
        assert isinstance(sampler, StaticSampler)
        decision = sampler._decision
        if decision is Decision.RECORD_AND_SAMPLE:
            return ALWAYS
        if decision is Decision.DROP:
            return NEVER
    return None  # RECORD_ONLY (recorded, not exported: kvgate has no use for it), or another


def _sampling(sampler: Sampler) -> Sample:
    """`sampler.should_sample` as the tracer calls it: once per request, for the server
    span (its routing and upstream spans follow that decision, as a parent-based sampler
    would decide them)."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace.sampling import Decision
    from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags

    should_sample = sampler.should_sample
    record_and_sample = Decision.RECORD_AND_SAMPLE  # the one decision that samples
    server = SpanKind.SERVER

    def sample(trace_id: int, parent: RemoteParent | None, name: str) -> bool:
        ctx = None
        if parent is not None:
            remote = SpanContext(trace_id, parent.span_id, True, TraceFlags(parent.flags))
            ctx = trace.set_span_in_context(NonRecordingSpan(remote))
        decision = should_sample(ctx, trace_id, name, server).decision
        return decision is record_and_sample

    return sample


def build_tracing(environ: Mapping[str, str]) -> Tracing | None:
    """Tracing as the environment configures it, or None when it is off."""
    settings = tracing_settings(environ)
    return Tracing(settings, environ) if settings is not None else None
