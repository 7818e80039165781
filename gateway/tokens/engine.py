"""`EngineTokenizer`: a backend's own `POST /tokenize`, with an LRU cache of answers.

The request is vLLM's: `{"model", "messages"}` for chat (vLLM renders its chat template and
adds the generation prompt, as for a completion request), `{"model", "prompt"}` for a
completions prompt string (special tokens added); the answer is `{"count", "max_model_len",
"tokens"}`. The kvgate emulator serves the same. A completions prompt of token ids is taken
as it is, without asking.

Which backend is asked is the caller's choice: `pick_backend(model)` returns a base URL (a
healthy backend serving the model) or None. Answers are cached by a 128-bit hash of the
model, the API and the prompt's canonical bytes (`gateway.prompt_bytes`), at most
`cache_entries` of them, least recently used evicted first; ids are kept as 4-byte ints
(32 KiB for an 8k-token prompt). Failures (no backend, connect error, timeout after
`timeout_s`, a non-200 status, an answer that is not a list of token ids) are counted and
answered None, never raised. Two concurrent requests for the same uncached prompt both ask.
"""

from __future__ import annotations

import logging
from array import array
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import orjson
import xxhash

from gateway.inference_request import COMPLETION_PROMPT_APIS, InferenceRequest
from gateway.prompt_bytes import MAX_PROMPT_BYTES, prompt_bytes
from gateway.tokens.local import single_prompt
from gateway.tokens.protocol import TokenizerCounters
from gateway.tokens.transport import JsonPoster

logger = logging.getLogger(__name__)

PickBackend = Callable[[str], str | None]


class EngineTokenizer:
    """A `PromptTokenizer` asking `pick_backend(model)`'s `/tokenize` through `poster`."""

    def __init__(
        self,
        pick_backend: PickBackend,
        poster: JsonPoster,
        cache_entries: int = 4096,
        timeout_s: float = 1.0,
    ) -> None:
        self._pick = pick_backend
        self._poster = poster
        self._capacity = cache_entries
        self._timeout_s = timeout_s
        self._cache: OrderedDict[bytes, array[int]] = OrderedDict()
        self._tally = {"hits": 0, "misses": 0, "errors": 0, "unsupported": 0, "no_backend": 0}

    @property
    def counters(self) -> TokenizerCounters:
        return TokenizerCounters(**self._tally)

    def __len__(self) -> int:
        """Prompts in the cache."""
        return len(self._cache)

    async def token_ids(self, req: InferenceRequest) -> list[int] | None:
        prompt: Any
        if req.api in COMPLETION_PROMPT_APIS:
            prompt = single_prompt(req.prompt)
            if isinstance(prompt, list):
                return prompt
            field = "prompt"
        elif req.api == "chat" and isinstance(req.prompt, list):
            prompt, field = req.prompt, "messages"
        else:
            prompt = None
        if prompt is None:
            self._tally["unsupported"] += 1
            return None
        try:
            key = _cache_key(req.model, req.api, prompt)
        except Exception:  # a prompt nested too deeply to serialise
            self._tally["unsupported"] += 1
            return None
        cached = self._cache.get(key) if key is not None else None
        if cached is not None:
            self._cache.move_to_end(key)  # type: ignore[arg-type]
            self._tally["hits"] += 1
            return cached.tolist()
        self._tally["misses"] += 1
        ids = await self._ask(req.model, {"model": req.model, field: prompt})
        if ids is not None and key is not None:
            self._store(key, ids)
        return ids

    async def _ask(self, model: str, payload: dict[str, Any]) -> list[int] | None:
        try:
            base_url = self._pick(model)
        except Exception:  # the gateway's callable: a bug there costs only the exact keys
            logger.exception("picking a backend to tokenize for %s failed", model)
            base_url = None
        if base_url is None:
            self._tally["no_backend"] += 1
            return None
        try:
            status, body = await self._poster.post(
                base_url, "/tokenize", orjson.dumps(payload), self._timeout_s
            )
            if status != 200:
                raise ValueError(f"status {status}")
            return _parse_tokens(body)
        except Exception as exc:  # engine and network failures only cost the exact keys
            self._tally["errors"] += 1
            logger.debug("/tokenize on %s failed: %s: %s", base_url, type(exc).__name__, exc)
            return None

    def _store(self, key: bytes, ids: list[int]) -> None:
        if self._capacity <= 0:
            return
        try:
            self._cache[key] = array("I", ids)
        except OverflowError:  # an id past 2**32: not cached
            return
        if len(self._cache) > self._capacity:
            self._cache.popitem(last=False)


def _cache_key(model: str, api: str, prompt: Any) -> bytes | None:
    """128-bit hash of model, API and canonical prompt bytes; None for a prompt longer than
    the canonical bytes keep (two such prompts could share them)."""
    data = prompt_bytes(api, prompt)
    if len(data) >= MAX_PROMPT_BYTES:
        return None
    h = xxhash.xxh3_128()
    h.update(f"{model}\x00{api}\x00".encode())
    h.update(data)
    return h.digest()


def _parse_tokens(body: bytes) -> list[int]:
    data = orjson.loads(body)
    tokens = data.get("tokens") if isinstance(data, dict) else None
    if not isinstance(tokens, list) or not all(type(t) is int and t >= 0 for t in tokens):
        raise ValueError("the answer has no list of token ids")
    return tokens
