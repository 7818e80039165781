"""What the app wires for shared routing state: nothing, Redis, or the workers' own channel.

The channel: `redis` when `state.backend` is redis (every gateway and every worker a peer);
`workers` between the workers of one `kvgate serve --workers N` with `state.backend: memory`
(`gateway.state.local`); none for a lone memory gateway, where every hook is a no-op and no
loop runs. The cache ledger tells each local change (`placed`, `withdrawn`, `evicted`,
`forgotten`, `ttft`; no I/O: queued in the `Outbox`); the channel's loops carry them to the
others, whose `Mirror` applies them; in-flight and queued prefill go as load reports
(`LoadSharing`). `state()` is the `state` entry of `/ready` and `/admin/backends`; `degraded`
is true while Redis is configured but not answering. Redis keys (`prefix` is
`{namespace}:{pool}`, the pool being the InferencePool's name or `static`): each gateway's
stream `{prefix}:events:{gateway}`, their list `{prefix}:streams`, the channels
`{prefix}:load:{gateway}`, and each stored response's backend `{prefix}:responses:{id}`
(`gateway.responses.affinity`); block hashes are seeded with the model name, so no key has it.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

from gateway.state.link import LinkSettings, RedisLink
from gateway.state.load import Counts, LoadSharing
from gateway.state.local import LocalMesh, SiblingLinks
from gateway.state.outbox import Outbox, now_ms
from gateway.state.pubsub import LoadChannel
from gateway.state.stream import EventStream
from gateway.supervisor import Supervisor
from routing.config.schema import StateSection
from routing.percentile import percentile
from routing.types import RoutingRequest
from scoring.state.events import EventCounters, Eviction, Forget, Placement, Withdrawal
from scoring.state.mirror import Mirror
from scoring.state.prefix_index import PrefixIndex
from scoring.state.ttft_model import OnlineTtftModel

PUBLISH_LOOP = "state-publish"
APPLY_LOOP = "state-apply"
LOAD_LOOP = "state-load"
MESH_LOOP = "state-workers"
Channel = Literal["redis", "workers"]


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
        ttft_model: OnlineTtftModel | None = None,
        local_load: Callable[[], Counts] | None = None,
        on_remote_load: Callable[[Counts], None] = lambda remote: None,
        siblings: SiblingLinks | None = None,
        refresh_block_chars: Callable[[], int] | None = None,
        remote_dispatch: Callable[[str, float, int | None], None] | None = None,
        record_placement: Callable[[str, Sequence[int], int], None] | None = None,
        gateway_id: str | None = None,
        link_settings: LinkSettings | None = None,
    ) -> None:
        self.backend = section.backend
        self.gateway_id = gateway_id or _gateway_id()
        self.counters = EventCounters()
        self.outbox = Outbox(self.gateway_id, self.counters)
        self.mirror = Mirror(
            self.gateway_id,
            self.counters,
            index,
            block_chars,
            known_backend,
            ttft_model=ttft_model,
            refresh_block_chars=refresh_block_chars,
            remote_dispatch=remote_dispatch,
            record=record_placement,
            clock_ms=now_ms,
        )
        self.channel: Channel | None = None
        self.link: RedisLink | None = None
        self.stream: EventStream | None = None
        self.mesh: LocalMesh | None = None
        self.load: LoadSharing | None = None
        self._load_channel: LoadChannel | None = None
        if (section.backend == "redis" or siblings is not None) and local_load is not None:
            self.load = LoadSharing(self.gateway_id, local_load, on_remote_load)
        self.prefix = prefix = f"{section.namespace}:{pool}"
        if section.backend == "redis":
            self.channel = "redis"
            self.link = RedisLink(link_settings or LinkSettings(section.url))
            if self.load is not None:
                self._load_channel = LoadChannel(self.link, prefix, self.gateway_id, self.load)
            channel = self._load_channel
            self.stream = EventStream(
                self.link,
                prefix,
                self.gateway_id,
                self.outbox,
                self.mirror,
                load=(channel.load, channel.channel) if channel is not None else None,
            )
        elif siblings is not None:
            self.channel = "workers"
            self.mesh = LocalMesh(siblings, self.outbox, self.mirror, self.load)

    @property
    def active(self) -> bool:
        """Whether anything is shared (else the hooks need not be called at all)."""
        return self.channel is not None

    def remote_in_flight(self) -> dict[str, int]:
        """Backend id → requests the other gateways have in flight there (empty: unknown)."""
        if self.load is None:
            return {}
        return {b: n for b, (n, _) in self.load.remote.items() if n}

    @property
    def settled(self) -> bool:
        """Whether the gateway may report ready as far as shared state goes: the mirror has
        read the stream's history (or Redis failed: then local state it is)."""
        if self.link is None or self.stream is None:
            return True
        return self.stream.warmed or self.link.outages > 0

    @property
    def degraded(self) -> bool:
        return self.link is not None and not self.link.up

    # -- the local changes (request path: no I/O) ----------------------------------------
    def placed(self, backend_id: str, request: RoutingRequest, uncached_tokens: int) -> None:
        if request.prefix_hashes:
            self.outbox.put(
                Placement(
                    self.gateway_id,
                    backend_id,
                    request.prefix_block_chars,
                    request.prefix_hashes,
                    now_ms(),
                    uncached_tokens,
                )
            )

    def withdrawn(self, backend_id: str, request: RoutingRequest, start: int) -> None:
        hashes, chars = request.prefix_hashes, request.prefix_block_chars
        self.outbox.put(Withdrawal(self.gateway_id, backend_id, chars, hashes, start, now_ms()))

    def evicted(self, backend_id: str, request: RoutingRequest, weight: int) -> None:
        hashes, chars = request.prefix_hashes, request.prefix_block_chars
        self.outbox.put(Eviction(self.gateway_id, backend_id, chars, hashes, weight, now_ms()))

    def forgotten(self, backend_id: str) -> None:
        self.outbox.put(Forget(self.gateway_id, backend_id, now_ms()))

    def ttft(self, backend_id: str, work_tokens: float, ttft_s: float) -> None:
        self.outbox.add_ttft(backend_id, work_tokens, ttft_s)

    def load_changed(self) -> None:
        """A request ended: the load report should go now, not at the next interval."""
        self.outbox.poke()

    def receive_local(self, payload: bytes) -> None:
        """A sibling worker's frame (`gateway.workers.siblings`)."""
        if self.mesh is not None:
            self.mesh.receive(payload)

    # -- wiring ---------------------------------------------------------------------------
    def attach(self, loops: Supervisor) -> None:
        if self.stream is not None:
            loops.add(PUBLISH_LOOP, self.stream.publish)
            loops.add(APPLY_LOOP, self.stream.apply)
        if self._load_channel is not None:
            loops.add(LOAD_LOOP, self._load_channel.run)
        if self.mesh is not None:
            loops.add(MESH_LOOP, self.mesh.run)

    def state(self) -> dict[str, Any]:
        """The `state` entry of `/ready` and `/admin/backends`."""
        if self.channel is None:
            return {"backend": "memory"}
        c = self.counters
        state: dict[str, Any] = {
            "backend": self.backend,
            "channel": self.channel,
            "gateway_id": self.gateway_id,
            "degraded": self.degraded,
            "events": {
                "queued": c.queued,
                "published": c.published,
                "dropped": c.dropped,
                "received": c.received,
                "applied": c.applied,
                "skipped": c.skipped,
                "lag_ms_last": c.lag_ms_last,
                "lag_ms": lag_summary(self.mirror.lags_ms),
            },
            "load": self._load_state(),
        }
        if self.link is not None and self.stream is not None:
            state.update(
                redis_up=self.link.up,
                warmed=self.stream.warmed,
                outages=self.link.outages,
                last_error=self.link.last_error,
                stream=self.stream.stream,
            )
        return state

    def _load_state(self) -> dict[str, Any] | None:
        load = self.load
        if load is None:
            return None
        remote = {
            b: {"in_flight": n, "pending_prefill_tokens": p} for b, (n, p) in load.remote.items()
        }
        return {
            "peers": load.peers,
            "sent": load.sent,
            "received": load.received,
            "lag_ms": lag_summary(load.lags_ms),
            "remote": remote,
        }

    async def aclose(self) -> None:
        if self.link is not None:
            await self.link.aclose()


def lag_summary(lags_ms: Iterable[float]) -> dict[str, float | int | None]:
    """The recent lags (made or sent by another gateway → applied here, wall clock, ms):
    how many, their median, p90, p99 and maximum (None while there are none)."""
    lags = list(lags_ms)
    if not lags:
        return {"n": 0, "p50": None, "p90": None, "p99": None, "max": None}
    figures = {f"p{p}": round(percentile(lags, p), 3) for p in (50, 90, 99)}
    return {"n": len(lags), **figures, "max": round(max(lags), 3)}


def _gateway_id() -> str:
    """Unique per process: host, pid and a random suffix (a restarted pid is a new one)."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
