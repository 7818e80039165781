"""The export side: a queue the request path appends finished traces to, and a worker
thread that encodes them in batches (`otlp_wire`) and sends them with the SDK's official
OTLP exporters, gRPC or HTTP/protobuf.

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

import collections
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpSpanExporter,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export import SpanExportResult

from gateway.tracing.otlp_wire import SpanEncoder
from gateway.tracing.spans import RequestTrace

log = logging.getLogger(__name__)
SPANS_PER_REQUEST = 3


@dataclass(frozen=True, slots=True)
class EncodedSpans:
    """One batch, encoded: an `ExportTraceServiceRequest`'s bytes."""

    payload: bytes
    spans: int

    def __len__(self) -> int:  # what the exporters' own metrics count
        return self.spans


class SpanSender(Protocol):
    def export(self, batch: Any) -> SpanExportResult: ...

    def shutdown(self) -> None: ...


class GrpcExporter(GrpcSpanExporter):
    """The SDK's OTLP/gRPC exporter, sending batches encoded by kvgate."""

    def _translate_data(self, data: Any) -> ExportTraceServiceRequest:
        request: ExportTraceServiceRequest = ExportTraceServiceRequest.FromString(data.payload)
        return request

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
    """Finished traces queued by the event loop (`add`, thread-safe: a deque), encoded and
    exported by one worker thread, started by `start` and flushed and joined by `close`."""

    def __init__(self, encoder: SpanEncoder, exporter: SpanSender, settings: BatchSettings) -> None:
        self._encoder = encoder
        self._exporter = exporter
        self._settings = settings
        self._queue: collections.deque[RequestTrace] = collections.deque()
        self._max_queued = max(1, settings.max_queue_spans // SPANS_PER_REQUEST)
        self._batch = max(1, settings.max_batch_spans // SPANS_PER_REQUEST)
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        self.dropped = 0  # traces dropped on a full queue
        self.exported = 0  # spans the exporter took
        self.failed = 0  # spans of failed exports

    def add(self, trace: RequestTrace) -> None:
        """Queue a finished trace (the request path: an append, sometimes a wake-up)."""
        queue = self._queue
        if len(queue) >= self._max_queued:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                log.warning("trace export queue full: %d traces dropped", self.dropped)
            return
        queue.append(trace)
        if len(queue) >= self._batch and not self._wake.is_set():
            self._wake.set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="kvgate-otlp-export", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Export what is queued (within `OTEL_BSP_EXPORT_TIMEOUT`), then shut the exporter
        down. Blocking: call it off the event loop."""
        if self._thread is not None:
            self._stop = True
            self._wake.set()
            self._thread.join(self._settings.export_timeout_s)
            self._thread = None
        self._exporter.shutdown()

    def flush(self) -> None:
        """Export everything queued now (blocking; tests and shutdown)."""
        while self._queue:
            self._export_batch()

    def _run(self) -> None:
        while not self._stop:
            woken = self._wake.wait(self._settings.schedule_delay_s)
            self._wake.clear()
            if not woken:  # the delay is up: what waits, full or not
                self._export_batch()
            while len(self._queue) >= self._batch and not self._stop:
                self._export_batch()
        self.flush()

    def _export_batch(self) -> None:
        queue, batch = self._queue, list[RequestTrace]()
        while queue and len(batch) < self._batch:
            batch.append(queue.popleft())
        if not batch:
            return
        try:
            payload, spans = self._encoder.encode(batch)
            ok = self._exporter.export(EncodedSpans(payload, spans)) is SpanExportResult.SUCCESS
        except Exception:  # the worker must outlive any one batch
            log.exception("exporting %d traces failed", len(batch))
            ok, spans = False, len(batch) * SPANS_PER_REQUEST
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


__all__: Sequence[str] = ("BatchExport", "BatchSettings", "EncodedSpans", "make_exporter")
