"""Backends added, drained and removed while the gateway serves (admin API, config reloads).

Every backend has an owner: `config` (the file's `backends:`, made equal to the file at each
reload), `admin` (`POST /admin/backends`; reloads leave it alone unless the file names its id,
which makes it the config's) or `discovery` (`gateway.pod_backends`; drained here, never
removed). A new backend is probed at once and routed to once healthy; one that leaves gets no
new request, its requests in flight finish on the `Backend` they hold, its KV-event subscriber
stops, and what was learnt about it (prefix index, TTFT line, gauges: `on_removed`) is
forgotten once its last request has ended, so that nothing they report brings it back.

Drain: the backend stays in the pool and is still probed, but its health reads DRAINING, so no
new request (nor a failover retry) goes there; `resume` undoes it. `remove` takes an idle or
forced backend out at once; a busy one is drained and taken out when its last request ends
(`run` checks every `CHECK_EVERY_S`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gateway.errors import ConflictError, NotFoundError
from gateway.kv_event_loops import KvEventLoops
from health.kv_events import KvEventsSettings
from health.pool import Backend, BackendPool, BackendSpec, target_ids
from routing.config.schema import BackendEntry

log = logging.getLogger(__name__)
Owner = Literal["config", "admin", "discovery"]
CHECK_EVERY_S = 0.05


def backend_spec(entry: BackendEntry) -> BackendSpec:
    return BackendSpec(
        url=entry.url,
        id=entry.id or "",
        engine=entry.engine,
        models=tuple(entry.models),
        role=entry.role,
        bootstrap_port=entry.bootstrap_port,
        dp_size=entry.dp_size,
        dp_rank_field=entry.dp_rank_field,
    )


def kv_settings(entry: BackendEntry) -> KvEventsSettings | None:
    """The subscriber settings of the entry's KV-event publisher, if it names one."""
    return None if entry.kv_events is None else KvEventsSettings(**entry.kv_events.model_dump())


@dataclass(frozen=True, slots=True)
class PoolChanges:
    """What a config reload did to the pool, by backend id."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()


class RuntimeBackends:
    """The pool's members that the admin API and config reloads manage."""

    def __init__(
        self,
        pool: BackendPool,
        kv_loops: KvEventLoops,
        on_removed: Callable[[str], None],
        configured: Iterable[BackendEntry] = (),
        discovered: Callable[[str], bool] = lambda _: False,
    ) -> None:
        self._pool = pool
        self._kv_loops = kv_loops
        self._on_removed = on_removed  # forgets what was learnt about a backend
        self._discovered = discovered
        # config- and admin-owned backends, each as its entry said
        self._entries = {backend_spec(e).id: e for e in configured}
        self._owners: dict[str, Owner] = dict.fromkeys(self._entries, "config")
        self._remove_when_idle: set[str] = set()
        self._leaving: dict[str, Backend] = {}  # out of the pool, requests still in flight
        self._wake = asyncio.Event()

    def owner(self, backend_id: str) -> Owner | None:
        if (owner := self._owners.get(backend_id)) is not None:
            return owner
        return "discovery" if self._discovered(backend_id) else None

    def describe(self, backend: Backend) -> dict[str, Any]:
        """What the admin API says about a backend it changed (and `/admin/backends` adds)."""
        return {
            "id": backend.id,
            "url": backend.spec.url,
            "engine": backend.spec.engine,
            "role": backend.spec.role,
            "models": sorted(backend.models),
            "health": backend.health(self._pool.now()).value,
            "draining": backend.draining,
            "in_flight": backend.total_in_flight,
            "dp_size": len(backend.ranks) or None,
            "ranks": [r.id for r in backend.ranks],
            "source": self.owner(backend.id),
            "remove_when_idle": backend.id in self._remove_when_idle,
        }

    def add(self, entry: BackendEntry) -> Backend:
        """Add an admin-owned backend; ConflictError if its id is taken."""
        spec = backend_spec(entry)
        if self._pool.find(spec.id) is not None:
            raise ConflictError(f"backend id {spec.id!r} is taken")
        backend = self._join(spec, entry, "admin")
        log.info("backend %s added by the admin API (engine %s)", spec.id, spec.engine)
        return backend

    def drain(self, backend_id: str, *, remove: bool = False) -> Backend:
        """No new requests for the backend; `remove`: take it out once idle."""
        backend = self.get(backend_id)
        if remove:
            self._check_removable(backend_id)
            self._remove_when_idle.add(backend_id)
            self._wake.set()
        if not backend.draining:
            backend.draining = True
            log.info("backend %s draining (%d in flight)", backend_id, backend.total_in_flight)
        return backend

    def resume(self, backend_id: str) -> Backend:
        """Back into rotation (a pending removal is called off)."""
        backend = self.get(backend_id)
        self._remove_when_idle.discard(backend_id)
        if backend.draining:
            backend.draining = False
            log.info("backend %s back in rotation", backend_id)
        return backend

    def remove(self, backend_id: str, *, force: bool = False) -> bool:
        """Remove a backend: True if it left the pool now (idle, or `force`), False if it
        drains first and leaves when its last request ends."""
        backend = self.get(backend_id)
        self._check_removable(backend_id)
        if force or backend.total_in_flight == 0:
            self._leave(backend_id)
            return True
        self.drain(backend_id, remove=True)
        return False

    def apply_config(self, entries: Sequence[BackendEntry]) -> PoolChanges:
        """Make the config-owned backends `entries` (a reloaded file's `backends:`)."""
        wanted = {backend_spec(e).id: e for e in entries}
        removed = sorted(i for i, o in self._owners.items() if o == "config" and i not in wanted)
        for backend_id in removed:
            self._leave(backend_id)
        added, updated = [], []
        for backend_id, entry in wanted.items():
            current = self._pool.find(backend_id)
            if current is None:
                self._join(backend_spec(entry), entry, "config")
                added.append(backend_id)
            elif self.owner(backend_id) == "discovery":
                log.warning(
                    "config backend %s is a discovered backend: kept as discovered", backend_id
                )
            elif self._update(current, entry):
                updated.append(backend_id)
        return PoolChanges(tuple(added), tuple(removed), tuple(updated))

    async def run(self) -> None:
        """Take drained backends out once idle, forget the departed once idle; forever."""
        while True:
            self._wake.clear()
            if self._remove_when_idle or self._leaving:
                await asyncio.sleep(CHECK_EVERY_S)
            else:
                await self._wake.wait()
            self.settle()

    def settle(self) -> None:
        """One check of the pending removals (what `run` does every `CHECK_EVERY_S`)."""
        for backend_id in sorted(self._remove_when_idle):
            backend = self._pool.find(backend_id)
            if backend is None:
                self._remove_when_idle.discard(backend_id)
            elif backend.total_in_flight == 0:
                self._leave(backend_id)
        for backend_id, backend in list(self._leaving.items()):
            if backend.total_in_flight == 0:
                del self._leaving[backend_id]
                self._forget(backend)

    def get(self, backend_id: str) -> Backend:
        """The backend in the pool with this id; NotFoundError (404) if none."""
        backend = self._pool.find(backend_id)
        if backend is None:
            raise NotFoundError(f"no backend {backend_id!r}")
        return backend

    def _check_removable(self, backend_id: str) -> None:
        backend = self._pool.find(backend_id)
        if backend is not None and backend.parent is not None:
            raise ConflictError(
                f"backend {backend_id!r} is a data-parallel rank: it leaves with its engine "
                f"{backend.parent.id!r} (drain it to stop routing to it)"
            )
        if self.owner(backend_id) == "discovery":
            raise ConflictError(
                f"backend {backend_id!r} comes from pod discovery: it leaves with its pod "
                "(drain it to stop routing to it)"
            )

    def _join(self, spec: BackendSpec, entry: BackendEntry, owner: Owner) -> Backend:
        if (old := self._leaving.pop(spec.id, None)) is not None:
            self._forget(old)  # the old one's state must not become the new one's
        backend = self._pool.add(spec)
        self._entries[spec.id], self._owners[spec.id] = entry, owner
        if (settings := kv_settings(entry)) is not None:
            self._kv_loops.follow(spec.id, settings)
        return backend

    def _leave(self, backend_id: str) -> None:
        backend = self._pool.remove(backend_id)
        self._entries.pop(backend_id, None)
        owner = self._owners.pop(backend_id, None)
        self._remove_when_idle.discard(backend_id)
        self._kv_loops.forget(backend_id)
        if backend is not None and backend.total_in_flight > 0:
            self._leaving[backend_id] = backend
            self._wake.set()
        elif backend is not None:
            self._forget(backend)
        else:
            self._on_removed(backend_id)
        in_flight = backend.total_in_flight if backend is not None else 0
        log.info("backend %s removed (%s; %d in flight finish)", backend_id, owner, in_flight)

    def _forget(self, backend: Backend) -> None:
        """What was learnt about a member that left, and about each of its ranks."""
        for backend_id in target_ids(backend):
            self._on_removed(backend_id)

    def _update(self, current: Backend, entry: BackendEntry) -> bool:
        """Make a present backend the config's `entry`; True if anything changed."""
        spec, was = backend_spec(entry), self._entries.get(current.id)
        self._owners[current.id] = "config"
        if was == entry and current.spec == spec:
            return False
        if (current.spec.url, current.spec.engine, current.spec.dp_size) != (
            spec.url,
            spec.engine,
            spec.dp_size,
        ):
            self._leave(current.id)  # another engine: another cache
            self._join(spec, entry, "config")
            return True
        self._entries[current.id] = entry
        if current.spec != spec:
            current.spec = spec  # its models: same engine, same cache and health
            current.discovered_at = None  # an emptied list is discovered again at once
            self._pool.roles_changed()
        settings = kv_settings(entry)
        if settings is not None:
            self._kv_loops.follow(current.id, settings)
        elif current.id in self._kv_loops.subscribers:
            self._kv_loops.forget(current.id)
        log.info("backend %s updated", current.id)
        return True
