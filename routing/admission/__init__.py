"""Admission control, pure and synchronous: who waits, who goes next, who is turned away.

- `queue`: a bounded queue with strict priority between bands and fair sharing between
  tenants within a band, per-request deadlines and eviction of the heaviest low band.
- `service`: how fast the queue drains (Little's law over the requests in service), for
  the wait a new arrival can expect and an honest `Retry-After`.
- `capacity`: whether the fleet takes one more request now (a per-backend in-flight cap, or
  the engines' own saturation as the `saturation-filter` reads it).
- `usage`: each tenant's recent admissions, the measure fairness works on.
- `rate_limit`: requests and tokens per minute per key, as token buckets.

No clock is read here (every call takes `now`) and nothing awaits, so the gateway drives it
in wall-clock time and the simulator could in virtual time.
"""

from routing.admission.capacity import InFlightCap, SaturationBudget
from routing.admission.queue import FairQueue, Push, Ticket
from routing.admission.rate_limit import KeyLimiter, LimitState, TokenBucket
from routing.admission.service import ServiceRate
from routing.admission.usage import TenantUsage

__all__ = [
    "FairQueue",
    "InFlightCap",
    "KeyLimiter",
    "LimitState",
    "Push",
    "SaturationBudget",
    "ServiceRate",
    "TenantUsage",
    "Ticket",
    "TokenBucket",
]
