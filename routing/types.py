"""Immutable values that cross the routing boundary: requests, endpoint snapshots, decisions."""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from types import MappingProxyType
from typing import overload

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


class ScoreTable(Sequence[EndpointScores]):
    """The scores of one scheduling cycle, kept as columns: `EndpointScores` rows on demand.

    The scheduler fills one column per scorer and the totals in a few passes over lists; a
    picker that needs only ids and totals reads `ids` and `totals`, so a decision over many
    endpoints builds no per-endpoint object. Read as a sequence, it is the tuple of
    `EndpointScores` (in candidate order) it stands for, built once on first access, and
    compares equal to that tuple.
    """

    __slots__ = ("_rows", "columns", "ids", "names", "totals")

    def __init__(
        self,
        ids: Sequence[str],
        names: Sequence[str],
        columns: Sequence[Sequence[float]],
        totals: Sequence[float],
    ) -> None:
        self.ids = ids
        self.names = names  # scorer names, one per column
        self.columns = columns  # columns[k][i]: scorer k's clamped score of endpoint ids[i]
        self.totals = totals
        self._rows: tuple[EndpointScores, ...] | None = None

    def rows(self) -> tuple[EndpointScores, ...]:
        """The `EndpointScores` of each candidate, built on first use."""
        if self._rows is None:
            names = self.names
            rows = zip(*self.columns, strict=True) if self.columns else repeat(())
            self._rows = tuple(
                EndpointScores(eid, MappingProxyType(dict(zip(names, row, strict=True))), total)
                for eid, row, total in zip(self.ids, rows, self.totals, strict=False)
            )
        return self._rows

    def __len__(self) -> int:
        return len(self.ids)

    @overload
    def __getitem__(self, i: int) -> EndpointScores: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[EndpointScores, ...]: ...
    def __getitem__(self, i: int | slice) -> EndpointScores | tuple[EndpointScores, ...]:
        return self.rows()[i]

    def __iter__(self) -> Iterator[EndpointScores]:
        return iter(self.rows())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ScoreTable):
            other = other.rows()
        return self.rows() == other

    __hash__ = None  # type: ignore[assignment]  # equal to an unhashable tuple of rows

    def __repr__(self) -> str:
        return repr(self.rows())


@dataclass(frozen=True, slots=True)
class Decision:
    """The scheduler's answer: endpoints ranked best first, and why.

    `ranked` holds the chosen endpoint first, then fallbacks in the order to try them.
    `filtered_out` maps each endpoint removed by a filter to that filter's name. `scores`
    holds every candidate's scores, in candidate order (a `ScoreTable` from the scheduler).
    """

    profile: str
    ranked: tuple[str, ...]
    scores: Sequence[EndpointScores]
    filtered_out: Mapping[str, str] = field(default_factory=_empty)

    @property
    def target(self) -> str | None:
        return self.ranked[0] if self.ranked else None
