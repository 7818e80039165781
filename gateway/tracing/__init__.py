"""OpenTelemetry tracing of inference requests, off unless `OTEL_TRACES_EXPORTER=otlp`.

Three spans a request: server (`POST /v1/...`, kind SERVER, a child of the client's W3C
`traceparent`; TTFT and token counts as attributes), routing (`kvgate.route`: policy, chosen
backend, matched prefix blocks, top scores) and one upstream span per attempt (kind CLIENT), the
engine's parent; `kvgate epp` records the first two, the routing span the engine's parent.

The request path records plain values (`spans.RequestTrace`, compiled: `otlp_native.NativeTrace`),
encoded into OTLP protobuf bytes as each request ends (`otlp_native`; `otlp_wire` the reference),
batched by `export.BatchExport` and sent by the SDK's OTLP exporters (gRPC or HTTP/protobuf) from
a worker thread. The SDK supplies the sampler (`OTEL_TRACES_SAMPLER`, read once as trace-id
bounds: `sampling`), the resource (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`) and the
`OTEL_EXPORTER_OTLP_*` settings. `setup.build_tracer(environ)` is the entry point, None when off;
only `setup` and `export` import opentelemetry (the `otel` extra). Why:
docs/decisions/0015-tracing.md, 0020-tracing-request-path.md.
"""
