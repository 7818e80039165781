"""Immutable values that cross the routing boundary: requests, endpoint snapshots, decisions."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

_EMPTY: Mapping[str, str] = MappingProxyType({})


def _empty() -> Mapping[str, str]:
    # A factory, not `default=_EMPTY`: dataclasses reject unhashable defaults such as
    # mappingproxy. The shared empty proxy is read-only, so sharing it is safe.
    return _EMPTY


class Health(enum.Enum):
    """Health of an endpoint as the gateway sees it."""

    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"  # failed active probes
    EJECTED = "ejected"  # passively ejected after upstream failures, in backoff
    UNKNOWN = "unknown"  # not probed yet


@dataclass(frozen=True, slots=True)
class EngineMetrics:
    """What an engine reported about itself at `scraped_at` (seconds on the injected clock).

    Every field is optional: a generic OpenAI server reports nothing.
    """

    scraped_at: float
    waiting: int | None = None
    running: int | None = None
    kv_usage: float | None = None  # 0..1
    block_size: int | None = None  # tokens per KV block
    num_blocks: int | None = None
    running_loras: frozenset[str] = frozenset()
    waiting_loras: frozenset[str] = frozenset()
    max_loras: int | None = None


@dataclass(frozen=True, slots=True)
class EndpointSnapshot:
    """One replica at one instant, as the scheduler sees it."""

    id: str
    url: str
    models: frozenset[str] = frozenset()
    health: Health = Health.HEALTHY
    engine: str = "openai"
    metrics: EngineMetrics | None = None
    in_flight: int = 0  # requests the gateway has dispatched and not yet seen finish
    pending_prefill_tokens: int = 0  # predicted uncached prompt tokens awaiting a first token

    @property
    def healthy(self) -> bool:
        return self.health is Health.HEALTHY


@dataclass(frozen=True, slots=True)
class RoutingRequest:
    """The parts of an inference request that routing looks at. Never holds prompt text."""

    model: str
    request_id: str = ""
    api: str = "chat"  # chat | completions | embeddings | responses
    prefix_hashes: tuple[int, ...] = ()  # chained block hashes of the prompt prefix
    prefix_block_chars: int = 64  # size of the first (base) hashed block, in bytes
    token_estimate: int = 0
    session_key: str | None = None
    lora_adapter: str | None = None
    stream: bool = False
    headers: Mapping[str, str] = field(default_factory=_empty)  # routing headers, lower-case


@dataclass(frozen=True, slots=True)
class EndpointScores:
    """Per-endpoint outcome of scoring: each scorer's raw [0,1] score and the weighted total."""

    endpoint_id: str
    scores: Mapping[str, float]
    total: float


@dataclass(frozen=True, slots=True)
class Decision:
    """The scheduler's answer: endpoints ranked best first, and why.

    `ranked` holds the chosen endpoint first, then fallbacks in the order to try them.
    `filtered_out` maps each endpoint removed by a filter to that filter's name.
    """

    profile: str
    ranked: tuple[str, ...]
    scores: tuple[EndpointScores, ...]
    filtered_out: Mapping[str, str] = field(default_factory=_empty)

    @property
    def target(self) -> str | None:
        return self.ranked[0] if self.ranked else None
