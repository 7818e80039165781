"""Values of the engine model: configuration, step-time coefficients, profiles, step results.

A profile also carries its API server's cost (`FrontEnd`); the step time is (`StepFeatures`):

    t = overhead_s
      + prefill_token_s · P     P: uncached prompt tokens computed in the step
      + attention_s     · A     A: Σ over prefill chunks of chunk_len × context_len_after_chunk
      + decode_seq_s    · D     D: sequences decoding one token in the step
      + kv_read_token_s · K     K: Σ context length (KV tokens read) of the decoding sequences
      + context_attention_s · C C: Σ over prefill chunks of chunk_len × context_len_before_chunk
      + prefill_seq_s   · S     S: prefill chunks in the step (sequences prefilling)

A counts each (new, context) token pair once, as if each token attended to the whole chunk.
`context_attention_s` and `prefill_seq_s` are 0 unless a profile sets them (built-in ones do
not): docs/decisions/0019-calibration-context-attention.md, 0024-calibration-burst-terms.md.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Capacity and scheduler limits, named as vLLM names them."""

    block_size: int = 16
    num_blocks: int = 4096
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int = 32768
    enable_prefix_caching: bool = True


@dataclass(frozen=True, slots=True)
class StepFeatures:
    prefill_tokens: int = 0
    attention_pairs: int = 0
    decode_seqs: int = 0
    kv_tokens_read: int = 0
    context_pairs: int = 0
    prefill_seqs: int = 0


_NO_FEATURES = StepFeatures()


@dataclass(frozen=True, slots=True)
class StepTimeCoefficients:
    """Seconds per unit of each step feature (see the module docstring)."""

    overhead_s: float
    prefill_token_s: float
    attention_s: float
    decode_seq_s: float
    kv_read_token_s: float
    context_attention_s: float = 0.0
    prefill_seq_s: float = 0.0

    def step_time(self, f: StepFeatures) -> float:
        return (
            self.overhead_s
            + self.prefill_token_s * f.prefill_tokens
            + self.attention_s * f.attention_pairs
            + self.decode_seq_s * f.decode_seqs
            + self.kv_read_token_s * f.kv_tokens_read
            + self.context_attention_s * f.context_pairs
            + self.prefill_seq_s * f.prefill_seqs
        )


@dataclass(frozen=True, slots=True)
class FrontEnd:
    """The engine's API server, between the gateway and the engine's steps.

    Each request takes `frontend_s` of serial work (HTTP parsing, input processing; one queue
    per engine, first come first served) before the engine sees it, and its first token
    reaches the gateway `request_overhead_s` after the step that made it ends (HTTP, the
    first chunk). Request i dispatched at d_i reaches the engine at
        a_i = max(d_i, a_{i-1}) + frontend_s,
    and its TTFT is first_token_i − arrival_i + request_overhead_s. Zero: a bare engine.
    """

    request_overhead_s: float = 0.0
    frontend_s: float = 0.0


@dataclass(frozen=True, slots=True)
class KVTransferLink:
    """The link KV blocks cross between a prefill and a decode engine (disaggregated P/D).

    Moving n blocks of `block_size` tokens takes
        latency_s + n · block_size · bytes_per_token / bandwidth_bytes_s
    (`sim.engine.kv_transfer.transfer_time_s`). Defaults: an RDMA-class link (25 GB/s,
    50 µs per transfer) carrying Llama 3 8B's bf16 KV: 2 (K, V) × 32 layers × 8 KV heads ×
    128 dims × 2 bytes = 131,072 bytes a token (2 MiB a block of 16).
    """

    bandwidth_bytes_s: float = 25e9
    latency_s: float = 50e-6
    bytes_per_token: int = 131072


@dataclass(frozen=True, slots=True)
class EngineProfile:
    """A named hardware/model profile: capacity, timing, API server cost, and where the
    numbers come from."""

    name: str
    description: str
    source: str
    config: EngineConfig
    timing: StepTimeCoefficients
    frontend: FrontEnd = FrontEnd()
    transfer: KVTransferLink = KVTransferLink()


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """One token produced for one request at the end of a step."""

    request_id: str
    index: int  # 0-based output position; index 0 is the first token (end of prefill)
    token_id: int
    finished: bool


@dataclass(frozen=True, slots=True)
class Admission:
    """A request scheduled for the first time (or again after preemption) in a step."""

    request_id: str
    prompt_tokens: int
    cached_tokens: int  # prompt tokens served from the prefix cache
    resumed: bool  # True when re-admitted after a preemption
    external_tokens: int = 0  # tokens whose KV arrived from another engine, not computed


@dataclass(frozen=True, slots=True)
class StepResult:
    duration_s: float
    features: StepFeatures
    tokens: tuple[TokenEvent, ...] = ()
    admitted: tuple[Admission, ...] = ()
    preempted: tuple[str, ...] = ()

    @property
    def idle(self) -> bool:
        """Nothing ran: no work, or the waiting requests wait for held blocks."""
        return not self.preempted and self.features == _NO_FEATURES


@dataclass(frozen=True, slots=True)
class EngineStats:
    """Counters and gauges as vLLM exports them (prefix counters in tokens)."""

    running: int
    waiting: int
    kv_usage: float  # 1 − free blocks / num_blocks; cached blocks with no user count as free
    block_size: int
    num_blocks: int
    prefix_queries: int
    prefix_hits: int
    preemptions: int
    prompt_tokens: int
    generation_tokens: int
    # Lookups of requests re-admitted after preemption: vLLM keeps them out of the
    # prefix_cache_* counters (PrefixCacheStats.preempted_queries / preempted_hits).
    preempted_prefix_queries: int = 0
    preempted_prefix_hits: int = 0
    # vllm:prompt_tokens_by_source: each prompt's tokens, counted at its first token, by
    # where their KV came from (they sum to prompt_tokens).
    prompt_tokens_local_compute: int = 0
    prompt_tokens_local_cache_hit: int = 0
    prompt_tokens_external: int = 0  # source="external_kv_transfer"
    held_blocks: int = 0  # blocks finished requests keep for a transfer (`EngineModel.release`)
