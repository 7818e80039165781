"""Routing state shared between gateway replicas (config `state:`, `kvgate serve --redis`) and
between the workers of one `kvgate serve --workers N`.

Decisions never wait on the channel: the scheduler reads this process's own `PrefixIndex`, TTFT
model and per-backend counts. Each local change (a placement, a withdrawal, an eviction, a
backend forgotten, a TTFT observed) is queued without I/O (`outbox`) and carried off the request
path to the others, whose `scoring.state.mirror` makes the same change; in-flight requests and
queued prefill go as expiring load reports (`load`). The channel is Redis (`stream`, `pubsub`,
over `link`) with `state.backend: redis`, or the workers' Unix sockets (`local`); a lone gateway
with `memory` (the default) shares nothing and runs no loop. Redis down or slow: requests are
routed on local state, the state reports itself degraded, the loops reconnect with backoff.

Modules: `codec` (events ↔ entries, pure), `outbox`, `load`, `stream`, `pubsub`, `link`,
`local`, `shared` (what the app wires), `collector` (the Prometheus metrics).
"""

from gateway.state.shared import SharedState

__all__ = ["SharedState"]
