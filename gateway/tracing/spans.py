"""What the request path records for its spans: ids, times (ns since the epoch) and
references to what the request did. Nothing is formatted or validated here; the export
thread turns a finished `RequestTrace` into OTLP spans (`otlp_wire`).

A `RequestTrace` is filled by one request's task only, then handed to the export queue
and never touched again by the request path (so the worker thread reads it unlocked).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from gateway.tracing.context import RemoteParent, parse_traceparent, traceparent
from gateway.usage import Usage
from routing.types import Decision

Headers = list[tuple[bytes, bytes]]
_now = time.time_ns


@dataclass(slots=True)
class UpstreamSpan:
    """One attempt to send the request to a backend (kind CLIENT)."""

    span_id: int
    backend: str
    url: str
    attempt: int
    start_ns: int
    end_ns: int = 0
    status: int = 0  # the backend's answer; 0: none (an error instead)
    error: str | None = None


@dataclass(slots=True)
class Outcome:
    """How the request ended, for the server span's attributes."""

    status: int
    model: str | None
    stream: bool
    ttft_s: float | None
    usage: Usage | None
    error: str | None
    client: str | None = None
    request_id: str | None = None


@dataclass(slots=True)
class RequestTrace:
    """One request's spans: server, routing and upstream attempts (see the package doc)."""

    name: str  # the server span's: METHOD PATH
    method: str
    path: str
    trace_id: int
    server_id: int
    sampled: bool
    parent: RemoteParent | None
    start_ns: int
    end_ns: int = 0
    route_id: int = 0
    route_start_ns: int = 0
    route_end_ns: int = 0
    decision: Decision | None = None
    prefix_blocks: int = 0
    matched_blocks: int | None = None  # in the chosen backend, as the dispatch found
    backend: str | None = None  # the backend that served (the EPP: the one picked)
    upstreams: list[UpstreamSpan] | None = None
    outcome: Outcome | None = None
    _ids: random.Random | None = None

    def route_started(self) -> None:
        self.route_start_ns = _now()

    def routed(self, decision: Decision, prefix_blocks: int) -> None:
        """The routing span ends with this decision."""
        self.route_end_ns = _now()
        self.route_id = self._new_id()
        self.decision, self.prefix_blocks = decision, prefix_blocks

    def upstream(self, backend: str, url: str, attempt: int) -> UpstreamSpan:
        span = UpstreamSpan(self._new_id(), backend, url, attempt, _now())
        if self.upstreams is None:
            self.upstreams = [span]
        else:
            self.upstreams.append(span)
        return span

    def propagation(self, parent_id: int) -> Headers:
        """`traceparent` (and the caller's `tracestate`) naming span `parent_id` as the
        parent, for the engine."""
        out = [(b"traceparent", traceparent(self.trace_id, parent_id, self.sampled))]
        if self.parent is not None and self.parent.state:
            out.append((b"tracestate", self.parent.state.encode("latin-1")))
        return out

    def _new_id(self) -> int:
        assert self._ids is not None
        return self._ids.getrandbits(64) or 1


class Tracer:
    """Starts and finishes request traces: `sample(trace_id, parent, name)` decides (the
    SDK's sampler), `sink` receives each finished sampled trace (the export queue)."""

    def __init__(
        self,
        sample: Callable[[int, RemoteParent | None, str], bool],
        sink: Callable[[RequestTrace], None],
        ids: random.Random | None = None,
    ) -> None:
        self._sample = sample
        self._sink = sink
        self._ids = ids or random.Random()

    def start(
        self, method: str, path: str, parent_header: str | None, state_header: str | None
    ) -> RequestTrace:
        """The server span of a request whose headers carry `traceparent`/`tracestate`."""
        parent = parse_traceparent(parent_header, state_header) if parent_header else None
        ids = self._ids
        trace_id = parent.trace_id if parent is not None else ids.getrandbits(128) or 1
        name = f"{method} {path}"
        sampled = self._sample(trace_id, parent, name)
        return RequestTrace(
            name, method, path, trace_id, ids.getrandbits(64) or 1, sampled, parent, _now(),
            _ids=ids,
        )  # fmt: skip

    def finish(self, trace: RequestTrace, outcome: Outcome) -> None:
        """The server span ends: queued for export when sampled."""
        trace.end_ns = _now()
        trace.outcome = outcome
        trace._ids = None
        if trace.sampled:
            self._sink(trace)
