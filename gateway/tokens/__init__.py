"""Prompt token ids exactly as the engine will prefill them (for tokenizer-exact block keys).

`PromptTokenizer.token_ids(req)` turns a chat or completions request into token ids, or None
when it cannot (the caller then keeps the byte approximation). Two sources:

- `local.LocalTokenizer`: the model's `tokenizer.json` and chat template, loaded at start
  (needs the optional `tokens` extra: `tokenizers`, `jinja2`); nothing downloads.
- `engine.EngineTokenizer`: asks a backend's `POST /tokenize`, with an LRU cache.

`build.build_tokenizers(config.tokenizers, pick_backend)` makes the per-model `TokenizerSet`
from the config's `tokenizers:` list; `backends.healthy_backend_picker(pool)` is the usual
`pick_backend`.
"""

from gateway.tokens.backends import healthy_backend_picker
from gateway.tokens.build import TokenizerSet, build_tokenizers
from gateway.tokens.protocol import PromptTokenizer, TokenizerCounters

__all__ = [
    "PromptTokenizer",
    "TokenizerCounters",
    "TokenizerSet",
    "build_tokenizers",
    "healthy_backend_picker",
]
