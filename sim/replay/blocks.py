"""A trace request's prompt as the engines hash it and as the gateway's prefix index keys it.

A trace names its prompt by chained block ids (`TraceRequest.hash_ids`, blocks of
`block_tokens` tokens; Mooncake: 512): an equal id at position i means an identical prefix of
i + 1 blocks. Both derived views keep that meaning:

- **Engine blocks** (`engine_block_hashes`): one hash per full engine block. When
  `block_tokens` is m engine blocks (512 = 32 × 16), trace id h gives engine blocks h·m + j,
  j < m, with no hashing; otherwise engine block b gets hash((id of the trace block holding its
  last token, b)). Blocks past the ids (Azure traces have none) are the request's own:
  hash((−1 − salt, b)).
- **Routing blocks** (`routing_prefix_hashes`): the trace's blocks regrouped on the gateway's
  growing block schedule (`scoring.state.prefix_hash`), routing block g spanning base blocks
  [lo, hi) named by base block hi − 1's id, so `covered_chars(m) / chars_per_token` is exactly
  the tokens the first m cover; the simulated index works in trace blocks (capacities converted).
"""

from __future__ import annotations

from routing.traces import TraceRequest
from scoring.state.prefix_hash import GROUP


def engine_block_hashes(request: TraceRequest, block_size: int, salt: int) -> list[int]:
    """Hashes of the prompt's `input_tokens // block_size` full engine blocks.

    `salt` must be unique per request: it keys the blocks the trace does not name.
    """
    n_full = request.input_tokens // block_size
    ids = request.hash_ids
    trace_block = request.block_tokens
    out: list[int] = []
    if trace_block % block_size == 0:
        per = trace_block // block_size
        used = min(len(ids), -(-n_full // per))
        i = 0
        # New trace blocks get consecutive ids, so a prompt is a few runs of them: one
        # range of engine hashes per run (the same hashes as one range per id).
        while i < used:
            first = ids[i]
            j = i + 1
            while j < used and ids[j] == first + (j - i):
                j += 1
            out += range(first * per, (first + j - i) * per)
            i = j
        del out[n_full:]
    else:
        for b in range(n_full):
            t = ((b + 1) * block_size - 1) // trace_block
            if t >= len(ids):
                break
            out.append(hash((ids[t], b)))
    own = -1 - salt
    out.extend(hash((own, b)) for b in range(len(out), n_full))
    return out


def routing_prefix_hashes(request: TraceRequest) -> tuple[int, ...]:
    """The ids of the prompt's full trace blocks, regrouped on the gateway's block schedule."""
    ids = request.hash_ids
    full = min(len(ids), request.input_tokens // request.block_tokens)
    if full <= GROUP:
        return ids[:full]
    out: list[int] = []
    end, size = 0, 1
    while True:
        for _ in range(GROUP):
            end += size
            if end > full:
                return tuple(out)
            out.append(ids[end - 1])
        size *= 2
