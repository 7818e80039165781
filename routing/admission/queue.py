"""`FairQueue`: a bounded wait queue with priority bands, per-tenant fairness and deadlines.

A tenant's load is its recent admissions (`usage`, a `TenantUsage` fed by `pop` and by
`started` for requests admitted without queueing) plus its requests waiting: max-min fairness
over admission rates, so a tenant asking for less than an equal share is served first.

`pop`: strict priority between bands (band 0 first); within a band the backlogged tenant of
least usage, ties by least virtual service (each pop adds the request's `cost`; a tenant newly
backlogged starts at the band's virtual time), then that tenant's oldest request. `push` when
`limit` requests wait (`max_queue`, or fewer when fewer can meet their deadline): the victim is
the newest request of the most loaded tenant in the lowest non-empty band; an arrival of a
higher band evicts it, one of that band only if its own tenant's load is smaller, else the
arrival is shed; an arrival below every waiting band is shed. So a flooding tenant pays with
its own waiting requests, as fq_codel drops from the fattest flow. `expire(now)` removes the
requests past their deadline (a heap, stale entries skipped lazily).
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter, deque
from dataclasses import dataclass, field
from operator import attrgetter

from routing.admission.usage import TenantUsage


@dataclass(slots=True, eq=False)
class Ticket:
    """A request waiting in the queue (identity matters: each one is its own)."""

    id: int
    tenant: str
    band: int  # 0 is the highest priority
    cost: float
    enqueued: float
    deadline: float
    queued: bool = True


@dataclass(frozen=True, slots=True)
class Push:
    """What `push` did: the queued ticket (None: the arrival was shed) and whom it evicted."""

    ticket: Ticket | None
    evicted: Ticket | None = None


@dataclass(slots=True)
class _Band:
    waiting: dict[str, deque[Ticket]] = field(default_factory=dict)  # backlogged tenants
    service: dict[str, float] = field(default_factory=dict)  # their virtual service
    vtime: float = 0.0
    size: int = 0


_size = attrgetter("size")


class FairQueue:
    """Requests waiting for capacity, `bands` priority levels, at most `max_queue` of them."""

    def __init__(self, bands: int, max_queue: int, half_life_s: float = 5.0) -> None:
        """`half_life_s`: how fast past admissions stop counting towards a tenant's load."""
        if bands < 1:
            raise ValueError("bands must be >= 1")
        self.max_queue = max_queue
        self.usage = TenantUsage(half_life_s)
        self._bands = [_Band() for _ in range(bands)]
        self._waiting: Counter[str] = Counter()  # per tenant, over all bands
        self._deadlines: list[tuple[float, int, Ticket]] = []
        self._ids = itertools.count()
        self.size = 0  # requests waiting (`len()`); read in place on the hot path

    def __len__(self) -> int:
        return self.size

    def band_sizes(self) -> list[int]:
        return list(map(_size, self._bands))  # no comprehension's function object per call

    def load(self, tenant: str, now: float) -> float:
        """The tenant's recent admissions (decayed) plus its requests waiting."""
        return self.usage.get(tenant, now) + self._waiting[tenant]

    def push(
        self,
        tenant: str,
        band: int,
        now: float,
        timeout_s: float,
        *,
        cost: float = 1.0,
        limit: int | None = None,
    ) -> Push:
        """Queue a request, or shed it (`Push.ticket` None) when `limit` (at most
        `max_queue`) requests wait and the arrival is the one to go; `Push.evicted` is a
        waiting request it displaced."""
        bound = self.max_queue if limit is None else min(limit, self.max_queue)
        evicted = None
        if self.size >= bound:
            victim = self._victim(tenant, band, now)
            if victim is None:
                return Push(None)
            self._take(victim)
            evicted = victim
        ticket = Ticket(next(self._ids), tenant, band, cost, now, now + timeout_s)
        b = self._bands[band]
        queue = b.waiting.get(tenant)
        if queue is None:
            queue = b.waiting[tenant] = deque()
            b.service[tenant] = b.vtime  # joins at the band's virtual time
        queue.append(ticket)
        b.size += 1
        self.size += 1
        self._waiting[tenant] += 1
        heapq.heappush(self._deadlines, (ticket.deadline, ticket.id, ticket))
        return Push(ticket, evicted)

    def peek(self, now: float) -> Ticket | None:
        """The request `pop` would return, left in the queue."""
        for b in self._bands:
            if b.size:
                tenant = min(b.waiting, key=lambda t: (self.usage.get(t, now), b.service[t]))
                return b.waiting[tenant][0]
        return None

    def pop(self, now: float) -> Ticket | None:
        """The next request to admit, taken out of the queue and counted in usage."""
        ticket = self.peek(now)
        if ticket is None:
            return None
        b = self._bands[ticket.band]
        b.vtime = b.service[ticket.tenant]
        b.service[ticket.tenant] += ticket.cost
        self._take(ticket)
        self.usage.add(ticket.tenant, now)
        return ticket

    def started(self, tenant: str, now: float) -> None:
        """A request of `tenant` was admitted without waiting."""
        self.usage.add(tenant, now)

    def remove(self, ticket: Ticket) -> bool:
        """Take a waiting request out (its client left); False if it no longer waits."""
        if not ticket.queued:
            return False
        self._take(ticket)
        return True

    def expire(self, now: float) -> list[Ticket]:
        """Remove and return the requests whose deadline is before `now`."""
        expired = []
        heap = self._deadlines
        while heap and heap[0][0] < now:
            _, _, ticket = heapq.heappop(heap)
            if ticket.queued:
                self._take(ticket)
                expired.append(ticket)
        return expired

    def _victim(self, tenant: str, band: int, now: float) -> Ticket | None:
        lowest = max((i for i, b in enumerate(self._bands) if b.size), default=None)
        if lowest is None or lowest < band:
            return None
        b = self._bands[lowest]
        heaviest = max(b.waiting, key=lambda t: self.load(t, now))
        if lowest == band and self.load(tenant, now) >= self.load(heaviest, now):
            return None  # the arrival's tenant is (or ties) the most loaded: it pays
        return b.waiting[heaviest][-1]

    def _take(self, ticket: Ticket) -> None:
        b = self._bands[ticket.band]
        queue = b.waiting[ticket.tenant]
        if queue[0] is ticket:
            queue.popleft()
        elif queue[-1] is ticket:
            queue.pop()
        else:
            queue.remove(ticket)
        if not queue:
            del b.waiting[ticket.tenant]
            del b.service[ticket.tenant]
        ticket.queued = False
        b.size -= 1
        self.size -= 1
        self._waiting[ticket.tenant] -= 1
        if not self._waiting[ticket.tenant]:
            del self._waiting[ticket.tenant]
        if len(self._deadlines) > 2 * self.size + 64:  # drop the stale entries now and then
            live = [e for e in self._deadlines if e[2].queued]
            heapq.heapify(live)
            self._deadlines = live
