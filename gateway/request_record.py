"""What one request did, filled in as it goes: the access-log line, the trace's outcome and
the recorder's line read it when the request finishes."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.inference_request import InferenceRequest
from gateway.tracing.spans import RequestTrace
from gateway.usage import Usage


@dataclass(slots=True)
class RequestRecord:
    """One request, from its arrival to its end (see the module docstring)."""

    request_id: str
    method: str
    path: str
    started: float
    model: str | None = None
    policy: str | None = None
    backend: str | None = None
    status: int = 0
    attempts: int = 0
    ttft_s: float | None = None
    stream: bool = False
    client_gone: bool = False
    error: str | None = None
    output_tokens: int | None = None  # counted only when recording a trace
    client: str | None = None  # the peer's host, for X-Forwarded-For
    key: str | None = None  # the name of the API key it came with (never the key)
    tenant: str | None = None  # the key's name, else the admission tenant header's value
    reason: str | None = None  # why its backend won (`Route.reason`), once routed
    scheme: str = "http"
    usage: Usage | None = None  # what the answer reported (admission corrects rate limits)
    trace: RequestTrace | None = None  # its spans, while tracing is on
    request: InferenceRequest | None = None  # the parsed body, once read
    session: str | None = None  # its session key, once routed (the recorder's)
    last_event: float | None = None  # when its last streamed event came (inter-token latency)
    prefill_backend: str | None = None  # a split P/D request: the prefill leg's backend
    prefill_usage: Usage | None = None  # and what that leg reported (the real cache hit)
