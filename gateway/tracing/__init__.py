"""OpenTelemetry tracing of inference requests (issue 18), off unless
`OTEL_TRACES_EXPORTER=otlp`.

Per request, three spans: the server span (`POST /v1/...`, kind SERVER; a W3C `traceparent`
from the client makes it that span's child), the routing span (`kvgate.route`: policy,
chosen backend, matched prefix blocks, the top scores) and one upstream span per attempt
(kind CLIENT), whose id the engine receives as the parent in its own `traceparent`. TTFT
and the answer's token counts are attributes of the server span. `kvgate epp` records the
server and routing spans; the engine gets the routing span as parent there.

Why not the SDK's span objects: at 500 requests/s kvgate spends ~0.35 ms of CPU on a
request, and the stock span path (three SDK spans, their attribute checks, the batch
processor and the OTLP encoder) measured ~200 µs a request. So the request path records
plain values (`spans.RequestTrace`, compiled as `otlp_native.NativeTrace`; ~1.5 µs), each
request's spans are encoded as it ends straight into OTLP protobuf bytes (`otlp_native`,
compiled; `otlp_wire` is its reference), a background loop (`export.BatchExport`) batches
them, and the SDK's official OTLP exporters (gRPC or HTTP/protobuf) send those from a worker
thread with their own retries, headers, TLS and compression. The SDK also supplies the
sampler (`OTEL_TRACES_SAMPLER`; its standard samplers are read once as bounds on the trace
id, `sampling`, not asked per request), the resource (`OTEL_SERVICE_NAME`,
`OTEL_RESOURCE_ATTRIBUTES`) and the exporters' `OTEL_EXPORTER_OTLP_*` settings. See
docs/decisions/0015-tracing.md and 0020-tracing-request-path.md.

`setup.build_tracer(environ)` is the entry point: None when tracing is off, so a request
pays one `is None` test. Only `setup` and `export` import opentelemetry (the `otel` extra).
"""
