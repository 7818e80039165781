"""Routing state shared between gateway replicas (config `state:`, `kvgate serve --redis`) and
between the workers of one `kvgate serve --workers N`.

Decisions never wait on the shared channel: the scheduler keeps reading this process's own
`PrefixIndex`, TTFT model and per-backend counts. Each local change to them (a dispatch's
placement, a failed attempt's withdrawal, an eviction the engine's answer revealed, a backend
forgotten when it went down, a TTFT observed) is queued without I/O (`outbox`) and carried
off the request path to the other gateways, whose `mirror` makes the same change to their
own state; in-flight requests and queued prefill tokens go as expiring load reports
(`load`). The channel is a Redis stream plus a pub/sub channel (`stream`, `pubsub`, over
`link`: connection, up/down, backoff) with `state.backend: redis`, or the workers' own
Unix sockets (`local`) between the workers of one machine. Redis down or slow: requests are
routed on local state, the state reports itself degraded, and the loops reconnect with
backoff. A lone gateway with `memory` (the default) shares nothing and runs no loop.

Modules: `codec` (events ↔ entries, pure), `outbox`, `mirror`, `load`, `stream`, `pubsub`,
`link`, `local`, `shared` (what the app wires), `collector` (the Prometheus metrics).
"""

from gateway.state.shared import SharedState

__all__ = ["SharedState"]
