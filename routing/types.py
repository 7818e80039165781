"""Immutable values that cross the routing boundary: requests, endpoint snapshots, decisions."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter
from types import MappingProxyType
from typing import TypeVar, overload

from routing.frozen import fast_init

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
    DRAINING = "draining"  # taken out of rotation by an operator; requests in flight finish


# Read per endpoint and request: `Health.HEALTHY` goes through EnumType.__getattr__'s slower
# class attribute lookup on Python 3.11, a module global does not.
_HEALTHY = Health.HEALTHY


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


def metrics_fresh(scraped_at: float, now: float, stale_after_s: float | None) -> bool:
    """The one staleness rule: metrics scraped more than `stale_after_s` before `now` count
    as unknown (None: they never go stale). The gateway's pool and the simulator apply it."""
    return stale_after_s is None or not now - scraped_at > stale_after_s


@fast_init
@dataclass(frozen=True, slots=True)
class EndpointSnapshot:
    """One replica at one instant, as the scheduler sees it."""

    id: str
    url: str
    models: frozenset[str] = frozenset()
    health: Health = Health.HEALTHY
    engine: str = "openai"
    role: str = "both"  # prefill | decode | both: its part in a disaggregated P/D pool
    metrics: EngineMetrics | None = None
    in_flight: int = 0  # requests the gateway has dispatched and not yet seen finish
    pending_prefill_tokens: int = 0  # predicted uncached prompt tokens awaiting a first token
    # What the other gateway replicas (or sibling workers) have in flight there and queued
    # for prefill, as their shared load reports last said; 0 without shared state.
    remote_in_flight: int = 0
    remote_pending_prefill_tokens: int = 0

    @property
    def healthy(self) -> bool:
        return self.health is _HEALTHY


@fast_init
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
    prompt_tokens: int = 0  # the prompt's exact length in the model's tokens (0: not known)
    # The prompt's token-block keys (`scoring.state.token_blocks`) per engine block size:
    # (block_size, keys) pairs; empty without a tokenizer for the model.
    token_keys: tuple[tuple[int, tuple[int, ...]], ...] = ()

    def keys_for(self, block_size: int) -> tuple[int, ...] | None:
        """The prompt's token-block keys cut in `block_size`-token blocks, if computed."""
        for size, keys in self.token_keys:
            if size == block_size:
                return keys
        return None


@dataclass(frozen=True, slots=True)
class EndpointScores:
    """Per-endpoint outcome of scoring: each scorer's raw [0,1] score and the weighted total."""

    endpoint_id: str
    scores: Mapping[str, float]
    total: float


_ID = attrgetter("id")


class Candidates(list[EndpointSnapshot]):
    """The endpoints one scheduling cycle scores, with their ids listed once for every scorer.

    The scheduler hands each scorer this list; `endpoint_ids` reads `ids` from it instead of
    walking the endpoints again. Never mutated (plugins must not mutate their inputs), so
    `ids` stays in step with the endpoints. `ids` is a tuple: being immutable, it can key a
    cache by identity (the prefix index's last match, shared by the scorers of a cycle).
    """

    __slots__ = ("ids",)

    def __init__(self, endpoints: Iterable[EndpointSnapshot] = ()) -> None:
        super().__init__(endpoints)
        self.ids = tuple(map(_ID, self))  # no comprehension's function object per call


def endpoint_ids(endpoints: Sequence[EndpointSnapshot]) -> Sequence[str]:
    """The endpoints' ids, in order (`Candidates.ids` when the scheduler has listed them)."""
    if type(endpoints) is Candidates:
        return endpoints.ids
    return [e.id for e in endpoints]


_V = TypeVar("_V")


class LazyMapping(Mapping[str, _V]):
    """A read-only {str: value} mapping built on first read by `_build` (for results most
    callers never read as a mapping)."""

    __slots__ = ("_by_id",)

    def __init__(self) -> None:
        self._by_id: dict[str, _V] | None = None

    def _build(self) -> dict[str, _V]:
        raise NotImplementedError

    def _mapping(self) -> dict[str, _V]:
        if self._by_id is None:
            self._by_id = self._build()
        return self._by_id

    def __getitem__(self, key: str) -> _V:
        return self._mapping()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._mapping())

    def __len__(self) -> int:
        return len(self._mapping())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._mapping()!r})"


class ScoreColumn(LazyMapping[float]):
    """A scorer's scores as a column: `column[i]` is the score of `ids[i]`.

    Read as a mapping it is {id: score}. When `ids` is the scheduler's own list of candidate
    ids (`Candidates.ids`, the same object), the scheduler takes `column` as it is instead of
    looking up every id, so a scorer that computes its scores as a list never builds a dict.
    `unit=True` states that every score is in [0, 1] (no NaN) by construction, so the
    scheduler skips its range check; the column must not be changed once returned. (The
    scorers pass it by position: a class called with keywords builds a dict of them.)
    """

    __slots__ = ("column", "ids", "unit")

    def __init__(self, ids: Sequence[str], column: Sequence[float], unit: bool = False) -> None:
        if len(ids) != len(column):
            raise ValueError("a score column needs one score per id")
        self._by_id = None  # LazyMapping's, set here: one call fewer per scorer and request
        self.ids = ids
        self.column = column
        self.unit = unit

    def _build(self) -> dict[str, float]:
        return dict(zip(self.ids, self.column, strict=True))


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


@fast_init
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
