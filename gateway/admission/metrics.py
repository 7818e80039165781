"""Admission control's Prometheus metrics, in the gateway's registry (no tenant labels: a
tenant can be a client-chosen header value, and labels must stay bounded)."""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gateway.metrics import Children

_WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
SHED_REASONS = (
    "queue_full",  # no place in the queue, the arrival was the one to go
    "evicted",  # displaced from the queue by a higher band or a lighter tenant
    "wait_too_long",  # the expected wait was beyond the request's deadline
    "timeout",  # waited past its deadline (503)
    "sheddable_timeout",  # a sheddable request waited to its deadline (429)
    "rate_limit_requests",
    "rate_limit_tokens",
)


class AdmissionMetrics:
    """Queue length per band, admitted requests, shed requests by reason, queue wait."""

    def __init__(self, registry: CollectorRegistry, bands: Sequence[str]) -> None:
        self.queue_length = Gauge(
            "kvgate_admission_queue_length",
            "Requests waiting for capacity, by priority band",
            ["band"],
            registry=registry,
        )
        self.admitted = Gauge(
            "kvgate_admission_admitted_requests",
            "Requests admitted and not yet finished",
            registry=registry,
        )
        self.shed = Counter(
            "kvgate_admission_shed_total",
            "Requests turned away by admission control, by reason",
            ["reason"],
            registry=registry,
        )
        self.queue_wait = Histogram(
            "kvgate_admission_queue_wait_seconds",
            "Time admitted requests waited in the queue, by priority band",
            ["band"],
            buckets=_WAIT_BUCKETS,
            registry=registry,
        )
        self.cancelled = Counter(
            "kvgate_admission_cancelled_total",
            "Requests whose client left while they waited in the queue",
            registry=registry,
        )
        self.bands = tuple(bands)
        self._lengths: tuple[int, ...] = ()
        self.shed_by = Children(self.shed)
        self.wait_by = Children(self.queue_wait)
        self._length_by = Children(self.queue_length)
        for reason in SHED_REASONS:  # present from the start, so rates work from zero
            self.shed_by(reason)

    def set_lengths(self, sizes: Sequence[int]) -> None:
        sizes = tuple(sizes)
        if sizes == self._lengths:
            return  # every pump calls this; the gauges move only when the queue does
        self._lengths = sizes
        for band, size in zip(self.bands, sizes, strict=True):
            self._length_by(band).set(size)
