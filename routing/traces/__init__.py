"""Request traces: the record (`TraceRequest`), the files read and the format recorded.

Every format becomes a list of `TraceRequest` (arrival from the trace's start, input and
output tokens, chained prefix block ids, block size, model, session), in arrival order:
`mooncake` (Mooncake's FAST'25 JSONL, 512-token blocks), `azure` (Azure's LLM inference CSV,
arrivals and lengths only) and `kvgate` (`kvgate serve --record` files, specified in
`routing.traces.recorded`). `load_trace(path, format="auto")` detects the format.
"""

from routing.traces.azure import load_azure
from routing.traces.load import FORMATS, detect_format, load_trace
from routing.traces.mooncake import load_mooncake
from routing.traces.recorded import load_recorded
from routing.traces.request import MOONCAKE_BLOCK_TOKENS, TraceFormatError, TraceRequest

__all__ = [
    "FORMATS",
    "MOONCAKE_BLOCK_TOKENS",
    "TraceFormatError",
    "TraceRequest",
    "detect_format",
    "load_azure",
    "load_mooncake",
    "load_recorded",
    "load_trace",
]
