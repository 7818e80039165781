"""The chosen data-parallel rank, named to its engine on each attempt (`health.ranks`).

vLLM: header `X-data-parallel-rank: R` (a client's own is replaced); SGLang: the body's
`routed_dp_rank` (or the backend's `dp_rank_field`, `data_parallel_rank` for older servers)
set to R, the body rewritten only then. A backend without a rank gets the request unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from health.pool import Backend
from health.ranks import RANK_HEADER

Headers = Sequence[tuple[bytes, bytes]]
_HEADER = RANK_HEADER.encode()


def rank_header(backend: Backend) -> tuple[bytes, bytes] | None:
    """The header naming `backend`'s rank to a vLLM engine, if it is a rank of one."""
    rank = backend.spec.rank
    if rank is None or backend.spec.engine == "sglang":
        return None
    return (_HEADER, str(rank).encode())


def rank_body(backend: Backend, body: bytes) -> bytes:
    """The body naming `backend`'s rank to an SGLang engine (else `body` itself)."""
    rank = backend.spec.rank
    if rank is None or backend.spec.engine != "sglang":
        return body
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body  # not JSON: the engine refuses it in its own words
    if not isinstance(data, dict):
        return body
    data[backend.spec.dp_rank_field] = rank
    return orjson.dumps(data)


def for_rank(
    backend: Backend, headers: Headers, body: bytes
) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """`headers` and `body` as `backend` gets them: its rank named, if it has one."""
    header = rank_header(backend)
    if header is None:
        return list(headers), rank_body(backend, body)
    kept = [(k, v) for k, v in headers if k.lower() != _HEADER]
    kept.append(header)
    return kept, body
