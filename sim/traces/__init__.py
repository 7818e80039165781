"""Traces the simulator makes: seeded synthetic workloads (tenants, multi-turn sessions,
agentic tool loops), reshaping (scale, slice, merge) and prompt token ids for a request.

Reading and writing trace files is `routing.traces` (the gateway records in that format).
"""

from sim.traces.prompts import block_token_ids, prompt_token_ids
from sim.traces.synthetic import agentic_loops, multi_turn_sessions, tenant_requests
from sim.traces.transform import merged, slice_count, slice_time, time_scaled

__all__ = [
    "agentic_loops",
    "block_token_ids",
    "merged",
    "multi_turn_sessions",
    "prompt_token_ids",
    "slice_count",
    "slice_time",
    "tenant_requests",
    "time_scaled",
]
