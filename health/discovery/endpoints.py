"""From an `InferencePool` and pods to endpoints: pure functions over the API's JSON.

A pod yields endpoints when the pool's `spec.selector.matchLabels` all match its labels
(an empty selector selects nothing), its `Ready` condition is `True`, it has a `podIP` and
no `deletionTimestamp` (terminating pods stop taking new work at once). It yields one
endpoint per `spec.targetPorts[].number`, `http://IP:PORT`, with the engine type read
from the pod label `kvgate.dev/engine`, else the label Kubernetes peers read,
`inference.networking.k8s.io/engine-type` (`vllm` when both are absent or unknown).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

ENGINE_LABEL = "kvgate.dev/engine"
PEER_ENGINE_LABEL = "inference.networking.k8s.io/engine-type"
ENGINES = frozenset({"vllm", "sglang", "trtllm", "openai"})
DEFAULT_ENGINE = "vllm"


@dataclass(frozen=True, slots=True)
class PoolSpec:
    """The fields of an `InferencePool` that discovery reads."""

    selector: tuple[tuple[str, str], ...]  # matchLabels, sorted
    target_ports: tuple[int, ...]
    app_protocol: str = "http"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One serving endpoint of one ready pod."""

    url: str
    engine: str
    pod: str

    @property
    def address(self) -> str:
        """`ip:port`, the form Envoy's destination header uses."""
        return self.url.split("://", 1)[1]


class PoolSpecError(ValueError):
    """The InferencePool object lacks a field discovery needs."""


def parse_pool(obj: Mapping[str, Any]) -> PoolSpec:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise PoolSpecError("InferencePool has no spec")
    selector = spec.get("selector") or {}
    labels = selector.get("matchLabels") or {} if isinstance(selector, dict) else {}
    if not isinstance(labels, dict):
        raise PoolSpecError("spec.selector.matchLabels is not a map")
    ports = []
    for entry in spec.get("targetPorts") or []:
        number = entry.get("number") if isinstance(entry, dict) else None
        if not isinstance(number, int) or not 0 < number < 65536:
            raise PoolSpecError(f"spec.targetPorts: bad port {entry!r}")
        ports.append(number)
    if not ports:
        raise PoolSpecError("spec.targetPorts is empty")
    return PoolSpec(
        selector=tuple(sorted((str(k), str(v)) for k, v in labels.items())),
        target_ports=tuple(ports),
        app_protocol=str(spec.get("appProtocol") or "http"),
    )


def label_selector(pool: PoolSpec) -> str:
    """The pool's selector as a `labelSelector` query value."""
    return ",".join(f"{k}={v}" for k, v in pool.selector)


def pod_ready(pod: Mapping[str, Any]) -> bool:
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    if meta.get("deletionTimestamp") or not status.get("podIP"):
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def pod_endpoints(pod: Mapping[str, Any], pool: PoolSpec) -> list[Endpoint]:
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    if not pool.selector or any(labels.get(k) != v for k, v in pool.selector):
        return []
    if not pod_ready(pod):
        return []
    ip = str(pod["status"]["podIP"])
    host = f"[{ip}]" if ":" in ip else ip
    engine = labels.get(ENGINE_LABEL) or labels.get(PEER_ENGINE_LABEL) or DEFAULT_ENGINE
    engine = engine if engine in ENGINES else DEFAULT_ENGINE
    name = str(meta.get("name", ""))
    return [Endpoint(f"http://{host}:{port}", engine, name) for port in pool.target_ports]


def pool_endpoints(pool: PoolSpec | None, pods: Iterable[Mapping[str, Any]]) -> frozenset[Endpoint]:
    """Every endpoint of every ready pod the pool selects (none without a pool)."""
    if pool is None:
        return frozenset()
    return frozenset(e for pod in pods for e in pod_endpoints(pod, pool))
