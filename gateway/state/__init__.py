"""Routing state shared between gateway replicas (config `state:`, `kvgate serve --redis`).

Decisions never wait on the shared store: the scheduler keeps reading this process's own
`PrefixIndex`. With `state.backend: redis`, each local dispatch's placement (backend id and
the request's prefix block hashes) is queued without I/O and appended, in batches and off the
request path, to a Redis stream per namespace and pool; a background loop reads the other
gateways' placements from that stream and records them into the local index, so every
replica learns every replica's decisions (`placements`). Redis down or slow: requests are
routed on local state, the state reports itself degraded, and the loops reconnect with
backoff (`link`). With `memory` (the default) nothing is shared and nothing changes.

Modules: `codec` (stream entries ↔ placements, pure), `link` (connection, up/down, backoff),
`placements` (the publish and apply loops), `shared` (what the app wires: a no-op for
memory), `collector` (the Prometheus metrics).
"""

from gateway.state.shared import SharedState, build_shared_state

__all__ = ["SharedState", "build_shared_state"]
