"""A real OTLP trace receiver on 127.0.0.1: gRPC (`opentelemetry.proto.collector.trace.v1.
TraceService/Export`) and HTTP (`POST /v1/traces`, protobuf, gzip or deflate), each on its
own port (0: a free one).

It records the spans it receives (`spans()`, `wait_for`), or with `keep=False` only counts
them: the tracing integration tests read what kvgate exported, and the tracing overhead
bench runs it as a discarding sink in a process of its own (`python -m bench.otlp_receiver`,
which prints its two ports), so the export's cost lands in kvgate's CPU, not the sink's.
"""

from __future__ import annotations

import argparse
import gzip
import signal
import sys
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as service
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as service_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

HOST = "127.0.0.1"


def value_of(v: AnyValue) -> Any:
    """An OTLP attribute value as Python (arrays as lists)."""
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value_of(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


@dataclass(frozen=True, slots=True)
class ReceivedSpan:
    """One span as received: its ids as hex, attributes as a dict, and its resource's."""

    span: Span
    resource: dict[str, Any]
    protocol: str  # "grpc" or "http"

    @property
    def name(self) -> str:
        return self.span.name

    @property
    def trace_id(self) -> str:
        return self.span.trace_id.hex()

    @property
    def span_id(self) -> str:
        return self.span.span_id.hex()

    @property
    def parent_id(self) -> str:
        return self.span.parent_span_id.hex()

    @property
    def attributes(self) -> dict[str, Any]:
        return {kv.key: value_of(kv.value) for kv in self.span.attributes}


class OtlpReceiver:
    """Both OTLP transports; `start()` binds them, `stop()` closes them."""

    def __init__(self, keep: bool = True) -> None:
        self._keep = keep
        self._lock = threading.Lock()
        self._spans: list[ReceivedSpan] = []
        self.requests = {"grpc": 0, "http": 0}
        self.span_count = 0
        self.grpc_port = 0
        self.http_port = 0
        self._grpc: grpc.Server | None = None
        self._http: ThreadingHTTPServer | None = None

    @property
    def grpc_endpoint(self) -> str:
        return f"http://{HOST}:{self.grpc_port}"

    @property
    def http_endpoint(self) -> str:
        return f"http://{HOST}:{self.http_port}"

    def start(self, grpc_port: int = 0, http_port: int = 0) -> OtlpReceiver:
        self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        add = service_grpc.add_TraceServiceServicer_to_server
        add(_TraceService(self), self._grpc)  # type: ignore[no-untyped-call]
        self.grpc_port = self._grpc.add_insecure_port(f"{HOST}:{grpc_port}")
        self._grpc.start()
        self._http = ThreadingHTTPServer((HOST, http_port), _http_handler(self))
        self.http_port = self._http.server_address[1]
        threading.Thread(target=self._http.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._grpc is not None:
            self._grpc.stop(0)
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def receive(self, request: service.ExportTraceServiceRequest, protocol: str) -> None:
        """Record (or count) an export request's spans."""
        got: list[ReceivedSpan] = []
        for rs in request.resource_spans:
            resource = {kv.key: value_of(kv.value) for kv in rs.resource.attributes}
            got.extend(
                ReceivedSpan(span, resource, protocol) for ss in rs.scope_spans for span in ss.spans
            )
        with self._lock:
            self.requests[protocol] += 1
            self.span_count += len(got)
            if self._keep:
                self._spans.extend(got)

    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self._spans)

    def wait_for(
        self, ready: Callable[[Sequence[ReceivedSpan]], bool], timeout_s: float = 15.0
    ) -> list[ReceivedSpan]:
        """The spans once `ready(spans)` holds; AssertionError (listing them) after the
        timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            spans = self.spans()
            if ready(spans):
                return spans
            if time.monotonic() > deadline:
                names = [(s.name, s.span.kind) for s in spans]
                raise AssertionError(f"spans not received in {timeout_s} s; got {names}")
            time.sleep(0.05)


class _TraceService(service_grpc.TraceServiceServicer):
    def __init__(self, receiver: OtlpReceiver) -> None:
        self._receiver = receiver

    def Export(
        self, request: service.ExportTraceServiceRequest, context: object
    ) -> service.ExportTraceServiceResponse:
        self._receiver.receive(request, "grpc")
        return service.ExportTraceServiceResponse()


def _http_handler(receiver: OtlpReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            if self.path != "/v1/traces":
                self._answer(404, b"")
                return
            encoding = self.headers.get("content-encoding", "")
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            try:
                request = service.ExportTraceServiceRequest.FromString(body)
            except Exception:  # a body that is not the message: the client's error
                self._answer(400, b"")
                return
            receiver.receive(request, "http")
            self._answer(200, service.ExportTraceServiceResponse().SerializeToString())

        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet: thousands of exports

    return Handler


def main(argv: Sequence[str] | None = None) -> int:
    """A discarding sink until SIGTERM/SIGINT; prints `grpc PORT` and `http PORT`, and at
    the end how many spans it received."""
    p = argparse.ArgumentParser(prog="python -m bench.otlp_receiver", description=__doc__)
    p.add_argument("--grpc-port", type=int, default=0)
    p.add_argument("--http-port", type=int, default=0)
    a = p.parse_args(argv)
    receiver = OtlpReceiver(keep=False).start(a.grpc_port, a.http_port)
    print(f"grpc {receiver.grpc_port}\nhttp {receiver.http_port}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    receiver.stop()
    print(f"received {receiver.span_count} spans in {receiver.requests}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
