"""Request traces for the simulator: loaders, reshaping, synthetic generators, prompts.

Every format becomes a list of `TraceRequest` (arrival from the trace's start, input and
output tokens, chained prefix block ids, block size, model, session), in arrival order:

- `mooncake`: Mooncake's FAST'25 JSONL (512-token blocks)      → `sim.traces.mooncake`
- `azure`: Azure's LLM inference CSV (arrivals and lengths only) → `sim.traces.azure`
- `kvgate`: the gateway's own recordings (`kvgate serve --record`); the format is specified
  in `sim.traces.recorded`

`load_trace(path, format="auto")` detects the format. `sim.traces.transform` scales, slices
and merges traces; `sim.traces.synthetic` generates seeded ones (tenants, multi-turn
sessions, agentic tool loops); `prompt_token_ids` turns a request back into token ids.
"""

from sim.traces.azure import load_azure
from sim.traces.load import FORMATS, detect_format, load_trace
from sim.traces.mooncake import load_mooncake
from sim.traces.prompts import block_token_ids, prompt_token_ids
from sim.traces.recorded import load_recorded
from sim.traces.request import MOONCAKE_BLOCK_TOKENS, TraceFormatError, TraceRequest
from sim.traces.synthetic import agentic_loops, multi_turn_sessions, tenant_requests
from sim.traces.transform import merged, slice_count, slice_time, time_scaled

__all__ = [
    "FORMATS",
    "MOONCAKE_BLOCK_TOKENS",
    "TraceFormatError",
    "TraceRequest",
    "agentic_loops",
    "block_token_ids",
    "detect_format",
    "load_azure",
    "load_mooncake",
    "load_recorded",
    "load_trace",
    "merged",
    "multi_turn_sessions",
    "prompt_token_ids",
    "slice_count",
    "slice_time",
    "tenant_requests",
    "time_scaled",
]
