"""What the gateway asks of a prompt tokenizer, and the counters every tokenizer keeps.

`token_ids(req)` returns the ids the engine will prefill for `req`, or None when this
tokenizer cannot produce them (an API other than chat or completions, a multimodal part, a
template error, an engine that failed or timed out). It never raises for engine or network
problems: it counts them, and the caller falls back to the approximate byte hashes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from gateway.inference_request import InferenceRequest


@dataclass(frozen=True, slots=True)
class TokenizerCounters:
    """Totals since start. `hits`/`misses`: the engine tokenizer's cache (a local tokenizer
    counts every tokenized prompt as a miss); `unsupported`: requests answered None before
    any work (API, prompt shape); `errors`: failures (template, engine, network, timeout);
    `no_backend`: no backend to ask; `offloaded`: prompts tokenized in a worker thread."""

    hits: int = 0
    misses: int = 0
    errors: int = 0
    unsupported: int = 0
    no_backend: int = 0
    offloaded: int = 0


class PromptTokenizer(Protocol):
    """Turns an inference request into the engine's prompt token ids (None: cannot)."""

    async def token_ids(self, req: InferenceRequest) -> list[int] | None: ...

    @property
    def counters(self) -> TokenizerCounters: ...
