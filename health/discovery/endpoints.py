"""From an `InferencePool` and pods to endpoints: pure functions over the API's JSON.
A pod yields endpoints when the pool's `spec.selector.matchLabels` all match its labels (an
empty selector selects nothing), it is `Ready`, has a `podIP` and no `deletionTimestamp`.
It yields one endpoint per `spec.targetPorts[].number`, `http://IP:PORT`, its engine from the
pod label `kvgate.dev/engine`, else `inference.networking.k8s.io/engine-type` (default
`vllm`); its P/D role from `kvgate.dev/role`, else `llm-d.ai/role` (default `both`).

KV-cache events come from pod annotations: `kvgate.dev/kv-events-port` (the publisher,
`tcp://POD_IP:PORT`), optional `kvgate.dev/kv-events-replay-port` and
`kvgate.dev/kv-events-topic` (default empty: every topic); an SGLang prefill pod's bootstrap
port from `kvgate.dev/bootstrap-port`. Target port i (DP rank i) publishes on PORT + i, replays
on REPLAY_PORT + i (`offset_endpoint_port`), the two ranges not overlapping. Label
`kvgate.dev/dp-size: N` makes a pool's one target port N data-parallel ranks. An invalid
annotation is ignored (bad port: no events; bad replay port: no replay), `warn(pod, message)`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

ENGINE_LABEL = "kvgate.dev/engine"
PEER_ENGINE_LABEL = "inference.networking.k8s.io/engine-type"
ENGINES = frozenset({"vllm", "sglang", "trtllm", "openai"})
DEFAULT_ENGINE = "vllm"
ROLE_LABEL = "kvgate.dev/role"
PEER_ROLE_LABEL = "llm-d.ai/role"
ROLES = frozenset({"prefill", "decode", "both"})
BOOTSTRAP_PORT = "kvgate.dev/bootstrap-port"
DP_SIZE_LABEL = "kvgate.dev/dp-size"
KV_EVENTS_PORT = "kvgate.dev/kv-events-port"
KV_EVENTS_REPLAY_PORT = "kvgate.dev/kv-events-replay-port"
KV_EVENTS_TOPIC = "kvgate.dev/kv-events-topic"
Warn = Callable[[str, str], None]  # (pod name, problem)


@dataclass(frozen=True, slots=True)
class PoolSpec:
    """The fields of an `InferencePool` that discovery reads."""

    selector: tuple[tuple[str, str], ...]  # matchLabels, sorted
    target_ports: tuple[int, ...]
    app_protocol: str = "http"


@dataclass(frozen=True, slots=True)
class KvEventsSource:
    """Where one endpoint's engine publishes its KV-cache events (ZMQ endpoints)."""

    endpoint: str
    replay: str | None = None
    topic: str = ""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One serving endpoint of one ready pod."""

    url: str
    engine: str
    pod: str
    kv_events: KvEventsSource | None = None
    role: str = "both"
    bootstrap_port: int | None = None
    dp_size: int | None = None  # data-parallel ranks behind the port (None: as the engine says)

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


def _ignore(pod: str, problem: str) -> None:
    pass


def _port(value: object) -> int | None:
    text = value.strip() if isinstance(value, str) else ""
    return int(text) if text.isascii() and text.isdigit() and 0 < int(text) < 65536 else None


def kv_events_sources(
    annotations: Mapping[str, Any], host: str, ranks: int, warn: Callable[[str], None]
) -> list[KvEventsSource | None]:
    """The KV-event sources of a pod's `ranks` endpoints from its annotations (all None
    without `kvgate.dev/kv-events-port`); `warn` hears of each invalid annotation."""
    raw = annotations.get(KV_EVENTS_PORT)
    if raw is None:
        return [None] * ranks
    port = _port(raw)
    if port is None or port + ranks - 1 > 65535:
        warn(f"{KV_EVENTS_PORT}: {str(raw)[:40]!r} is not a port (1-65535 per rank): no events")
        return [None] * ranks
    replay: int | None = None
    if (raw_replay := annotations.get(KV_EVENTS_REPLAY_PORT)) is not None:
        replay = _port(raw_replay)
        overlap = replay is not None and port <= replay + ranks - 1 and replay <= port + ranks - 1
        if replay is None or replay + ranks - 1 > 65535 or overlap:
            warn(f"{KV_EVENTS_REPLAY_PORT}: {str(raw_replay)[:40]!r} unusable: no replay")
            replay = None
    topic = annotations.get(KV_EVENTS_TOPIC, "")
    if not isinstance(topic, str):
        warn(f"{KV_EVENTS_TOPIC} is not a string: every topic")
        topic = ""
    return [
        KvEventsSource(
            f"tcp://{host}:{port + rank}",
            None if replay is None else f"tcp://{host}:{replay + rank}",
            topic,
        )
        for rank in range(ranks)
    ]


def pod_endpoints(pod: Mapping[str, Any], pool: PoolSpec, warn: Warn = _ignore) -> list[Endpoint]:
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
    annotations = meta.get("annotations") or {}
    sources = kv_events_sources(
        annotations if isinstance(annotations, dict) else {},
        host,
        len(pool.target_ports),
        lambda problem: warn(name, problem),
    )
    role = labels.get(ROLE_LABEL) or labels.get(PEER_ROLE_LABEL) or "both"
    role = role if role in ROLES else "both"
    bootstrap = _port(annotations.get(BOOTSTRAP_PORT) if isinstance(annotations, dict) else None)
    dp_size = _dp_size(labels.get(DP_SIZE_LABEL), len(pool.target_ports), lambda p: warn(name, p))
    return [
        Endpoint(f"http://{host}:{port}", engine, name, source, role, bootstrap, dp_size)
        for port, source in zip(pool.target_ports, sources, strict=True)
    ]


def _dp_size(value: object, ports: int, warn: Callable[[str], None]) -> int | None:
    """The pod's `kvgate.dev/dp-size`: ranks behind its one target port (a pool of one port
    per rank, llm-d's convention, has its ranks as ports already)."""
    if value is None:
        return None
    text = value.strip() if isinstance(value, str) else ""
    if not (text.isascii() and text.isdigit() and 1 <= int(text) <= 256):
        warn(f"{DP_SIZE_LABEL}: {str(value)[:40]!r} is not a rank count (1-256): ignored")
        return None
    if ports > 1:
        warn(f"{DP_SIZE_LABEL}: the pool has a port per rank already: ignored")
        return None
    return int(text)


def pool_endpoints(
    pool: PoolSpec | None, pods: Iterable[Mapping[str, Any]], warn: Warn = _ignore
) -> frozenset[Endpoint]:
    """Every endpoint of every ready pod the pool selects (none without a pool)."""
    if pool is None:
        return frozenset()
    return frozenset(e for pod in pods for e in pod_endpoints(pod, pool, warn))
