"""The sampling decision for a request's trace, made without the SDK on the request path.

The OpenTelemetry SDK's standard samplers (`OTEL_TRACES_SAMPLER`: `always_on`, `always_off`,
`traceidratio`, `parentbased_always_on`, `parentbased_always_off`, `parentbased_traceidratio`)
all decide by `TraceIdRatioBased`'s rule: sample when the trace id's low 64 bits are below a
bound (`round(rate * 2**64)`; 0 never samples, 2**64 always). A parent-based sampler picks that
bound by the caller's `traceparent`: its root sampler's with no parent, else the one for a
sampled or an unsampled remote parent. So `setup` reads the bounds off the sampler the SDK built
from the environment once (`setup.static_bounds`), and the request path compares two integers
(`Bounds.sampled`). A sampler of another kind is still asked per request (`Tracer` takes either).
Why: docs/decisions/0020-tracing-request-path.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.tracing.context import SAMPLED, RemoteParent

ALWAYS = 1 << 64  # a bound every trace id's low 64 bits are below
NEVER = 0
LOW_64 = ALWAYS - 1


@dataclass(frozen=True, slots=True)
class Bounds:
    """A sampler as three bounds on the trace id's low 64 bits (see the module doc)."""

    root: int  # no parent (or an invalid `traceparent`, which is ignored)
    parent_sampled: int  # the caller's `traceparent` has the sampled flag
    parent_unsampled: int  # ... and does not

    @classmethod
    def same(cls, bound: int) -> Bounds:
        """A sampler that ignores the parent (`always_on`, `always_off`, `traceidratio`)."""
        return cls(bound, bound, bound)

    @classmethod
    def parent_based(cls, root: int) -> Bounds:
        """`ParentBased(root)` with its defaults: the caller's decision is followed."""
        return cls(root, ALWAYS, NEVER)

    def sampled(self, trace_id: int, parent: RemoteParent | None) -> bool:
        if parent is None:
            bound = self.root
        elif parent.flags & SAMPLED:
            bound = self.parent_sampled
        else:
            bound = self.parent_unsampled
        return trace_id & LOW_64 < bound


def ratio_bound(rate: float) -> int:
    """`TraceIdRatioBased`'s bound for `rate` (in [0, 1])."""
    return round(rate * ALWAYS)
