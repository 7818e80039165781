"""The gateway's own Prometheus metrics, in a registry per app (so tests can run several),
with the process's (`process_*`, `python_info`) and `kvgate_build_info`; no `_created` series.

Every label value stays from a bounded set: a series lives as long as the process, so a label
a client chooses would let it grow `/metrics` (and the memory behind it) without end. The
`model` label takes only the models the pool serves (`models`); any other name a client
sends counts as `"other"` (an empty name, when the body had none, stays empty). The `tenant`
label is an API key's name (the operator's list), else the first `MAX_TENANT_SERIES` tenants
the admission header named, then `"other"`; `"anonymous"` without either.
"""

from __future__ import annotations

import contextlib
import platform
from bisect import bisect_left
from collections.abc import Callable, Collection, Iterable
from typing import Any, Generic, TypeVar, cast

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client import values as prometheus_values

from gateway.request_record import RequestRecord
from gateway.version import installed_version
from health.pool import Backend
from routing.types import Decision
from scoring.state.cache_check import CacheCheck

M = TypeVar("M", Counter, Gauge, Histogram)
OTHER_MODEL = "other"
OTHER_TENANT = "other"
ANONYMOUS_TENANT = "anonymous"
MAX_TENANT_SERIES = 100  # tenants named by a header (not a key) with series of their own

_LATENCY_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.25,
    0.5,
    0.75,
    1.0,
    1.5,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    320.0,
)
# The Inference Extension's scheduler buckets (0.1 ms to 100 ms), with two below them: a
# Python decision over a few backends takes tens of microseconds.
DECISION_BUCKETS = (
    0.000025,
    0.00005,
    0.0001,
    0.0002,
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
)
_ITL_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.015,
    0.02,
    0.03,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.5,
    1.0,
    2.5,
)


class Children(Generic[M]):
    """`metric.labels(...)`, memoised: prometheus_client validates label values and takes a
    lock on every `labels()` call, several times per request on the hot path. The label
    sets are the ones the registry already keeps, so the cache grows no faster than it."""

    __slots__ = ("_cache", "_metric", "_model")

    def __init__(self, metric: M, model: Callable[[str], str] | None = None) -> None:
        self._metric: M = metric
        self._model = model  # bounds the first label, a model name, when given
        self._cache: dict[tuple[str | None, ...], M] = {}

    def __call__(self, *labels: str | None) -> M:
        if self._model is not None:
            labels = (self._model(labels[0] or ""), *labels[1:])
        child = self._cache.get(labels)
        if child is None:
            child = self._cache[labels] = cast(M, _fast(self._metric.labels(*labels)))
        return child


# The value class of a single-process prometheus_client, whose lock and number the fast
# children below update in place (any other value class: no fast children).
_MUTEX: Any = getattr(prometheus_values, "MutexValue", None)


class _CounterChild:
    """A counter child's `inc` in one call: prometheus_client's checks an observation
    (the child is observable, no exemplar) and its value's `inc` take four. It adds to the
    child's own value under that value's lock, so `/metrics` reads what it always did."""

    __slots__ = ("_value",)

    def __init__(self, value: Any) -> None:
        self._value = value

    def inc(self, amount: float = 1) -> None:
        if amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        value = self._value
        with value._lock:  # MutexValue.inc, written out
            value._value += amount


class _HistogramChild:
    """A histogram child's `observe` with its bucket found by bisection (prometheus_client
    walks the bounds in Python), adding to the child's own sum and buckets."""

    __slots__ = ("_bounds", "_buckets", "_sum")

    def __init__(self, total: Any, buckets: list[Any], bounds: list[float]) -> None:
        self._sum = total
        self._buckets = buckets
        self._bounds = bounds

    def observe(self, amount: float) -> None:
        total = self._sum
        with total._lock:  # MutexValue.inc, written out, as below
            total._value += amount
        bounds = self._bounds
        i = bisect_left(bounds, amount)  # the first bound >= amount: its bucket
        if amount <= bounds[i]:  # False only for NaN, which falls in no bucket there either
            bucket = self._buckets[i]
            with bucket._lock:
                bucket._value += 1


def _fast(child: Any) -> Any:
    """`child` with a faster `inc` or `observe`, where the installed prometheus_client keeps
    its values as this module expects (else `child` itself)."""
    if isinstance(child, Counter) and type(getattr(child, "_value", None)) is _MUTEX:
        return _CounterChild(child._value)
    if isinstance(child, Histogram):
        total = getattr(child, "_sum", None)
        buckets = getattr(child, "_buckets", None)
        bounds = getattr(child, "_upper_bounds", None)
        if (
            type(total) is _MUTEX
            and isinstance(buckets, list)
            and all(type(b) is _MUTEX for b in buckets)
            and isinstance(bounds, list)
            and len(buckets) == len(bounds)
            and bounds
            and bounds[-1] == float("inf")
        ):
            return _HistogramChild(total, buckets, bounds)
    return child


class GatewayMetrics:
    """Counters, gauges and histograms the proxy updates; rendered at `/metrics`.

    `models` gives the model names the `model` label may take (None: any, for tests)."""

    def __init__(self, models: Callable[[], Collection[str]] | None = None) -> None:
        self._models = models
        self._tenants: set[str] = set()  # header-named tenants with series of their own
        # `_created` doubles every counter and histogram with a timestamp nobody graphs
        # (prometheus_client's switch is process-wide; kvgate has no other registry).
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry()
        r = self.registry
        ProcessCollector(registry=r)  # process_cpu_seconds_total, _resident_memory_bytes, ...
        PlatformCollector(registry=r)  # python_info
        Gauge(
            "kvgate_build_info",
            "Always 1: the kvgate version and the Python running it",
            ["version", "python"],
            registry=r,
        ).labels(installed_version() or "unknown", platform.python_version()).set(1)
        self.requests = Counter(
            "kvgate_requests_total",
            "Requests finished, by model, backend and HTTP status",
            ["model", "backend", "status"],
            registry=r,
        )
        self.duration = Histogram(
            "kvgate_request_duration_seconds",
            "Time from request arrival to the last byte relayed",
            ["model", "backend"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.ttft = Histogram(
            "kvgate_time_to_first_token_seconds",
            "Streaming requests: arrival to the first data event relayed",
            ["model", "backend"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            "kvgate_inter_token_latency_seconds",
            "Streaming requests: gap between successive data events relayed",
            ["model", "backend"],
            buckets=_ITL_BUCKETS,
            registry=r,
        )
        self.upstream_errors = Counter(
            "kvgate_upstream_errors_total",
            "Upstream failures by backend and kind (connect, timeout, protocol, status_5xx)",
            ["backend", "kind"],
            registry=r,
        )
        self.prompt_tokens = Counter(
            "kvgate_prompt_tokens_total",
            "Prompt tokens the answers reported (usage), by model and tenant",
            ["model", "tenant"],
            registry=r,
        )
        self.cached_prompt_tokens = Counter(
            "kvgate_cached_prompt_tokens_total",
            "Of those, the tokens the engine reported cached, by model and tenant",
            ["model", "tenant"],
            registry=r,
        )
        self.completion_tokens = Counter(
            "kvgate_completion_tokens_total",
            "Completion tokens the answers reported (usage), by model and tenant",
            ["model", "tenant"],
            registry=r,
        )
        self.retries = Counter(
            "kvgate_retries_total", "Requests retried on another backend", ["model"], registry=r
        )
        self.retries_denied = Counter(
            "kvgate_retries_denied_total",
            "Failover retries not made because the retry budget was spent",
            registry=r,
        )
        # Set from the pool when /metrics is rendered, not on every request.
        self.in_flight = Gauge(
            "kvgate_in_flight_requests", "Requests in flight per backend", ["backend"], registry=r
        )
        self.decisions = Counter(
            "kvgate_routing_decisions_total",
            "Routing decisions by policy (profile), chosen backend and why it won "
            "(scoring.decision_reason)",
            ["policy", "backend", "reason"],
            registry=r,
        )
        self.decision_duration = Histogram(
            "kvgate_routing_decision_duration_seconds",
            "Time to decide a request's backend (prompt hashing and the scheduling cycle)",
            ["policy"],
            buckets=DECISION_BUCKETS,
            registry=r,
        )
        self.ejections = Counter(
            "kvgate_backend_ejections_total",
            "Backends taken out of rotation after consecutive upstream failures (passive health)",
            ["backend"],
            registry=r,
        )
        self.backend_up = Gauge(
            "kvgate_backend_healthy", "1 if the backend is routable", ["backend"], registry=r
        )
        # Cache feedback, over the answers that reported their cached prompt tokens.
        self.observed_prompt_tokens = Counter(
            "kvgate_observed_prompt_tokens_total",
            "Prompt tokens of the answers that reported their cached tokens, by backend",
            ["backend"],
            registry=r,
        )
        self.predicted_hits = Counter(
            "kvgate_predicted_cache_hit_tokens_total",
            "Prompt tokens the prefix index predicted cached at dispatch (in engine tokens)",
            ["backend"],
            registry=r,
        )
        self.observed_hits = Counter(
            "kvgate_observed_cache_hit_tokens_total",
            "Prompt tokens the engine reported cached (usage.prompt_tokens_details, SGLang's "
            "meta_info)",
            ["backend"],
            registry=r,
        )
        self.index_corrections = Counter(
            "kvgate_prefix_index_corrections_total",
            "Answers showing the engine had evicted blocks the prefix index counted as held",
            ["backend"],
            registry=r,
        )
        # Access control (gateway/access_control.py); its refusals count in kvgate_requests_total
        # too (backend "none").
        self.auth_refused = Counter(
            "kvgate_auth_refused_total",
            "Requests refused with 401 (missing_key, invalid_key, admin_key) or 403 "
            "(admin_not_local), by reason",
            ["reason"],
            registry=r,
        )

        # Prefill/decode pools: how each request was placed, and the prefill legs that failed.
        self.pd_decisions = Counter(
            "kvgate_pd_decisions_total",
            "P/D placements: split (through a prefill backend) or local (D alone), and why "
            "(scoring.pd.planner WHYS)",
            ["path", "why"],
            registry=r,
        )
        self.pd_fallbacks = Counter(
            "kvgate_pd_prefill_fallbacks_total",
            "Split requests whose prefill leg failed, so the decode backend prefilled alone",
            ["backend"],
            registry=r,
        )
        self.pd_transfer_seconds = Histogram(
            "kvgate_pd_decode_first_token_seconds",
            "Split requests: from sending the decode leg to its first token (handoff, KV "
            "transfer and D's first step)",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )

        self.response_affinity = Counter(
            "kvgate_response_affinity_total",
            "Stored responses (Responses API): learned from answers, looked up (found local or "
            "shared, unknown), and pinned requests refused (backend gone or unavailable)",
            ["event"],
            registry=r,
        )

        bound = self.model_label if models is not None else None
        self.requests_by = Children(self.requests, bound)
        self.duration_by = Children(self.duration, bound)
        self.ttft_by = Children(self.ttft, bound)
        self.itl_by = Children(self.itl, bound)
        self._prompt_tokens_by = Children(self.prompt_tokens, bound)
        self._cached_tokens_by = Children(self.cached_prompt_tokens, bound)
        self._completion_tokens_by = Children(self.completion_tokens, bound)
        self.decisions_by = Children(self.decisions)
        self.decision_duration_by = Children(self.decision_duration)
        self._prompt_by = Children(self.observed_prompt_tokens)
        self._predicted_by = Children(self.predicted_hits)
        self._observed_by = Children(self.observed_hits)
        self._corrections_by = Children(self.index_corrections)
        self._refused_by = Children(self.auth_refused)
        self.ejections_by = Children(self.ejections)
        self._affinity_by = Children(self.response_affinity)

    def model_label(self, model: str) -> str:
        """`model` if the pool serves it (or is empty), else "other"."""
        if not model or self._models is None or model in self._models():
            return model
        return OTHER_MODEL

    def tenant_label(self, rec: RequestRecord) -> str:
        """`rec`'s tenant as the `tenant` label (see the module docstring)."""
        tenant = rec.tenant
        if tenant is None:
            return ANONYMOUS_TENANT
        if rec.key is not None or tenant in self._tenants:
            return tenant
        if len(self._tenants) < MAX_TENANT_SERIES:
            self._tenants.add(tenant)
            return tenant
        return OTHER_TENANT

    def count_tokens(self, rec: RequestRecord) -> None:
        """The token counts `rec`'s answer reported, by model and tenant."""
        usage = rec.usage
        if usage is None:
            return
        labels = (rec.model or "", self.tenant_label(rec))
        if usage.prompt_tokens:
            self._prompt_tokens_by(*labels).inc(usage.prompt_tokens)
        if usage.cached_tokens:
            self._cached_tokens_by(*labels).inc(usage.cached_tokens)
        if usage.completion_tokens:
            self._completion_tokens_by(*labels).inc(usage.completion_tokens)

    def count_decision(self, decision: Decision, reason: str, seconds: float) -> None:
        """One routed request: its policy, backend and reason, and how long deciding took."""
        policy = decision.profile
        self.decisions_by(policy, decision.target, reason).inc()
        self.decision_duration_by(policy).observe(seconds)

    def count_cache_check(self, backend: str, prompt_tokens: int, check: CacheCheck) -> None:
        """One answer's predicted and observed cache hit, and whether it corrected the index."""
        self._prompt_by(backend).inc(prompt_tokens)
        self._predicted_by(backend).inc(check.predicted_tokens)
        self._observed_by(backend).inc(check.observed_tokens)
        if check.evicted_weight:
            self._corrections_by(backend).inc()

    def count_auth_refused(self, reason: str) -> None:
        self._refused_by(reason).inc()

    def count_response_affinity(self, event: str) -> None:
        """One of `gateway.responses.affinity.EVENTS`."""
        self._affinity_by(event).inc()

    def forget_backend(self, backend: str) -> None:
        """A backend left the pool: drop its gauges (its counters keep their totals)."""
        for gauge in (self.in_flight, self.backend_up):
            with contextlib.suppress(KeyError):  # never rendered
                gauge.remove(backend)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def page(self, backends: Iterable[Backend], now: float) -> bytes:
        """The exposition, with each backend's up and in-flight gauges as of `now`."""
        for b in backends:
            self.backend_up.labels(b.id).set(1 if b.snapshot(now).healthy else 0)
            self.in_flight.labels(b.id).set(b.in_flight)
            self.ejections_by(b.id)  # from 0, so that increase() sees the first ejection
        return self.render()
