"""Type stub of the compiled span encoder (`otlp_native.pyx`); same API as `SpanEncoder`."""

from collections.abc import Callable, Iterable, Mapping

from gateway.tracing.otlp_wire import AttrValue
from gateway.tracing.spans import Outcome, RequestTrace

class NativeSpanEncoder:
    """`otlp_wire.SpanEncoder.request` compiled (see the .pyx module docstring)."""

    batch: Callable[[Iterable[bytes]], bytes]
    def __init__(self, resource: Mapping[str, AttrValue], scope: str, version: str) -> None: ...
    def request(self, trace: RequestTrace, outcome: Outcome) -> tuple[bytes, int]: ...
