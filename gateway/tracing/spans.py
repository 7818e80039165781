"""What the request path records for its spans: ids, times (ns since the epoch) and what
the request did. Nothing is formatted or validated here.

A `RequestTrace` is filled by one request's task; `Tracer.finish` hands it with its
`Outcome` to the export queue, which encodes its spans into OTLP bytes at once
(`otlp_native`, compiled; or its reference `otlp_wire`, which reads the request flattened
by `finished` into a `FinishedTrace` of plain values). The request's objects are freed as
it ends: keeping them queued until the export cost more in garbage collection than the
spans themselves (decisions/0015).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from gateway.tracing.context import RemoteParent, parse_traceparent, traceparent
from gateway.tracing.sampling import LOW_64, Bounds
from gateway.usage import Usage
from routing.types import Decision, ScoreTable

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


def end_span(span: UpstreamSpan, relay_error: str | None) -> None:
    """The attempt is over; `relay_error` (its answer broke midway) is its error if it had
    none before."""
    span.end_ns = _now()
    if span.error is None and span.status and relay_error is not None:
        span.error = relay_error


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


# A finished upstream attempt: (span_id, backend, url, attempt, start_ns, end_ns, status,
# error): a plain tuple, so that the collector can stop tracking it.
Attempt = tuple[int, str, str, int, int, int, int, str | None]
TOP_SCORES = 3  # backends named, with their totals, in the routing span


class FinishedTrace(NamedTuple):
    """A request's spans as plain values, as the encoder reads them."""

    name: str
    method: str
    path: str
    trace_id: int
    server_id: int
    sampled: bool
    parent_id: int  # the caller's span (0: none)
    state: str | None  # the caller's tracestate
    start_ns: int
    end_ns: int
    route_id: int  # 0: not routed
    route_start_ns: int
    route_end_ns: int
    policy: str
    target: str | None
    candidates: int
    filtered_out: int
    top_backends: tuple[str, ...]
    top_scores: tuple[float, ...]
    prefix_blocks: int
    matched_blocks: int | None
    backend: str | None
    attempts: tuple[Attempt, ...]
    status: int
    model: str | None
    stream: bool
    ttft_s: float | None
    input_tokens: int | None
    output_tokens: int | None
    cached_tokens: int | None
    error: str | None
    client: str | None
    request_id: str | None


def top_scores(d: Decision) -> tuple[tuple[str, ...], tuple[float, ...]]:
    """The first `TOP_SCORES` backends of the ranking, and their total scores."""
    s = d.scores
    ranked = d.ranked[:TOP_SCORES]
    if isinstance(s, ScoreTable):
        at = {eid: i for i, eid in enumerate(s.ids)}
        top = tuple(i for i in ranked if i in at)
        totals = s.totals
        return top, tuple(totals[at[i]] for i in top)
    by_id = {e.endpoint_id: e.total for e in s}
    top = tuple(i for i in ranked if i in by_id)
    return top, tuple(by_id[i] for i in top)


def finished(t: RequestTrace, o: Outcome) -> FinishedTrace:
    """`t` with its outcome, flattened (see the module docstring)."""
    parent, d, u = t.parent, t.decision, o.usage
    top, scores = top_scores(d) if d is not None else ((), ())
    attempts = tuple(
        (a.span_id, a.backend, a.url, a.attempt, a.start_ns, a.end_ns, a.status, a.error)
        for a in t.upstreams or ()
    )
    return FinishedTrace(
        t.name, t.method, t.path, t.trace_id, t.server_id, t.sampled,
        parent.span_id if parent is not None else 0, parent.state if parent is not None else None,
        t.start_ns, t.end_ns, t.route_id if d is not None else 0, t.route_start_ns,
        t.route_end_ns, d.profile if d is not None else "", d.target if d is not None else None,
        len(d.scores) if d is not None else 0, len(d.filtered_out) if d is not None else 0,
        top, scores, t.prefix_blocks, t.matched_blocks, t.backend, attempts,
        o.status, o.model, o.stream, o.ttft_s,
        u.prompt_tokens if u is not None else None,
        u.completion_tokens if u is not None else None,
        u.cached_tokens if u is not None else None,
        o.error, o.client, o.request_id,
    )  # fmt: skip


Sample = Callable[[int, RemoteParent | None, str], bool]  # (trace_id, parent, name)


class Tracer:
    """Starts and finishes request traces. `sample` decides: `Bounds` read once from the
    SDK's sampler (`sampling`), or, for a sampler of another kind, a call per request;
    `sink(trace, outcome)` receives each finished sampled trace (the export queue, which
    encodes it at once)."""

    def __init__(
        self,
        sample: Bounds | Sample,
        sink: Callable[[RequestTrace, Outcome], None],
        ids: random.Random | None = None,
    ) -> None:
        self._bounds = sample if isinstance(sample, Bounds) else None
        self._sample = None if isinstance(sample, Bounds) else sample
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
        if (bounds := self._bounds) is None:
            assert self._sample is not None
            sampled = self._sample(trace_id, parent, name)
        elif parent is None:  # the common case, inline
            sampled = trace_id & LOW_64 < bounds.root
        else:
            sampled = bounds.sampled(trace_id, parent)
        return RequestTrace(
            name, method, path, trace_id, ids.getrandbits(64) or 1, sampled, parent, _now(),
            _ids=ids,
        )  # fmt: skip

    def finish(self, trace: RequestTrace, outcome: Outcome) -> None:
        """The server span ends: queued for export when sampled."""
        trace.end_ns = _now()
        trace._ids = None
        if trace.sampled:
            self._sink(trace, outcome)
