"""A prefill replica's handoffs: prefills whose KV blocks it holds until a decode engine takes them.

A handoff is keyed by what D names it by (vLLM: P's engine request id, `remote_request_id`;
SGLang: the `bootstrap_room`). Its life: opened (SGLang: by whichever of P's request and D's
join comes first), joined by D (SGLang), `prefilled` (P's engine request finished with
`hold=True`: its blocks stay referenced), then either `transfer`red to D (P keeps the blocks
for the transfer's modelled time, then releases them) or expired: an unread handoff, or an
SGLang room D never joined, is dropped `lease_s` after it started waiting, its blocks freed.
Released blocks stay in P's prefix cache, as a finished request's do.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from sim.emulator.replica import Replica
from sim.engine.kv_transfer import transfer_time_s

log = logging.getLogger(__name__)


@dataclass(slots=True, eq=False)
class Handoff:
    """One prefill's KV on its way to a decode engine (see the module docstring)."""

    key: str
    request_id: str | None = None  # P's engine request that holds the blocks, once prefilled
    prompt_tokens: int = 0
    block_ids: tuple[int, ...] = ()
    outcome: str = ""  # "" (pending), "transferred", "expired" or "failed"
    joined: asyncio.Event = field(default_factory=asyncio.Event)  # D asked, or given up
    ready: asyncio.Event = field(default_factory=asyncio.Event)  # prefilled, or given up
    done: asyncio.Event = field(default_factory=asyncio.Event)  # transferred, or given up
    taken: bool = False  # a transfer started
    lease: asyncio.TimerHandle | None = None


class Handoffs:
    """The handoffs of one prefill replica, with their leases (timers on the event loop)."""

    def __init__(self, replica: Replica, lease_s: float) -> None:
        self.replica = replica
        self.lease_s = lease_s
        self._open: dict[str, Handoff] = {}

    def get(self, key: str) -> Handoff | None:
        return self._open.get(key)

    def open(self, key: str) -> Handoff:
        """The handoff named `key`, made (with a lease until D joins or P prefills) if new."""
        handoff = self._open.get(key)
        if handoff is None:
            handoff = self._open[key] = Handoff(key)
            self._start_lease(handoff)
        return handoff

    def join(self, handoff: Handoff) -> None:
        """D has asked for it: no lease while P prefills (the room is bootstrapped)."""
        handoff.joined.set()
        if not handoff.ready.is_set():
            self._stop_lease(handoff)

    def prefilled(self, handoff: Handoff, request_id: str, prompt_tokens: int) -> None:
        """P's request finished holding its blocks: they wait for D, under a lease."""
        if handoff.outcome:  # given up while P prefilled
            self.replica.release(request_id)
            return
        handoff.request_id = request_id
        handoff.prompt_tokens = prompt_tokens
        handoff.block_ids = self.replica.engine.held_blocks(request_id)
        handoff.ready.set()
        self._start_lease(handoff)

    async def transfer(self, handoff: Handoff, blocks: int) -> float:
        """Move `blocks` blocks to D: hold them the transfer's modelled time, then release;
        returns that time (modelled seconds)."""
        handoff.taken = True
        self._stop_lease(handoff)
        profile = self.replica.profile
        seconds = transfer_time_s(profile.transfer, blocks, profile.config.block_size)
        try:
            await asyncio.sleep(seconds / self.replica.speedup)
        finally:
            self._close(handoff, "transferred")
        return seconds

    def fail(self, handoff: Handoff) -> None:
        """P gave up on it (its client left, or D never came): free whatever it holds."""
        self._close(handoff, "failed")

    def held(self) -> list[dict[str, object]]:
        """The prefilled handoffs waiting for D, for `GET /kvgate/pd/handoffs`."""
        return [
            {"key": h.key, "prompt_tokens": h.prompt_tokens, "blocks": len(h.block_ids)}
            for h in self._open.values()
            if h.ready.is_set() and not h.outcome
        ]

    def pending(self) -> list[str]:
        """The handoffs not prefilled yet (SGLang rooms waiting for P or for D)."""
        return [h.key for h in self._open.values() if not h.ready.is_set()]

    def close_all(self) -> None:
        for handoff in list(self._open.values()):
            self._close(handoff, "failed")

    def _expire(self, handoff: Handoff) -> None:
        handoff.lease = None
        if handoff.taken or handoff.outcome:
            return
        if handoff.ready.is_set():
            log.info(
                "handoff %s expired unread after %.1f s: %d KV blocks freed",
                handoff.key,
                self.lease_s,
                len(handoff.block_ids),
            )
        else:
            log.warning("room %s: no decode engine joined in %.1f s", handoff.key, self.lease_s)
        self._close(handoff, "expired")

    def _close(self, handoff: Handoff, outcome: str) -> None:
        self._stop_lease(handoff)
        if not handoff.outcome:
            handoff.outcome = outcome
        if handoff.request_id is not None:
            self.replica.release(handoff.request_id)
        if self._open.get(handoff.key) is handoff:
            del self._open[handoff.key]
        handoff.joined.set()  # nothing more to wait for, on any side
        handoff.ready.set()
        handoff.done.set()

    def _start_lease(self, handoff: Handoff) -> None:
        self._stop_lease(handoff)
        loop = asyncio.get_running_loop()
        handoff.lease = loop.call_later(self.lease_s / self.replica.speedup, self._expire, handoff)

    @staticmethod
    def _stop_lease(handoff: Handoff) -> None:
        if handoff.lease is not None:
            handoff.lease.cancel()
            handoff.lease = None
