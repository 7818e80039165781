"""SGLang's native API for the emulator: `/generate`'s request and answer shapes, its errors,
and plausible `/v1/rerank` and `/v1/score` answers.

As SGLang's source has them (`entrypoints/http_server.py`, `managers/io_struct.py`
`GenerateReqInput`, `managers/tokenizer_manager.py`): an answer is `{"text", "output_ids",
"meta_info"}`, a list of them for a batch or `n` > 1; a stream sends one such object a token
(text and ids so far; a batch's tagged `index`), then `data: [DONE]`. `meta_info`: id,
finish_reason (null until `{"type": "length", "length": n}`: the emulator has no EOS),
prompt_tokens, weight_version, total_retractions, completion_tokens, cached_tokens, and
e2e_latency once finished. A request SGLang refuses gets `{"error": {"message"}}` (400); a
body failing validation FastAPI's `{"object": "error", "message", "type", "param", "code"}`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from sim.emulator.openai_api import ApiError

DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's SamplingParams default
DONE = b"data: [DONE]\n\n"


class SglangError(ApiError):
    """An error as SGLang's HTTP server answers it (see the module docstring)."""

    def __init__(self, message: str, *, validation: bool = False, status: int = 400) -> None:
        super().__init__(status, message, "Bad Request")
        self.validation = validation

    def body(self) -> bytes:
        if self.validation:
            return orjson.dumps(
                {
                    "object": "error",
                    "message": self.message,
                    "type": self.type,
                    "param": None,
                    "code": self.status,
                }
            )
        return orjson.dumps({"error": {"message": self.message}})


@dataclass(frozen=True, slots=True)
class GenerateItem:
    """One prompt of a `/generate` request, as the tokenizer manager splits a batch."""

    rid: str
    text: str | None
    input_ids: tuple[int, ...] | None
    max_new_tokens: int


@dataclass(frozen=True, slots=True)
class GenerateRequest:
    items: tuple[GenerateItem, ...]
    single: bool  # answered with one object, not a list
    stream: bool
    lora_path: str | None
    seed: int | None


def parse_json(body: bytes) -> dict[str, Any]:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise SglangError(f"JSON decode error: {exc}", validation=True) from None
    if not isinstance(data, dict):
        raise SglangError("Input should be a valid dictionary", validation=True)
    return data


def parse_generate(data: dict[str, Any]) -> GenerateRequest:
    """`data` as SGLang normalizes a `GenerateReqInput` (ValueErrors as `SglangError`)."""
    text, ids = data.get("text"), data.get("input_ids")
    if ids is not None:
        if not isinstance(ids, list) or not all(isinstance(i, (int, list)) for i in ids):
            raise SglangError("input_ids: Input should be a valid list", validation=True)
        if not ids:
            raise SglangError("input_ids cannot be empty.")
        single = isinstance(ids[0], int)
        prompts: list[Any] = [ids] if single else list(ids)
    elif text is not None:
        if not isinstance(text, (str, list)):
            raise SglangError("text: Input should be a valid string", validation=True)
        single = isinstance(text, str)
        prompts = [text] if single else list(text)
    else:
        raise SglangError("Either text, input_ids or input_embeds should be provided.")
    params = data.get("sampling_params") or {}
    per_item = params if isinstance(params, list) else [params] * len(prompts)
    n = per_item[0].get("n", 1) if per_item and isinstance(per_item[0], dict) else 1
    if not isinstance(n, int) or n < 1:
        raise SglangError("n: Input should be a positive integer", validation=True)
    if n > 1:
        single = False
        prompts, per_item = prompts * n, per_item * n  # SGLang's order: [p0, p1, p0, p1, ...]
    rids = _rids(data.get("rid"), len(prompts), single)
    items = []
    for rid, prompt, sp in zip(rids, prompts, per_item, strict=True):
        max_new = sp.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS) if isinstance(sp, dict) else None
        if not isinstance(max_new, int) or max_new < 1:  # 0 (prefill only) is not modelled
            raise SglangError("max_new_tokens must be at least 1 here", validation=True)
        if isinstance(prompt, str):
            items.append(GenerateItem(rid, prompt, None, max_new))
        elif isinstance(prompt, list) and all(type(t) is int and t >= 0 for t in prompt):
            items.append(GenerateItem(rid, None, tuple(prompt), max_new))
        else:
            raise SglangError("each prompt must be a string or a list of token ids")
    lora = data.get("lora_path")
    seed = params.get("sampling_seed") if isinstance(params, dict) else None
    return GenerateRequest(
        tuple(items),
        single,
        data.get("stream") is True,
        lora if isinstance(lora, str) else None,
        seed if isinstance(seed, int) else None,
    )


def _rids(rid: Any, count: int, single: bool) -> list[str]:
    if rid is None:
        return [uuid.uuid4().hex for _ in range(count)]
    if isinstance(rid, str):
        return [rid] if single else [f"{rid}_{i}" for i in range(count)]
    if isinstance(rid, list) and len(rid) == count and all(isinstance(r, str) for r in rid):
        return list(rid)
    raise SglangError(
        "The specified rids length mismatch with the batch_size for batch processing."
    )


def meta_info(
    rid: str,
    prompt_tokens: int,
    completion_tokens: int,
    cached_tokens: int,
    *,
    finished: bool,
    e2e_latency: float = 0.0,
) -> dict[str, Any]:
    info: dict[str, Any] = {
        "id": rid,
        "finish_reason": {"type": "length", "length": completion_tokens} if finished else None,
        "prompt_tokens": prompt_tokens,
        "weight_version": "default",
        "total_retractions": 0,
        "completion_tokens": completion_tokens,
        "cached_tokens": cached_tokens,
    }
    if finished:
        info["e2e_latency"] = e2e_latency
    return info


def output(text: str, ids: Sequence[int], meta: dict[str, Any]) -> dict[str, Any]:
    """One prompt's answer (or a stream's event, before `index`)."""
    return {"text": text, "output_ids": list(ids), "meta_info": meta}


def event(obj: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def rerank(query: str, documents: Sequence[str], top_n: int | None, with_docs: bool) -> list[Any]:
    """`/v1/rerank`: documents by a plausible relevance (the share of their words the query
    has), best first; SGLang's `RerankResponse` items."""
    words = set(query.lower().split())
    ranked = []
    for i, doc in enumerate(documents):
        doc_words = doc.lower().split()
        score = sum(w in words for w in doc_words) / len(doc_words) if doc_words else 0.0
        item: dict[str, Any] = {"score": score, "index": i, "meta_info": None}
        if with_docs:
            item = {"score": score, "document": doc, "index": i, "meta_info": None}
        ranked.append(item)
    ranked.sort(key=lambda r: -r["score"])
    return ranked[:top_n] if top_n else ranked


def score(model: str, items: int, labels: int) -> dict[str, Any]:
    """`/v1/score`: per item, a probability for each label token (uniform here)."""
    row = [1.0 / labels] * labels if labels else []
    return {"scores": [row] * items, "model": model, "usage": None, "object": "scoring"}
