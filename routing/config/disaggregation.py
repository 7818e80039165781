"""The `disaggregation:` section: how a pool with prefill (P) and decode (D) backends is driven.

A backend's `role` (`prefill`, `decode` or `both`, the default) is in its `backends:` entry;
this section names the pool's P/D protocol and when to use P:
- `protocol`: `vllm` (P computes the prompt and answers `kv_transfer_params`, which D is
  given to pull the blocks it lacks) or `sglang` (P and D get the same body with a bootstrap
  room at once; P pushes the KV).
- `mode`: `conditional` (P only when D's uncached part is at least `min_uncached_tokens` and
  the predicted TTFT through P, transfer included, beats D alone), `always`, or `never`.
- the KV link's initial estimate (`transfer_*`), which the gateway then learns from what the
  decode legs take.
A pool without prefill backends ignores all of it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["prefill", "decode", "both"]
PdProtocol = Literal["vllm", "sglang"]
PdMode = Literal["conditional", "always", "never"]


class DisaggregationSection(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    protocol: PdProtocol = Field("vllm", description="vllm (NixlConnector) or sglang (bootstrap)")
    mode: PdMode = Field("conditional", description="when a request goes through a prefill backend")
    min_uncached_tokens: int = Field(
        512, ge=0, description="conditional: below this many uncached tokens on D, D prefills"
    )
    transfer_latency_s: float = Field(
        0.01, gt=0, description="initial estimate: the decode leg's fixed part (handoff, D's step)"
    )
    transfer_token_s: float = Field(
        2e-6, gt=0, description="initial estimate: seconds to move one token's KV from P to D"
    )
    learn: bool = Field(True, description="learn the link's line from the decode legs' TTFTs")
    prefill_timeout_s: float = Field(
        60.0, gt=0, description="longest wait for P's answer (vllm) before D prefills alone"
    )
