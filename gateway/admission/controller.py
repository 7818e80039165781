"""`AdmissionController`: the gateway's side of admission control, around the pure core.

`admit` (the front door's `acquire`, the picker's own call) runs after the request is parsed and
before it is routed: the key's rate limits (429 `requests`/`tokens`), then a place in the fleet,
at once when nobody waits and the fleet has room (`routing.admission.capacity`), else in the
`FairQueue` (no more than can reach service before their deadline) until `pump` grants it, its
deadline passes (503 `queue_timeout`; a sheddable one, of the last band, is shed) or its client
leaves. One that finds no place is shed, or displaces a heavier tenant's or a lower band's
waiting request: 429 with a `Retry-After` from the drain rate and the reference picker's
dropped-reason header. The last band never takes the `sheddable_holdback` share of the places;
in a fleet of 8 or more the last place is kept from tenants at or above the mean usage while a
lighter one is active. `give_back` (`release`) returns the place, teaches the drain rate and
corrects the key's token bucket with the answer's usage. `pump` runs on every release and every
`tick_s` (`run`): room also comes back when the engines' metrics change.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from gateway.admission.identity import Identifier, Identity
from gateway.admission.limits import check_limits
from gateway.admission.metrics import AdmissionMetrics
from gateway.asgi import Receive, Scope, disconnect_signal, run_until_disconnect
from gateway.errors import REJECTED_TTL_EXPIRED, GatewayError, QueueTimeoutError, ShedError
from gateway.request_record import RequestRecord
from gateway.usage import Usage
from health.pool import BackendPool
from routing.admission import FairQueue, KeyLimiter, ServiceRate, Ticket
from routing.admission.capacity import Capacity
from routing.admission.objectives import Objectives
from routing.config.schema import AdmissionSection

GRANT_SCOPE_KEY = "kvgate.admission"
# Places kept from tenants above their share while a lighter one is active: its next request
# then finds a place at once instead of waiting for one to come back (costs at most this many
# idle places, and only while tenants of unequal demand contend).
_RESERVE = 1
_RESERVE_FROM = 8  # places in the fleet: a smaller one keeps all of them in use
# Runs a queued request's wait; True if its client left meanwhile (then the wait is cancelled).
Watch = Callable[[Coroutine[Any, Any, None]], Awaitable[bool]]


@dataclass(slots=True)
class Grant:
    """An admitted request's place: returned by `release`."""

    identity: Identity
    tokens: int  # estimated prompt tokens taken from the key's bucket
    admitted_at: float


class AdmissionController:
    """Admits, queues or sheds inference requests; see the module docstring."""

    def __init__(
        self,
        section: AdmissionSection,
        pool: BackendPool,
        capacity: Capacity,
        clock: Callable[[], float],
        metrics: AdmissionMetrics,
        *,
        chars_per_token: float,
        tick_s: float,
        objectives: Objectives | None = None,
    ) -> None:
        self.section = section
        # Read per request, kept as plain attributes (a pydantic model's `__getattr__` makes
        # every attribute read on it the slower lookup); the section is frozen.
        self._enabled = section.enabled
        self._holdback_share = section.sheddable_holdback
        self.queue = FairQueue(len(section.bands), section.max_queue)
        self.rate = ServiceRate()
        self.limiter = KeyLimiter()
        self.admitted = 0
        self._identifier = Identifier(section, objectives)
        # The last band of several is the sheddable one; the places held back from it.
        self._sheddable = len(section.bands) - 1 if len(section.bands) > 1 else None
        self._holdback = 0
        self._pool = pool
        self._capacity = capacity
        self._clock = clock
        self._metrics = metrics
        self._chars_per_token = chars_per_token
        self._tick_s = tick_s
        self._waiters: dict[int, asyncio.Future[float]] = {}
        self._shown_empty = False  # the length gauges were last set with nobody waiting
        metrics.admitted.set_function(lambda: self.admitted)  # read at scrape, not per request

    async def acquire(
        self,
        scope: Scope,
        receive: Receive,
        headers: Mapping[str, str],
        body_bytes: int,
        rec: RequestRecord,
    ) -> bool:
        """The front door's `admit`: False if its client left meanwhile (`rec` says 499)."""
        if not self._enabled:
            return True
        watch = partial(_watch, receive, scope)  # a partial: cheaper to make than a closure
        grant = await self.admit(self._identifier.identify(scope, headers), body_bytes, watch)
        if grant is None:
            rec.client_gone = True
            return False
        scope[GRANT_SCOPE_KEY] = grant
        return True

    def identify(self, scope: Mapping[str, Any], headers: Mapping[str, str]) -> Identity:
        """The request's tenant, band and key (`gateway.admission.identity`)."""
        return self._identifier.identify(scope, headers)

    def priority(self, headers: Mapping[str, str]) -> int:
        """The priority of the InferenceObjective the request names (0: none, or unknown)."""
        return self._identifier.priority(headers)

    async def admit(
        self, who: Identity, body_bytes: int, watch: Watch | None = None
    ) -> Grant | None:
        """Wait for the request's turn: its place, or None if `watch` saw its client leave
        (without `watch`, cancelling the caller is the client leaving). Raises the 429/503
        errors of the module docstring."""
        tokens = max(1, int(body_bytes / self._chars_per_token))
        if who.key is not None:
            check_limits(self.limiter, who, tokens, self._clock(), self._metrics)
        try:
            admitted_at = self._at_once(who)  # the usual case: no coroutine to make and await
            if admitted_at is None:
                admitted_at = await self._turn(who, watch)
        except BaseException:
            self._refund(who, tokens)
            raise
        if admitted_at is None:
            self._refund(who, tokens)
            return None
        return Grant(who, tokens, admitted_at)

    def release(self, scope: Scope, rec: RequestRecord) -> None:
        """The request is done (answered, failed or abandoned): its place goes back."""
        self.give_back(scope.pop(GRANT_SCOPE_KEY, None), rec.usage)

    def give_back(self, grant: Grant | None, usage: Usage | None) -> None:
        """`grant`'s place goes back (None: it had none); `usage`, the answer's, corrects its
        key's token bucket."""
        if grant is None:
            return
        now = self._clock()
        self._finished(now - grant.admitted_at)
        if grant.identity.key is not None and usage is not None:
            used = (usage.prompt_tokens or 0) + (usage.completion_tokens or 0)
            if used:
                self.limiter.correct(grant.identity.key, grant.tokens, used, now)
        self.pump()

    async def run(self) -> None:
        """Pump every `tick_s` (deadlines, and room from fresh engine metrics); cancel to stop."""
        while True:
            await asyncio.sleep(self._tick_s)
            self.pump()

    def pump(self) -> None:
        """Expire the overdue, then grant waiting requests while the fleet has room."""
        if self._shown_empty and not self.queue.size:
            return  # nobody waits (so none is overdue) and the gauges already say so
        now = self._clock()
        for ticket in self.queue.expire(now):
            self._fail(ticket, self._expired(ticket))
        if len(self.queue):
            room = self._room()
            while (turn := self.queue.peek(now)) is not None and self._may_take(
                turn.tenant, turn.band, room, now
            ):
                self.queue.pop(now)
                self._grant(turn, now)
                room = None if room is None else room - 1
        self._metrics.set_lengths(self.queue.band_sizes())
        self._shown_empty = not self.queue.size

    def state(self) -> dict[str, Any]:
        """For the admin API: queue lengths per band, admitted requests, drain estimate."""
        return {
            "enabled": self.section.enabled,
            "queue": dict(zip(self.section.bands, self.queue.band_sizes(), strict=True)),
            "admitted": self.admitted,
            "mean_service_s": self.rate.mean_s,
        }

    def _at_once(self, who: Identity) -> float | None:
        """When the request was admitted, if nobody waits and there is room for it now;
        else None (it queues: `_turn`)."""
        now = self._clock()
        if not self.queue.size and self._may_take(who.tenant, who.band, self._room(), now):
            self.queue.started(who.tenant, now)
            self._started()
            return now
        return None

    async def _turn(self, who: Identity, watch: Watch | None) -> float | None:
        """When the request, not admitted at once, was admitted; None if its client left
        while it waited."""
        now = self._clock()
        # Queue no more than can reach service before their deadline (at least one, so the
        # fair choice of who gets the next place has someone to choose from).
        drained = self.rate.drained_within(self.section.queue_timeout_s)
        limit = None if drained is None else max(1, drained)
        timeout = self.section.queue_timeout_s
        pushed = self.queue.push(who.tenant, who.band, now, timeout, limit=limit)
        if pushed.evicted is not None:
            self._metrics.shed_by("evicted").inc()
            retry = self.rate.retry_after_s(len(self.queue))
            self._fail(pushed.evicted, ShedError(_EVICTED, retry_after_s=retry))
        ticket = pushed.ticket
        if ticket is None:
            full = limit is None or limit >= self.section.max_queue
            reason = "queue_full" if full else "wait_too_long"
            raise self._shed(reason, self.rate.retry_after_s(len(self.queue)))
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._waiters[ticket.id] = future
        self.pump()
        if future.done():
            return future.result()
        wait_turn = self._wait(ticket, future)
        if watch is None:
            await wait_turn
            return future.result()
        gone = await watch(wait_turn)
        return None if gone else future.result()

    async def _wait(self, ticket: Ticket, future: asyncio.Future[float]) -> None:
        try:
            await future
        except asyncio.CancelledError:
            self._waiters.pop(ticket.id, None)
            if self.queue.remove(ticket):
                self._metrics.cancelled.inc()
            elif future.done() and not future.cancelled() and future.exception() is None:
                self._finished(0.0)  # granted as the client left: the place goes back
                self.pump()
            raise

    def _room(self) -> int | None:
        """The fleet's room now; the places held back from the sheddable band set with it."""
        snapshots = self._pool.snapshots()
        share = self._holdback_share
        self._holdback = math.floor(share * self._capacity.size(snapshots)) if share else 0
        return self._capacity.room(snapshots, self.admitted)

    def _may_take(self, tenant: str, band: int, room: int | None, now: float) -> bool:
        """Room for one of `tenant`'s in `band`: beyond the held-back places for the sheddable
        band; in a fleet of `_RESERVE_FROM` places or more, the last `_RESERVE` only for a
        tenant that is not above its share while a lighter one is active
        (`TenantUsage.reserve_against`)."""
        if room is None:
            return True
        if room <= 0 or (band == self._sheddable and room <= self._holdback):
            return False
        if room > _RESERVE or room + self.admitted < _RESERVE_FROM:
            return True
        return not self.queue.usage.reserve_against(tenant, now)

    def _grant(self, ticket: Ticket, now: float) -> None:
        self._started()
        self._metrics.wait_by(self.section.bands[ticket.band]).observe(now - ticket.enqueued)
        future = self._waiters.pop(ticket.id, None)
        if future is not None and not future.done():
            future.set_result(now)
        else:  # nobody waits for it any more
            self._finished(0.0)

    def _fail(self, ticket: Ticket, error: GatewayError) -> None:
        future = self._waiters.pop(ticket.id, None)
        if future is not None and not future.done():
            future.set_exception(error)

    def _started(self) -> None:
        self.admitted += 1
        self.rate.started()
        self._capacity.took()

    def _finished(self, duration_s: float) -> None:
        self.admitted -= 1
        self._capacity.gave_back()
        self.rate.finished(duration_s)

    def _expired(self, ticket: Ticket) -> GatewayError:
        """The answer to a request whose deadline passed in the queue: a sheddable one is shed
        (429, the reference's TTL reason), another times out (503)."""
        wait = self.rate.retry_after_s(len(self.queue))
        if ticket.band == self._sheddable:
            self._metrics.shed_by("sheddable_timeout").inc()
            message = "a sheddable request waited in the queue to its deadline; retry later"
            return ShedError(message, retry_after_s=wait, reason=REJECTED_TTL_EXPIRED)
        self._metrics.shed_by("timeout").inc()
        return QueueTimeoutError("request timed out in the queue", retry_after_s=wait)

    def _shed(self, reason: str, retry_after_s: int) -> ShedError:
        self._metrics.shed_by(reason).inc()
        return ShedError(
            "the gateway is at capacity; retry after the time in the Retry-After header",
            retry_after_s=retry_after_s,
        )

    def _refund(self, who: Identity, tokens: int) -> None:
        if who.key is not None:
            self.limiter.refund(who.key, tokens, self._clock())


def _watch(receive: Receive, scope: Scope, turn: Coroutine[Any, Any, None]) -> Awaitable[bool]:
    """A queued request's wait, until its client leaves (`Watch`)."""
    return run_until_disconnect(turn, receive, signal=disconnect_signal(scope))


_EVICTED = (
    "the request was displaced from the queue by requests of higher priority or of a lighter "
    "tenant; retry after the time in the Retry-After header"
)
