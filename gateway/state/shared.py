"""What the app wires for `state:`: a no-op for `memory`, Redis replication for `redis`.

`SharedState.note_dispatch` is the hook the prefix tracker calls on each local dispatch (no
I/O); `attach` adds the state loops to the app's supervisor; `state()` is the `state` entry of
`/ready` and `/admin/backends`; `degraded` is true while Redis is configured but not
answering. The stream key is `{namespace}:{pool}:placements`, where the pool is the
InferencePool's name (`discovery.pool`) or `static`; the model needs no key of its own,
since every block hash is seeded with the model name (`scoring.prefix_hash.prefix_seed`).
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Callable, Mapping
from typing import Any

from gateway.state.codec import Placement
from gateway.state.leases import InFlightLeases, LocalCounts
from gateway.state.link import LinkSettings, RedisLink
from gateway.state.placements import PlacementReplicator
from gateway.supervisor import Supervisor
from routing.types import RoutingRequest
from scoring.config import StateSection
from scoring.prefix_index import PrefixIndex

PUBLISH_LOOP = "state-publish"
APPLY_LOOP = "state-apply"
LEASE_LOOP = "state-in-flight"


class SharedState:
    """Routing state shared with the other gateways of the same namespace and pool."""

    def __init__(
        self,
        section: StateSection,
        pool: str,
        index: PrefixIndex,
        block_chars: Callable[[], int],
        known_backend: Callable[[str], bool],
        *,
        in_flight: LocalCounts | None = None,
        on_remote_in_flight: Callable[[Mapping[str, int]], None] = lambda remote: None,
        gateway_id: str | None = None,
        link_settings: LinkSettings | None = None,
    ) -> None:
        self.backend = section.backend
        self.gateway_id = gateway_id or _gateway_id()
        self._index = index
        self._block_chars = block_chars
        self._known = known_backend
        self.link: RedisLink | None = None
        self.placements: PlacementReplicator | None = None
        self.leases: InFlightLeases | None = None
        if section.backend == "redis":
            self.link = RedisLink(link_settings or LinkSettings(section.url))
            prefix = f"{section.namespace}:{pool}"
            self.placements = PlacementReplicator(
                self.link, f"{prefix}:placements", self.gateway_id, self._apply
            )
            if in_flight is not None:
                self.leases = InFlightLeases(
                    self.link, prefix, self.gateway_id, in_flight, on_remote_in_flight
                )

    def remote_in_flight(self) -> Mapping[str, int]:
        """Backend id → requests the other gateways have in flight there (empty: unknown)."""
        return self.leases.remote if self.leases is not None else {}

    @property
    def settled(self) -> bool:
        """Whether the gateway may report ready as far as shared state goes: the mirror has
        read the stream's history (or Redis failed: then local state it is)."""
        if self.link is None or self.placements is None:
            return True
        return self.placements.warmed or self.link.outages > 0

    @property
    def degraded(self) -> bool:
        return self.link is not None and not self.link.up

    def note_dispatch(self, backend_id: str, request: RoutingRequest) -> None:
        """A local dispatch: queued for the other gateways (request path: no I/O)."""
        if self.placements is not None and request.prefix_hashes:
            self.placements.note(backend_id, request.prefix_hashes, request.prefix_block_chars)

    def _apply(self, p: Placement) -> bool:
        """Another gateway's placement into the local index, if it means anything here."""
        if p.block_chars != self._block_chars() or not p.hashes or not self._known(p.backend):
            return False
        self._index.record(p.backend, p.hashes)
        return True

    def attach(self, loops: Supervisor) -> None:
        if self.placements is not None:
            loops.add(PUBLISH_LOOP, self.placements.publish)
            loops.add(APPLY_LOOP, self.placements.apply)
        if self.leases is not None:
            loops.add(LEASE_LOOP, self.leases.run)

    def state(self) -> dict[str, Any]:
        """The `state` entry of `/ready` and `/admin/backends`."""
        if self.link is None or self.placements is None:
            return {"backend": "memory"}
        c = self.placements.counters
        leases = self.leases
        in_flight = (
            {"peers": leases.peers, "remote": dict(leases.remote)} if leases is not None else None
        )
        return {
            "backend": "redis",
            "gateway_id": self.gateway_id,
            "redis_up": self.link.up,
            "degraded": self.degraded,
            "warmed": self.placements.warmed,
            "outages": self.link.outages,
            "last_error": self.link.last_error,
            "stream": self.placements.stream,
            "placements": {
                "queued": c.queued,
                "published": c.published,
                "dropped": c.dropped,
                "received": c.received,
                "applied": c.applied,
                "skipped": c.skipped,
                "lag_ms_last": c.lag_ms_last,
            },
            "in_flight": in_flight,
        }

    async def aclose(self) -> None:
        if self.link is not None:
            await self.link.aclose()


def _gateway_id() -> str:
    """Unique per process: host, pid and a random suffix (a restarted pid is a new one)."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


def build_shared_state(
    section: StateSection,
    pool: str | None,
    index: PrefixIndex,
    block_chars: Callable[[], int],
    known_backend: Callable[[str], bool],
    *,
    in_flight: LocalCounts,
    on_remote_in_flight: Callable[[Mapping[str, int]], None],
) -> SharedState:
    return SharedState(
        section,
        pool or "static",
        index,
        block_chars,
        known_backend,
        in_flight=in_flight,
        on_remote_in_flight=on_remote_in_flight,
    )
