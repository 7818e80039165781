from __future__ import annotations

import asyncio
import random

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export import SpanExportResult

from gateway.tracing.export import BatchExport, BatchSettings, EncodedSpans, GrpcExporter
from gateway.tracing.otlp_wire import SpanEncoder
from gateway.tracing.spans import Outcome, RequestTrace, Tracer


class Recorder:
    def __init__(self) -> None:
        self.batches: list[EncodedSpans] = []
        self.shut = False

    def export(self, batch: EncodedSpans) -> SpanExportResult:
        self.batches.append(batch)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.shut = True


def _traces(n: int) -> list[tuple[RequestTrace, Outcome]]:
    out: list[tuple[RequestTrace, Outcome]] = []
    tracer = Tracer(lambda *_: True, lambda t, o: out.append((t, o)), random.Random(7))
    for _ in range(n):
        t = tracer.start("POST", "/v1/completions", None, None)
        tracer.finish(t, Outcome(400, None, False, None, None, "bad body"))  # server span only
    return out


def _export(settings: BatchSettings) -> tuple[BatchExport, Recorder]:
    rec = Recorder()
    return BatchExport(SpanEncoder({}, "kvgate", "0"), rec, settings), rec


async def test_a_full_batch_is_sent_at_once_and_close_sends_the_rest() -> None:
    export, rec = _export(BatchSettings(schedule_delay_s=60, max_batch_spans=30))
    loop = asyncio.create_task(export.run())
    await asyncio.sleep(0)
    for t in _traces(25):  # 30 spans a batch: 10 requests counted at 3 spans each
        export.add(*t)
    for _ in range(50):
        if len(rec.batches) == 2:
            break
        await asyncio.sleep(0.01)
    assert [b.spans for b in rec.batches] == [10, 10]
    loop.cancel()
    await export.close()
    assert [b.spans for b in rec.batches] == [10, 10, 5] and rec.shut
    assert export.exported == 25
    request = ExportTraceServiceRequest.FromString(rec.batches[0].payload)
    assert len(request.resource_spans[0].scope_spans[0].spans) == 10


async def test_the_delay_sends_what_waits_and_a_full_queue_drops() -> None:
    export, rec = _export(BatchSettings(schedule_delay_s=0.05, max_queue_spans=12))
    loop = asyncio.create_task(export.run())
    for t in _traces(6):
        export.add(*t)
    assert export.dropped == 2  # room for 12 // 3 requests
    await asyncio.sleep(0.2)
    assert [b.spans for b in rec.batches] == [4]
    loop.cancel()


def test_the_settings_from_the_environment() -> None:
    s = BatchSettings.from_env(
        {"OTEL_BSP_SCHEDULE_DELAY": "250", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "64",
         "OTEL_BSP_MAX_QUEUE_SIZE": "x"}
    )  # fmt: skip
    assert (s.schedule_delay_s, s.max_batch_spans, s.max_queue_spans) == (0.25, 64, 2048)


def test_the_grpc_exporter_sends_bytes_through_the_sdks_channel() -> None:
    # The SDK internals the exporter relies on (pinned minor series): if they move, this fails.
    exporter = GrpcExporter()
    try:
        assert exporter._translate_data(EncodedSpans(b"xyz", 1)) == b"xyz"
        assert type(exporter._client).__name__ == "_BytesTraceStub"
        assert exporter._stub.__name__ == "_BytesTraceStub"  # what a reconnection builds
    finally:
        exporter.shutdown()
