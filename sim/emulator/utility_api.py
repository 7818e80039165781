"""The emulator's answers besides generation: tokenizing, and plausible pooling and scoring.

`POST /tokenize` (`{"model", "prompt" | "messages"}` → `{"count", "max_model_len", "tokens",
"token_strs"}`) and `/detokenize` (`{"tokens"}` → vLLM's `{"prompt"}`, SGLang's `{"text"}`)
on both engines; vLLM's `/pooling` and `/classify` (`input`: a string or a list, vectors and
class probabilities derived from the tokens) and SGLang's `/v1/rerank` and `/v1/score`
(`sglang_api`) on the engine that serves them. These run no engine-model work: they take no
KV blocks and no time.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import xxhash

from sim.emulator import openai_api as api
from sim.emulator import sglang_api
from sim.emulator.replica import Replica
from sim.engine.tokenizer import Tokenizer

VLLM_PATHS = frozenset({"/tokenize", "/detokenize", "/pooling", "/classify"})
SGLANG_PATHS = frozenset({"/tokenize", "/detokenize", "/v1/rerank", "/v1/score"})
_DIMENSIONS = 8
_CLASSES = 2


class Utilities:
    """One replica's utility endpoints (see the module docstring)."""

    def __init__(
        self, replica: Replica, tokenizer: Tokenizer, check_model: Callable[[str | None], Any]
    ) -> None:
        self.replica = replica
        self.tokenizer = tokenizer
        self._check_model = check_model
        self.paths = SGLANG_PATHS if replica.engine_name == "sglang" else VLLM_PATHS

    def answer(self, path: str, data: dict[str, Any]) -> Any:
        """The JSON answer to `data` posted on `path` (one of `paths`), or an `ApiError`."""
        if path == "/v1/rerank":
            return self._rerank(data)
        if path == "/v1/score":
            return self._score(data)
        self._check_model(data.get("model"))
        if path == "/tokenize":
            return self._tokenize(data)
        if path == "/detokenize":
            tokens = data.get("tokens")
            if not isinstance(tokens, list) or not all(type(t) is int for t in tokens):
                raise api.ApiError(
                    400, "field 'tokens' must be a list of token ids", param="tokens"
                )
            try:
                text = self.tokenizer.decode(tokens)
            except ValueError as exc:  # the built-in tokenizer decodes the ids it made
                raise api.ApiError(400, str(exc), param="tokens") from None
            return {"text" if self.replica.engine_name == "sglang" else "prompt": text}
        return self._pooled(path, data)

    def _tokenize(self, data: dict[str, Any]) -> dict[str, Any]:
        if isinstance(data.get("messages"), list):
            ids = self.tokenizer.encode(api.render_chat(data["messages"]))
        elif isinstance(data.get("prompt"), str):
            ids = self.tokenizer.encode(data["prompt"])
        else:
            raise api.ApiError(400, "field 'prompt' or 'messages' is required", param="prompt")
        return {
            "count": len(ids),
            "max_model_len": self.replica.max_model_len,
            "tokens": ids,
            "token_strs": None,
        }

    def _pooled(self, path: str, data: dict[str, Any]) -> dict[str, Any]:
        """vLLM's `/pooling` (a vector an input) or `/classify` (class probabilities)."""
        inputs = data.get("input")
        texts = [inputs] if isinstance(inputs, str) else inputs
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            raise api.ApiError(400, "field 'input' must be a string or a list of strings")
        ids = [self.tokenizer.encode(t) for t in texts]
        data_out: list[dict[str, Any]] = []
        for i, prompt in enumerate(ids):
            vector = _vector(prompt, _DIMENSIONS)
            if path == "/pooling":
                data_out.append({"index": i, "object": "pooling", "data": vector})
            else:
                probs = _softmax(vector[:_CLASSES])
                label = f"LABEL_{probs.index(max(probs))}"
                data_out.append(
                    {"index": i, "label": label, "probs": probs, "num_classes": _CLASSES}
                )
        prompt_tokens = sum(map(len, ids))
        kind = "pool" if path == "/pooling" else "classify"
        return {
            "id": self.replica.new_request_id(kind),
            "object": "list",
            "created": int(time.time()),
            "model": self.replica.model_name,
            "data": data_out,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "total_tokens": prompt_tokens,
                "completion_tokens": 0,
                "prompt_tokens_details": None,
            },
        }

    def _rerank(self, data: dict[str, Any]) -> list[Any]:
        query, documents = data.get("query"), data.get("documents")
        if not isinstance(query, str):
            raise sglang_api.SglangError("query: Input should be a valid string", validation=True)
        if not isinstance(documents, list) or not all(isinstance(d, str) for d in documents):
            raise sglang_api.SglangError("documents: Input should be a valid list", validation=True)
        top_n = data.get("top_n")
        with_docs = data.get("return_documents", True) is not False
        return sglang_api.rerank(
            query, documents, top_n if isinstance(top_n, int) else None, with_docs
        )

    def _score(self, data: dict[str, Any]) -> dict[str, Any]:
        items, labels = data.get("items"), data.get("label_token_ids")
        if data.get("query") is None or items is None:
            raise sglang_api.SglangError("query and items are required", validation=True)
        count = 1 if isinstance(items, str) else len(items) if isinstance(items, list) else 0
        n_labels = len(labels) if isinstance(labels, list) else 0
        model = data.get("model")
        return sglang_api.score(model if isinstance(model, str) else "default", count, n_labels)


def _vector(ids: list[int], dims: int) -> list[float]:
    """A unit-free vector in [-1, 1) derived from the token ids (the same input, the same one)."""
    digest = xxhash.xxh3_128_digest(b"".join(i.to_bytes(4, "little") for i in ids))
    return [(b - 128) / 128 for b in digest[:dims]]


def _softmax(values: list[float]) -> list[float]:
    exps = [math.exp(v) for v in values]
    total = sum(exps)
    return [e / total for e in exps]
