"""The backend pool: runtime state of every configured backend, and snapshots of it.

A data-parallel engine (`dp_size` N > 1) is one member of the pool and N routing targets, its
ranks `ID@0` .. `ID@N-1` (`health.ranks`): iterating the pool, `snapshots` and `healthy` give
targets; `engines()` gives members, which pollers probe and scrape once per URL.

Model cards are the backends' own `GET /v1/models` entries. vLLM lists a LoRA adapter there
as a model of its own whose `parent` is the base model's id (`{"id": "sql-lora", "root":
"/path/to/adapter", "parent": "llama", ...}`); a base model's `parent` is null.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from health.ranks import rank_id
from health.state import HealthPolicy, HealthState
from routing.types import EndpointSnapshot, EngineMetrics, Health, metrics_fresh


@dataclass(frozen=True, slots=True)
class BackendSpec:
    """A backend as configured: where it is, what engine it runs, optionally its models."""

    url: str
    id: str = ""
    engine: str = "openai"
    models: tuple[str, ...] = ()
    role: str = "both"  # prefill | decode | both (disaggregated P/D pools)
    bootstrap_port: int | None = None  # an SGLang prefill backend's KV bootstrap port
    dp_size: int | None = None  # data-parallel ranks behind the URL; None: as the engine says
    rank: int | None = None  # a rank target's rank (None: the engine balances itself)
    dp_rank_field: str = "routed_dp_rank"  # SGLang: the body field naming the rank

    def __post_init__(self) -> None:
        object.__setattr__(self, "url", self.url.rstrip("/"))
        if not self.id:
            object.__setattr__(self, "id", self.url.split("://", 1)[-1])


def rank_spec(spec: BackendSpec, rank: int, dp_size: int) -> BackendSpec:
    """The spec of rank `rank` of the engine `spec` describes (same URL, id `ID@rank`)."""
    return dataclasses.replace(spec, id=rank_id(spec.id, rank), rank=rank, dp_size=dp_size)


def target_ids(backend: Backend) -> list[str]:
    """The ids a member is known by: its own and its ranks'."""
    return [backend.id, *(r.id for r in backend.ranks)]


# The fields a snapshot is made of: assigning any of them drops the cached snapshot.
_SNAPSHOT_FIELDS = frozenset(
    {
        "spec",
        "model_cards",
        "metrics",
        "in_flight",
        "pending_prefill_tokens",
        "remote_in_flight",
        "remote_pending_prefill_tokens",
        "draining",
    }
)


def adapter_parent(card: Mapping[str, Any]) -> str | None:
    """The base model a model card names as its parent if the card is a LoRA adapter's
    (vLLM's listing), else None."""
    parent = card.get("parent")
    if isinstance(parent, str) and parent and parent != card.get("id"):
        return parent
    return None


@dataclass(slots=True)
class Backend:
    """Mutable runtime record of one backend, owned by the event loop.

    `snapshot` is asked for every backend on every request, so the last one is kept and
    handed out again while it still describes the backend: assigning a field it is made of
    drops it, and it is checked against the health state and the metrics' age at each call
    (both move with the clock, not with assignments). Why: docs/decisions/0003-snapshot-caching.md.
    """

    spec: BackendSpec
    state: HealthState
    model_cards: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    metrics: EngineMetrics | None = None
    scrape_errors: int = 0  # failed metric scrapes since start
    in_flight: int = 0
    dispatched: int = 0
    pending_prefill_tokens: int = 0  # predicted uncached prompt tokens not yet prefilled
    # The other gateways' requests in flight here and prefill queued (shared load reports).
    remote_in_flight: int = 0
    remote_pending_prefill_tokens: int = 0
    discovered_at: float | None = None
    draining: bool = False  # out of rotation (an operator's drain): health reads DRAINING
    # A data-parallel engine's rank targets (their health state is this one's), and a
    # rank's engine.
    ranks: tuple[Backend, ...] = field(default=(), repr=False, compare=False)
    parent: Backend | None = field(default=None, repr=False, compare=False)
    # Told when `model_cards` is assigned (the pool's cache of LoRA adapters depends on them).
    on_cards_changed: Callable[[], None] | None = field(default=None, repr=False, compare=False)
    # The cached snapshot, the time it was taken at and the staleness bound it was taken with.
    _snap: EndpointSnapshot | None = field(default=None, repr=False, compare=False)
    _snap_at: float = field(default=0.0, repr=False, compare=False)
    _snap_stale: float | None = field(default=None, repr=False, compare=False)
    # `spec.id`, kept as a plain attribute (read several times a request; a property is a
    # call each time): set with `spec`.
    id: str = field(init=False, repr=False, compare=False)
    _models: frozenset[str] | None = field(default=None, init=False, repr=False, compare=False)

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name in _SNAPSHOT_FIELDS:
            object.__setattr__(self, "_snap", None)
            if name == "spec":
                object.__setattr__(self, "id", value.id)
                object.__setattr__(self, "_models", None)
            elif name == "model_cards":
                object.__setattr__(self, "_models", None)
                for rank in getattr(self, "ranks", ()):  # the engine's cards are its ranks'
                    rank.model_cards = value
                if told := getattr(self, "on_cards_changed", None):
                    told()

    def health(self, now: float) -> Health:
        """The probed health, or DRAINING while drained, or its engine is (probes go on)."""
        parent = self.parent
        if self.draining or (parent is not None and parent.draining):
            return Health.DRAINING
        return self.state.health(now)

    @property
    def total_in_flight(self) -> int:
        """Requests in flight here and on its ranks."""
        return self.in_flight + sum(r.in_flight for r in self.ranks)

    def targets(self) -> tuple[Backend, ...]:
        """What routing sees of this member: its ranks, or itself."""
        return self.ranks or (self,)

    @property
    def models(self) -> frozenset[str]:
        if self.spec.models:
            return frozenset(self.spec.models)
        return frozenset(self.model_cards)

    def snapshot(self, now: float, stale_after_s: float | None = None) -> EndpointSnapshot:
        """This backend at `now`; metrics older than `stale_after_s` are reported unknown."""
        # `health(now)`, written out: no call for every backend on every request
        parent, state = self.parent, self.state
        if self.draining or (parent is not None and parent.draining):
            health = Health.DRAINING
        else:
            health = Health.EJECTED if now < state.ejected_until_s else state.probed
        snap = self._snap
        if (
            snap is not None
            and now >= self._snap_at  # an injected clock may be set back
            and stale_after_s == self._snap_stale
            and snap.health is health
            and ((m := snap.metrics) is None or metrics_fresh(m.scraped_at, now, stale_after_s))
        ):
            return snap
        metrics = self.metrics
        if metrics is not None and not metrics_fresh(metrics.scraped_at, now, stale_after_s):
            metrics = None
        spec = self.spec
        # Every field by position, in their order: keywords cost a dict per call, and the
        # snapshot is taken anew whenever the in-flight count moved (every request).
        if (models := self._models) is None:  # kept until `spec` or `model_cards` changes
            models = self.models
            object.__setattr__(self, "_models", models)
        snap = EndpointSnapshot(
            spec.id,
            spec.url,
            models,
            health,
            spec.engine,
            spec.role,
            metrics,
            self.in_flight,
            self.pending_prefill_tokens,
            self.remote_in_flight,
            self.remote_pending_prefill_tokens,
        )
        object.__setattr__(self, "_snap", snap)
        object.__setattr__(self, "_snap_at", now)
        object.__setattr__(self, "_snap_stale", stale_after_s)
        return snap


class BackendPool:
    """All backends, keyed by id, with the clock that health decisions use.

    Snapshots drop engine metrics scraped more than `stale_after_s` ago (None: never), so
    scorers treat them as unknown rather than trusting an old queue length.

    Membership may change at runtime (pod discovery, the admin API, config reloads): `add`
    and `remove` a backend, and `wait_changed` wakes the per-backend pollers so they start or
    stop loops. A removed backend receives no new requests; requests already on it finish on
    the `Backend` object they hold. A draining backend stays in the pool, probed, but is not
    healthy: it gets no new requests.
    """

    def __init__(
        self,
        specs: Iterable[BackendSpec],
        policy: HealthPolicy,
        clock: Callable[[], float],
        stale_after_s: float | None = None,
    ) -> None:
        self._clock = clock
        self._stale_after_s = stale_after_s
        self._backends: dict[str, Backend] = {}
        self._policy = policy
        self._adapters: frozenset[str] | None = None  # None: to compute from the cards
        self._models: frozenset[str] | None = None  # likewise
        self.disaggregated = False  # some member's role is prefill (a P/D pool)
        self._changed = asyncio.Event()
        self._targets: dict[str, Backend] = {}  # routing targets: members, or their ranks
        # Told when a member turns into ranks (a discovered data-parallel size).
        self.on_ranks: list[Callable[[Backend], None]] = []
        for spec in specs:
            self.add(spec)

    def add(self, spec: BackendSpec) -> Backend:
        """Add a backend (health UNKNOWN until probed), with its ranks when its spec sets a
        `dp_size` over 1; ValueError if the id is taken."""
        if spec.id in self._backends or spec.id in self._targets:
            raise ValueError(f"duplicate backend id {spec.id!r}")
        backend = Backend(
            spec=spec, state=HealthState(self._policy), on_cards_changed=self._forget_adapters
        )
        self._backends[spec.id] = backend
        if spec.dp_size is not None and spec.dp_size > 1:
            self._make_ranks(backend, spec.dp_size)
        self._membership_changed()
        return backend

    def set_ranks(self, backend_id: str, dp_size: int) -> Backend | None:
        """A member's engine turned out to be data-parallel (its metrics or server info say
        `dp_size` ranks): it becomes that many targets, and `on_ranks` is told. None when it
        is not a member, already has ranks, or `dp_size` is under 2."""
        backend = self._backends.get(backend_id)
        if backend is None or backend.ranks or dp_size < 2:
            return None
        self._make_ranks(backend, dp_size)
        self._membership_changed()
        for told in self.on_ranks:
            told(backend)
        return backend

    def _make_ranks(self, backend: Backend, dp_size: int) -> None:
        ranks = tuple(
            Backend(
                spec=rank_spec(backend.spec, r, dp_size),
                state=backend.state,  # one engine, one health: probes and ejections
                model_cards=backend.model_cards,
                parent=backend,
            )
            for r in range(dp_size)
        )
        for rank in ranks:
            if rank.id in self._backends or rank.id in self._targets:
                raise ValueError(f"duplicate backend id {rank.id!r}")
        backend.ranks = ranks

    def remove(self, backend_id: str) -> Backend | None:
        """Take a member (its ranks with it) out of the pool; returns it (None if it was not
        there)."""
        backend = self._backends.pop(backend_id, None)
        if backend is not None:
            self._membership_changed()
        return backend

    def engines(self) -> tuple[Backend, ...]:
        """The members, each once however many ranks it has (what pollers poll)."""
        return tuple(self._backends.values())

    @property
    def stale_after_s(self) -> float | None:
        return self._stale_after_s

    @stale_after_s.setter
    def stale_after_s(self, value: float | None) -> None:
        self._stale_after_s = value

    def set_policy(self, policy: HealthPolicy) -> None:
        """Health thresholds from now on, for every backend (a config reload)."""
        self._policy = policy
        for backend in self._backends.values():
            backend.state.policy = policy

    def find(self, backend_id: str) -> Backend | None:
        """A member or a routing target (a rank) by id."""
        return self._targets.get(backend_id) or self._backends.get(backend_id)

    async def wait_changed(self) -> None:
        """Return at the next `add` or `remove`."""
        await self._changed.wait()

    def roles_changed(self) -> None:
        """A member's spec changed in place: whether the pool is disaggregated may too."""
        self.disaggregated = any(b.spec.role == "prefill" for b in self._backends.values())
        for b in self._backends.values():  # a member's changed spec is its ranks' too
            for rank in b.ranks:
                if rank.spec != (spec := rank_spec(b.spec, rank.spec.rank or 0, len(b.ranks))):
                    rank.spec = spec

    def _membership_changed(self) -> None:
        self._targets = {t.id: t for b in self._backends.values() for t in b.targets()}
        self._forget_adapters()
        self.roles_changed()
        # Wake the current waiters, then arm a fresh event for the next ones.
        self._changed.set()
        self._changed = asyncio.Event()

    def __iter__(self) -> Any:
        """The routing targets. A copy: callers iterate across awaits while discovery adds
        and removes backends."""
        return iter(tuple(self._targets.values()))

    def __len__(self) -> int:
        return len(self._targets)

    def get(self, backend_id: str) -> Backend:
        backend = self.find(backend_id)
        if backend is None:
            raise KeyError(backend_id)
        return backend

    def now(self) -> float:
        return self._clock()

    def snapshots(self) -> tuple[EndpointSnapshot, ...]:
        now, stale_after_s = self._clock(), self._stale_after_s
        snaps = []
        for b in self._targets.values():  # a loop: a comprehension is a function object per call
            snaps.append(b.snapshot(now, stale_after_s))
        return tuple(snaps)

    def healthy(self) -> list[Backend]:
        now = self._clock()
        return [b for b in self._targets.values() if b.health(now) is Health.HEALTHY]

    def served_models(self) -> dict[str, Mapping[str, Any]]:
        """Model cards across healthy backends; the first backend listing a model wins."""
        cards: dict[str, Mapping[str, Any]] = {}
        for b in self.healthy():
            for model in sorted(b.models):
                if model not in cards:
                    cards[model] = b.model_cards.get(model) or {"id": model, "object": "model"}
        return cards

    def lora_adapters(self) -> frozenset[str]:
        """The models some backend lists as a LoRA adapter of another model (from discovered
        cards; configured `models` carry no parent). Kept until a backend's cards change."""
        if self._adapters is None:
            self._adapters = frozenset(
                model
                for b in self._backends.values()
                for model, card in b.model_cards.items()
                if adapter_parent(card) is not None
            )
        return self._adapters

    def _forget_adapters(self) -> None:
        self._adapters = self._models = None

    def known_models(self) -> frozenset[str]:
        """Every model any backend serves, healthy or not. Kept until the membership or a
        backend's cards change (asked on every request, to bound metric labels)."""
        if self._models is None:
            self._models = frozenset(m for b in self._backends.values() for m in b.models)
        return self._models
