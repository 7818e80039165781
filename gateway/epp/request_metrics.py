"""The reference endpoint picker's per-request metrics, as `kvgate epp` records them.

Current names `llm_d_epp_request_{total, error_total, running, size_bytes, duration_seconds,
input_tokens, output_tokens}` with labels `{model_name, target_model_name, fairness_id,
priority}` (`error_total` adds `error_code`), beside the GIE-era twins llm-d still emits:
`inference_objective_{request_error_total, running_requests, request_sizes,
request_duration_seconds, input_tokens, output_tokens}` with `{model_name,
target_model_name}` (`running_requests`: `{model_name}`). `inference_objective_request_total`
comes from `gateway.gie_metrics`. Counted when picked; error codes are the reference's words:
the picker's refusals by status (`BadRequest`, `NotFound`, `ResourceExhausted`,
`ServiceUnavailable`, ...), an engine's status ≥ 400 `ModelServerError`. Bounded labels: the
model is the pool's (`GatewayMetrics.model_label`, else "other"), `fairness_id` (header
`x-llm-d-inference-fairness-id`, default `default-flow`) takes 1000 values, then "other".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gateway.usage import Usage

FAIRNESS_HEADERS = ("x-llm-d-inference-fairness-id", "x-gateway-inference-fairness-id")
DEFAULT_FAIRNESS_ID = "default-flow"
MAX_FAIRNESS_IDS = 1000
OTHER = "other"
MODEL_SERVER_ERROR = "ModelServerError"
ERROR_CODES = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    412: "PreconditionFailed",
    429: "ResourceExhausted",
    500: "Internal",
    503: "ServiceUnavailable",
}
LABELS = ("model_name", "target_model_name", "fairness_id", "priority")
_MODELS = LABELS[:2]
# The reference's buckets (pkg/epp/metrics; 32778 is as it writes it).
SIZE_BUCKETS = tuple(2.0**i for i in range(6, 31))  # 64 B to 1 GiB
DURATION_BUCKETS = (
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3, 4, 5, 6,
    8, 10, 15, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200,
    1800, 2700, 3600,
)  # fmt: skip
INPUT_BUCKETS = (
    1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32778, 65536, 131072,
    262144, 524288, 1048576,
)  # fmt: skip
OUTPUT_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)


@dataclass(frozen=True, slots=True)
class RequestLabels:
    """One request's label values, bounded (kept from its pick to its end)."""

    model: str
    target: str
    fairness_id: str
    priority: str

    @property
    def values(self) -> tuple[str, str, str, str]:
        return (self.model, self.target, self.fairness_id, self.priority)


def error_code(status: int) -> str:
    """The reference's word for a refusal the picker answered with `status`."""
    return ERROR_CODES.get(status, "Unknown")


class EppRequestMetrics:
    """The series of the module docstring, in `registry`; `model_label` bounds model names."""

    def __init__(self, registry: CollectorRegistry, model_label: Callable[[str], str]) -> None:
        self._model_label = model_label
        self._fairness_ids: set[str] = set()
        self._children: dict[RequestLabels, _Series] = {}
        r = registry
        self.requests = Counter("llm_d_epp_request_total", "Requests picked", LABELS, registry=r)
        self.running = Gauge(
            "llm_d_epp_request_running", "Requests picked and not yet over", LABELS, registry=r
        )
        self.old_running = Gauge(
            "inference_objective_running_requests",
            "Requests picked and not yet over, by model",
            ["model_name"],
            registry=r,
        )
        self.errors = _Twins(
            Counter(
                "llm_d_epp_request_error_total",
                "Requests that ended in an error, by the reference's error code",
                [*LABELS, "error_code"],
                registry=r,
            ),
            Counter(
                "inference_objective_request_error_total",
                "Requests that ended in an error, by the reference's error code",
                [*_MODELS, "error_code"],
                registry=r,
            ),
        )
        self.sizes = _histograms(
            r, "request_size_bytes", "request_sizes", SIZE_BUCKETS, "Request body sizes in bytes"
        )
        self.durations = _histograms(
            r, "request_duration_seconds", "request_duration_seconds", DURATION_BUCKETS,
            "Arrival to the end of the answer",
        )  # fmt: skip
        self.input_tokens = _histograms(
            r, "request_input_tokens", "input_tokens", INPUT_BUCKETS,
            "Prompt tokens the engine reported",
        )  # fmt: skip
        self.output_tokens = _histograms(
            r, "request_output_tokens", "output_tokens", OUTPUT_BUCKETS,
            "Output tokens the engine reported",
        )  # fmt: skip

    def labels(
        self, model: str, target: str, headers: Mapping[str, str], priority: int = 0
    ) -> RequestLabels:
        """A request's bounded label values."""
        fairness = next((v for h in FAIRNESS_HEADERS if (v := headers.get(h))), None)
        return RequestLabels(
            self._model_label(model),
            self._model_label(target),
            self._bounded_fairness(fairness or DEFAULT_FAIRNESS_ID),
            str(priority),
        )

    def picked(self, labels: RequestLabels, body_bytes: int) -> None:
        series = self._series(labels)
        series.requests.inc()
        for g in series.running:
            g.inc()
        for h in series.sizes:
            h.observe(body_bytes)

    def refused(self, labels: RequestLabels, status: int) -> None:
        """The picker answered in the engine's place (nothing was picked)."""
        for c in self.errors.children(labels, error_code(status)):
            c.inc()

    def finished(
        self, labels: RequestLabels, status: int, seconds: float | None, usage: Usage | None
    ) -> None:
        """A picked request is over: `status` the engine's (0: cut before it answered),
        `seconds` its duration when answered, `usage` what the engine reported."""
        series = self._series(labels)
        for g in series.running:
            g.dec()
        if status >= 400:
            for c in self.errors.children(labels, MODEL_SERVER_ERROR):
                c.inc()
        observed = (
            (series.durations, seconds),
            (series.input_tokens, usage.prompt_tokens if usage else None),
            (series.output_tokens, usage.completion_tokens if usage else None),
        )
        for histograms, value in observed:
            if value is not None:
                for h in histograms:
                    h.observe(value)

    def _series(self, labels: RequestLabels) -> _Series:
        """The children of one label set, looked up once (label values are bounded)."""
        series = self._children.get(labels)
        if series is None:
            series = self._children[labels] = _Series(
                self.requests.labels(*labels.values),
                (self.running.labels(*labels.values), self.old_running.labels(labels.model)),
                self.sizes.children(labels),
                self.durations.children(labels),
                self.input_tokens.children(labels),
                self.output_tokens.children(labels),
            )
        return series

    def _bounded_fairness(self, fairness_id: str) -> str:
        if fairness_id in self._fairness_ids:
            return fairness_id
        if len(self._fairness_ids) >= MAX_FAIRNESS_IDS:
            return OTHER
        self._fairness_ids.add(fairness_id)
        return fairness_id


M = TypeVar("M", Counter, Histogram)


@dataclass(frozen=True, slots=True)
class _Series:
    """One label set's children of the per-request series."""

    requests: Counter
    running: tuple[Gauge, Gauge]
    sizes: tuple[Histogram, Histogram]
    durations: tuple[Histogram, Histogram]
    input_tokens: tuple[Histogram, Histogram]
    output_tokens: tuple[Histogram, Histogram]


@dataclass(frozen=True, slots=True)
class _Twins(Generic[M]):
    """A series under its current name (every label) and its GIE-era twin (model labels)."""

    new: M
    old: M

    def children(self, labels: RequestLabels, *extra: str) -> tuple[M, M]:
        return (
            self.new.labels(*labels.values, *extra),
            self.old.labels(labels.model, labels.target, *extra),
        )


def _histograms(
    registry: CollectorRegistry, name: str, old: str, buckets: Sequence[float], doc: str
) -> _Twins[Histogram]:
    return _Twins(
        Histogram(f"llm_d_epp_{name}", doc, LABELS, buckets=buckets, registry=registry),
        Histogram(f"inference_objective_{old}", doc, _MODELS, buckets=buckets, registry=registry),
    )
