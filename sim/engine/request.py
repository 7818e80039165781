"""Per-request state of the engine model, as vLLM v1's `Request` tracks it.

vLLM schedules every request the same way: it has `num_tokens` known tokens (prompt plus
the outputs sampled so far) and `num_computed_tokens` whose KV is in the cache; each step
gives it some of the difference. A step that brings `num_computed_tokens` up to `num_tokens`
samples one new token. The last sampled token is never computed: the request finishes.

The model knows the outputs in advance (`output`), like a request with `ignore_eos` and
`max_tokens = len(output)`; `num_generated` says how many have been emitted. P/D: the KV of
the first `external_tokens` prompt tokens arrives from elsewhere; `hold` keeps the blocks.

A *hashed* request (`EngineRequest.hashed`) has no token ids at all: its full blocks come as
hashes, so its cost is per block, not per token. Its outputs are `GENERATED_TOKEN_ID`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.engine.block_runs import Piece
from sim.engine.kv_cache import chain_block_hashes

GENERATED_TOKEN_ID = 0
"""The token id a hashed request emits (its outputs have no ids of their own)."""


@dataclass(slots=True, eq=False)
class EngineRequest:
    """Mutable state of one request inside the model (not a value type: compared by id)."""

    request_id: str
    tokens: tuple[int, ...]  # prompt followed by every output token
    prompt_len: int
    output_len: int
    # Known tokens, vLLM's num_tokens: the prompt and the outputs emitted so far.
    num_tokens: int = field(init=False, default=0)
    num_generated: int = 0  # output tokens emitted so far
    num_computed: int = 0  # tokens whose KV is computed (or served from the cache)
    prefilling: bool = False  # admitted and not yet through its (re)computed prefix
    num_preemptions: int = 0
    blocks: list[int] = field(default_factory=list)
    runs: list[Piece] = field(default_factory=list)  # the cut of `blocks` into pieces
    num_committed_blocks: int = 0  # leading blocks entered in the prefix cache
    external_tokens: int = 0  # leading prompt tokens whose KV arrives from outside (once)
    hold: bool = False  # keep the blocks when finished (a P/D prefill awaiting its transfer)
    # (local compute, local cache hit, external) prompt tokens, fixed at the first admission.
    prompt_sources: tuple[int, int, int] | None = None
    _hashes: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.num_tokens = self.prompt_len + self.num_generated

    @classmethod
    def hashed(
        cls, request_id: str, prompt_len: int, output_len: int, block_hashes: list[int]
    ) -> EngineRequest:
        """A request known by the hashes of its full blocks (prompt and output) only."""
        return cls(request_id, (), prompt_len, output_len, _hashes=block_hashes)

    def output_token(self, index: int) -> int:
        """The id of output token `index`."""
        return self.tokens[self.prompt_len + index] if self.tokens else GENERATED_TOKEN_ID

    def emit(self) -> int:
        """Record the next output token as sampled; returns its output index."""
        index = self.num_generated
        self.num_generated = index + 1
        self.num_tokens += 1
        self.prefilling = False
        return index

    def block_hashes(self, block_size: int) -> list[int]:
        """Chained hashes of every full block of `tokens`, computed once per request.

        The outputs are known in advance, so their blocks are hashed up front too; a block
        is only entered in the prefix cache once its tokens exist (see the scheduler).
        """
        if not self._hashes and len(self.tokens) >= block_size:
            self._hashes = chain_block_hashes(self.tokens, block_size)
        return self._hashes
