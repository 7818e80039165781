"""`kvgate serve --workers N`: N gateway processes on one port, routing as one.

The `master` forks N workers; each is a whole gateway (its own event loop, pool, health checks,
prefix index) with its own listening socket on the shared port (`listen`: SO_REUSEPORT, the
kernel spreads the connections). Their routing state is shared through Redis with
`state.backend: redis`, else over their own channel (`siblings`, Unix sockets in a private
directory; `gateway.state.local`), and each worker's own state stays the synchronous source of
its decisions. `/metrics` on any worker is the whole gateway's (`metrics`), and an admin change
made through one worker is repeated on the others (`peers`). Why: docs/decisions/0016-workers.md.
"""
