"""In-flight requests per gateway per backend, shared as expiring leases.

Every `period_s` each gateway writes its own counts (backend id → requests in flight) to the
hash `{prefix}:inflight:{gateway}`, replaced whole and expiring after `ttl_s`, and renews its
entry in the sorted set `{prefix}:gateways` (score: when its lease expires, unix ms). It then
reads the hashes of the other gateways whose leases are current and sums them into `remote`
(backend id → requests the other gateways have in flight there). A gateway that dies stops
renewing: its counts age out within `ttl_s`. While Redis fails, `remote` is empty (the
gateway routes on its own counts) and the loop retries with the link's backoff. Each change
of `remote` is told to `on_remote` (the app sets the pool backends' `remote_in_flight`,
which the in-flight scorer adds to its own counts).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping

from gateway.state.link import RedisLink

LocalCounts = Callable[[], Mapping[str, int]]


class InFlightLeases:
    """This gateway's in-flight counts out, the other gateways' summed counts in."""

    def __init__(
        self,
        link: RedisLink,
        prefix: str,
        gateway_id: str,
        local: LocalCounts,
        on_remote: Callable[[Mapping[str, int]], None] = lambda remote: None,
        *,
        period_s: float = 1.0,
        ttl_s: float = 3.0,
    ) -> None:
        self.link = link
        self.gateway_id = gateway_id
        self._prefix = prefix
        self._local = local
        self._on_remote = on_remote
        self.period_s = period_s
        self.ttl_ms = int(ttl_s * 1000)
        self.registry = f"{prefix}:gateways"
        self.remote: dict[str, int] = {}
        self.peers = 0  # other gateways with a current lease
        self.refreshed_at: float | None = None  # unix s of the last successful round

    def key(self, gateway_id: str) -> str:
        return f"{self._prefix}:inflight:{gateway_id}"

    async def run(self) -> None:
        """Runs until cancelled: one round every `period_s`."""
        while True:
            ok = await self.link.attempt(self._round, self.link.settings.command_timeout_s * 2)
            if ok is None:
                self._set_remote({}, 0)
                continue
            await asyncio.sleep(self.period_s)

    async def _round(self) -> bool:
        now_ms = time.time_ns() // 1_000_000
        counts = {b: n for b, n in self._local().items() if n > 0}
        own = self.key(self.gateway_id)
        async with self.link.commands.pipeline(transaction=True) as pipe:
            pipe.delete(own)
            if counts:
                pipe.hset(own, mapping=counts)  # type: ignore[arg-type]
                pipe.pexpire(own, self.ttl_ms)
            pipe.zadd(self.registry, {self.gateway_id: now_ms + self.ttl_ms})
            pipe.zremrangebyscore(self.registry, "-inf", now_ms)
            pipe.zrange(self.registry, 0, -1)
            *_, members = await pipe.execute()
        others = [m.decode() for m in members if m.decode() != self.gateway_id]
        async with self.link.commands.pipeline(transaction=False) as pipe:
            for gateway in others:
                pipe.hgetall(self.key(gateway))
            hashes = await pipe.execute() if others else []
        remote: dict[str, int] = {}
        for h in hashes:
            for backend, n in h.items():
                remote[backend.decode()] = remote.get(backend.decode(), 0) + int(n)
        self._set_remote(remote, len(others))
        self.refreshed_at = now_ms / 1000
        return True

    def _set_remote(self, remote: dict[str, int], peers: int) -> None:
        if remote != self.remote:
            self._on_remote(remote)
        self.remote, self.peers = remote, peers
