"""Type stub of the compiled request-path tracing (`otlp_native.pyx`): the span encoder, with
`SpanEncoder`'s API, and the tracer, with `spans.Tracer`'s. The traces it starts are
`NativeTrace`s, which have `RequestTrace`'s fields and methods (the tests compare them):
typed here as `RequestTrace`, as the gateway uses them."""

import random
from collections.abc import Callable, Iterable, Mapping

from gateway.tracing.otlp_wire import AttrValue
from gateway.tracing.sampling import Bounds
from gateway.tracing.spans import Outcome, RequestTrace, Sample

class NativeSpanEncoder:
    """`otlp_wire.SpanEncoder.request` compiled (see the .pyx module docstring)."""

    batch: Callable[[Iterable[bytes]], bytes]
    def __init__(self, resource: Mapping[str, AttrValue], scope: str, version: str) -> None: ...
    def request(self, trace: RequestTrace, outcome: Outcome) -> tuple[bytes, int]: ...

class NativeTracer:
    """`spans.Tracer` compiled."""

    def __init__(
        self,
        sample: Bounds | Sample,
        sink: Callable[[RequestTrace, Outcome], None],
        ids: random.Random | None = None,
    ) -> None: ...
    def start(
        self, method: str, path: str, parent_header: str | None, state_header: str | None
    ) -> RequestTrace: ...
    def finish(self, trace: RequestTrace, outcome: Outcome) -> None: ...
