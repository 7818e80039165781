"""Data-parallel ranks as routing targets: their ids, the names engines read, KV-event endpoints.

An engine of `dp_size` N > 1 behind one URL is N targets `ID@0` .. `ID@N-1`, each with its own
KV cache and queue; the gateway names the chosen rank to the engine (vLLM: header
`X-data-parallel-rank`; SGLang: body field `routed_dp_rank`, older `data_parallel_rank`).
Each rank publishes its KV-cache events on the engine's endpoint port + rank (vLLM's and
SGLang's `offset_endpoint_port`), its replay socket likewise.
"""

from __future__ import annotations

RANK_HEADER = "x-data-parallel-rank"  # vLLM's (matched without regard to case)
PREFILL_RANK_FIELD = "disagg_prefill_dp_rank"  # SGLang P/D: P's rank, told to D


def rank_id(backend_id: str, rank: int) -> str:
    return f"{backend_id}@{rank}"


def offset_endpoint(endpoint: str, rank: int) -> str:
    """A ZMQ endpoint with its port moved up by `rank` (`tcp://HOST:PORT`); other transports
    get vLLM's `_dp<rank>` suffix. Rank 0 is the endpoint itself."""
    if rank == 0:
        return endpoint
    if endpoint.startswith("tcp://"):
        host, sep, port = endpoint.rpartition(":")
        if sep and port.isdigit():
            return f"{host}:{int(port) + rank}"
    return f"{endpoint}_dp{rank}"
