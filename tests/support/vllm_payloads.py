"""JSON bodies shaped like vLLM 0.32's answers (see /work/shared/samples/vllm-0.32).

Only the fields a gateway or the openai client looks at are filled; vLLM's many extra
``null`` fields (``token_ids``, ``kv_transfer_params`` ...) are kept where they are cheap,
so a proxy that passes bodies through unchanged is exercised with realistic sizes.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from http import HTTPStatus
from typing import Any

Json = dict[str, Any]

SYSTEM_FINGERPRINT = "vllm-0.32.0-fake"

_ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    429: "RateLimitError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


def new_id(prefix: str) -> str:
    """An id like vLLM's: ``chatcmpl-`` / ``cmpl-`` followed by 16 hex digits."""
    return f"{prefix}-{secrets.token_hex(8)}"


def error_body(status: int, message: str, param: str | None = None) -> Json:
    """vLLM's OpenAI-shaped error: ``{"error": {"message", "type", "param", "code"}}``."""
    default_type = HTTPStatus(status).phrase.replace(" ", "") + "Error"
    return {
        "error": {
            "message": message,
            "type": _ERROR_TYPES.get(status, default_type),
            "param": param,
            "code": status,
        }
    }


def models_body(models: Sequence[str]) -> Json:
    created = int(time.time())
    return {
        "object": "list",
        "data": [
            {
                "id": model,
                "object": "model",
                "created": created,
                "owned_by": "vllm",
                "root": f"/models/{model}",
                "parent": None,
                "max_model_len": 4096,
            }
            for model in models
        ],
    }


def usage(prompt_tokens: int, completion_tokens: int) -> Json:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None,
    }


def chat_chunk(rid: str, model: str, delta: Json, finish_reason: str | None = None) -> Json:
    return {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
    }


def completion_chunk(rid: str, model: str, text: str, finish_reason: str | None = None) -> Json:
    return {
        "id": rid,
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}],
    }


def usage_chunk(rid: str, model: str, object_: str, usage_: Json) -> Json:
    """The last chunk sent when ``stream_options.include_usage`` is set: empty choices."""
    return {
        "id": rid,
        "object": object_,
        "created": int(time.time()),
        "model": model,
        "choices": [],
        "usage": usage_,
        "system_fingerprint": SYSTEM_FINGERPRINT,
    }


def chat_response(rid: str, model: str, text: str, finish_reason: str, usage_: Json) -> Json:
    message: Json = {"role": "assistant", "content": text, "refusal": None, "tool_calls": []}
    return {
        "id": rid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
        ],
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "usage": usage_,
    }


def completion_response(rid: str, model: str, text: str, finish_reason: str, usage_: Json) -> Json:
    return {
        "id": rid,
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}],
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "usage": usage_,
    }


def embeddings_response(model: str, inputs: Sequence[str], dimensions: int = 4) -> Json:
    data = [
        {
            "index": i,
            "object": "embedding",
            "embedding": [round((len(text) + i + d) / 100.0, 4) for d in range(dimensions)],
        }
        for i, text in enumerate(inputs)
    ]
    prompt_tokens = sum(count_words(text) for text in inputs)
    return {
        "id": new_id("embd"),
        "object": "list",
        "created": int(time.time()),
        "model": model,
        "data": data,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }


def responses_response(model: str, text: str, input_tokens: int, output_tokens: int) -> Json:
    content: Json = {"type": "output_text", "text": text, "annotations": [], "logprobs": None}
    return {
        "id": new_id("resp"),
        "object": "response",
        "created_at": int(time.time()),
        "model": model,
        "status": "completed",
        "output": [
            {
                "type": "message",
                "id": new_id("msg"),
                "status": "completed",
                "role": "assistant",
                "content": [content],
            }
        ],
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
        },
    }


def metrics_text(models: Sequence[str], running: int, waiting: int, kv_usage: float) -> str:
    """Prometheus text with the three gauges every peer router scrapes, labelled as vLLM does."""
    gauges = (
        ("vllm:num_requests_running", "Number of requests in model execution batches.", running),
        ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", waiting),
        ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", kv_usage),
    )
    lines: list[str] = []
    for metric, help_text, value in gauges:
        lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} gauge"]
        lines += [f'{metric}{{engine="0",model_name="{model}"}} {float(value)}' for model in models]
    return "\n".join(lines) + "\n"


def count_words(value: Any) -> int:
    """A stand-in for tokenisation: whitespace-separated words in any nested text."""
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):
        return sum(count_words(item) for item in value)
    if isinstance(value, dict):
        return sum(count_words(item) for item in value.values())
    return 0
