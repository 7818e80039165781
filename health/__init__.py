"""Backend health: probe and passive-failure state machines, the backend pool, pollers.

The pool turns mutable per-backend runtime state into immutable `routing.EndpointSnapshot`s;
the scheduler only ever sees those snapshots.
"""
