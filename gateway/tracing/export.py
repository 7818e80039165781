"""The export side: each finished request's spans encoded as it ends (`otlp_native`, or
its reference `otlp_wire`), a queue of them, and a background loop that hands batches to
the SDK's official OTLP exporters, gRPC or HTTP/protobuf, in a worker thread.

The batching follows the SDK's BatchSpanProcessor and its `OTEL_BSP_*` variables: an export
every `OTEL_BSP_SCHEDULE_DELAY` ms, or sooner once `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` spans
wait; past `OTEL_BSP_MAX_QUEUE_SIZE` spans a request's trace is dropped (counted). Spans are
counted as 3 a request here (4 or more with failover): the queue holds requests.

The exporters take `EncodedSpans` in place of SDK spans: the gRPC one through its
`_translate_data` hook (the message is parsed back from the bytes, in C), the HTTP one by
an `export` that posts the bytes as the official one posts its own encoding. Both rely on
the exporters' internals of the pinned minor series (pyproject.toml); `tests/unit/gateway/
tracing` fails if they move.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpSpanExporter,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.trace.export import SpanExportResult

from gateway.tracing.otlp_wire import AttrValue, SpanEncoder
from gateway.tracing.spans import Outcome, RequestTrace

log = logging.getLogger(__name__)
SPANS_PER_REQUEST = 3


@dataclass(frozen=True, slots=True)
class EncodedSpans:
    """One batch, encoded: an `ExportTraceServiceRequest`'s bytes."""

    payload: bytes
    spans: int

    def __len__(self) -> int:  # what the exporters' own metrics count
        return self.spans


class RequestEncoder(Protocol):
    """`otlp_wire.SpanEncoder` or its compiled twin `otlp_native.NativeSpanEncoder`."""

    def request(self, trace: RequestTrace, outcome: Outcome) -> tuple[bytes, int]: ...

    def batch(self, spans: Iterable[bytes]) -> bytes: ...


def span_encoder(resource: Mapping[str, AttrValue], scope: str, version: str) -> RequestEncoder:
    """The compiled encoder when it is built (`pip install` with a C compiler), else the
    pure-Python reference, which writes the same bytes ~10x slower."""
    try:
        from gateway.tracing.otlp_native import NativeSpanEncoder
    except ImportError:
        log.warning("gateway.tracing.otlp_native is not built: encoding spans in Python")
        return SpanEncoder(resource, scope, version)
    return NativeSpanEncoder(resource, scope, version)


class SpanSender(Protocol):
    def export(self, batch: Any) -> SpanExportResult: ...

    def shutdown(self) -> None: ...


class _BytesTraceStub:
    """`TraceServiceStub` whose `Export` takes the request already serialized."""

    def __init__(self, channel: Any) -> None:
        self.Export = channel.unary_unary(
            "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
            request_serializer=None,  # the bytes as they are
            response_deserializer=ExportTraceServiceResponse.FromString,
        )


class GrpcExporter(GrpcSpanExporter):
    """The SDK's OTLP/gRPC exporter (channel, credentials, headers, compression, retries and
    reconnection), sending batches encoded by kvgate as they are."""

    def __init__(self) -> None:
        super().__init__()
        self._stub = _BytesTraceStub  # also what a reconnection builds
        self._client = _BytesTraceStub(self._channel)  # type: ignore[assignment]

    def _translate_data(self, data: Any) -> Any:
        return data.payload

    def _count_data(self, data: Any) -> int:
        return len(data)


class HttpExporter(HttpSpanExporter):
    """The SDK's OTLP/HTTP (protobuf) exporter, posting batches encoded by kvgate."""

    def export(self, spans: Any) -> SpanExportResult:
        if self._shutdown:
            log.warning("OTLP exporter already shut down, dropping %d spans", len(spans))
            return SpanExportResult.FAILURE
        with self._metrics.export_operation(len(spans)) as result:
            outcome = self._client.export(spans.payload)
            if not outcome.success:
                result.error = outcome.error
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS


@dataclass(frozen=True, slots=True)
class BatchSettings:
    """The `OTEL_BSP_*` variables (the SDK's defaults)."""

    schedule_delay_s: float = 5.0
    max_queue_spans: int = 2048
    max_batch_spans: int = 512
    export_timeout_s: float = 30.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> BatchSettings:
        def number(name: str, default: float) -> float:
            raw = environ.get(name, "").strip()
            try:
                value = float(raw) if raw else default
            except ValueError:
                log.warning("%s=%r is not a number: using %g", name, raw, default)
                return default
            return value if value > 0 else default

        return cls(
            number("OTEL_BSP_SCHEDULE_DELAY", 5000) / 1000,
            int(number("OTEL_BSP_MAX_QUEUE_SIZE", 2048)),
            int(number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)),
            number("OTEL_BSP_EXPORT_TIMEOUT", 30000) / 1000,
        )


class BatchExport:
    """Each finished request encoded by the request path (`add`), queued as bytes, and sent
    in batches by `run` (a background loop) through the exporter in a worker thread.

    Why encode as each request ends: compiled, it costs a few µs and frees the request's
    objects at once, and what waits in the queue is one `bytes` the garbage collector does
    not track (decisions/0015). A thread encoding beside the event loop cost twice its own
    CPU (the GIL changing hands).
    """

    def __init__(
        self, encoder: RequestEncoder, exporter: SpanSender, settings: BatchSettings
    ) -> None:
        self._encoder = encoder
        self._exporter = exporter
        self._settings = settings
        self._queue: collections.deque[tuple[bytes, int]] = collections.deque()
        self._max_queued = max(1, settings.max_queue_spans // SPANS_PER_REQUEST)
        self._batch = max(1, settings.max_batch_spans // SPANS_PER_REQUEST)
        self._wake: asyncio.Event | None = None  # while `run` runs
        self.dropped = 0  # traces dropped on a full queue
        self.exported = 0  # spans the exporter took
        self.failed = 0  # spans of failed exports

    def add(self, trace: RequestTrace, outcome: Outcome) -> None:
        """Encode and queue a finished request's spans (the request path: the encoding, an
        append, sometimes a wake-up)."""
        queue = self._queue
        if len(queue) >= self._max_queued:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                log.warning("trace export queue full: %d traces dropped", self.dropped)
            return
        try:
            queue.append(self._encoder.request(trace, outcome))
        except Exception:  # a trace must never fail its request
            self.failed += SPANS_PER_REQUEST
            log.exception("encoding the spans of %s failed", trace.name)
            return
        if len(queue) >= self._batch and self._wake is not None:
            self._wake.set()

    async def run(self) -> None:
        """Export a batch every `OTEL_BSP_SCHEDULE_DELAY`, or as soon as one is full."""
        wake = self._wake = asyncio.Event()
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), self._settings.schedule_delay_s)
                wake.clear()
                await self._export_batch()  # the delay is up, or a batch is full
                while len(self._queue) >= self._batch:
                    await self._export_batch()
        finally:
            self._wake = None

    async def close(self) -> None:
        """Export what is queued (within `OTEL_BSP_EXPORT_TIMEOUT`), then shut the exporter
        down."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._settings.export_timeout_s):
                await self.flush()
        if self._queue:
            log.warning("shutting down: %d traces not exported", len(self._queue))
        await asyncio.to_thread(self._exporter.shutdown)

    async def flush(self) -> None:
        """Export everything queued now."""
        while self._queue:
            await self._export_batch()

    async def _export_batch(self) -> None:
        queue, chunks, spans = self._queue, list[bytes](), 0
        while queue and len(chunks) < self._batch:
            chunk, n = queue.popleft()
            chunks.append(chunk)
            spans += n
        if not chunks:
            return
        try:
            payload = self._encoder.batch(chunks)
            result = await asyncio.to_thread(self._exporter.export, EncodedSpans(payload, spans))
            ok = result is SpanExportResult.SUCCESS
        except Exception:  # the loop must outlive any one batch
            log.exception("exporting %d traces failed", len(chunks))
            ok = False
        if ok:
            self.exported += spans
        else:
            self.failed += spans


def make_exporter(protocol: str) -> SpanSender:
    """The official exporter for `protocol` (`grpc` or `http/protobuf`), configured by its
    own `OTEL_EXPORTER_OTLP_*` variables."""
    exporters: dict[str, Callable[[], SpanSender]] = {
        "grpc": GrpcExporter,
        "http/protobuf": HttpExporter,
    }
    return exporters[protocol]()


__all__: Sequence[str] = (
    "BatchExport", "BatchSettings", "EncodedSpans", "make_exporter", "span_encoder",
)  # fmt: skip
