"""Request parsing and response shapes of vLLM's OpenAI-compatible API, for the emulator.

Shapes follow what vLLM 0.32 answered (see shared/samples/vllm-0.32/vllm_http_samples.txt).
The emulator has no EOS token: without `max_tokens` a completion has 16 tokens (vLLM's
default) and a chat answer `DEFAULT_CHAT_TOKENS`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

DEFAULT_COMPLETION_TOKENS = 16
DEFAULT_CHAT_TOKENS = 128


class ApiError(Exception):
    """An error vLLM would answer with `{"error": {message, type, param, code}}`."""

    def __init__(
        self, status: int, message: str, type_: str = "BadRequestError", param: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.param = param

    def body(self) -> bytes:
        return orjson.dumps(
            {
                "error": {
                    "message": self.message,
                    "type": self.type,
                    "param": self.param,
                    "code": self.status,
                }
            }
        )


@dataclass(frozen=True, slots=True)
class ParsedRequest:
    kind: str  # "chat" | "completion"
    model: str
    prompt_text: str | None
    prompt_ids: tuple[int, ...] | None
    max_tokens: int | None
    stream: bool
    include_usage: bool
    seed: int | None


def parse_json(body: bytes) -> dict[str, Any]:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, f"Invalid JSON body: {exc}") from None
    if not isinstance(data, dict):
        raise ApiError(400, "Request body must be a JSON object")
    return data


def render_chat(messages: Sequence[Any]) -> str:
    """A ChatML-like template: `<|im_start|>role\\ncontent<|im_end|>\\n`, then the assistant
    header, so consecutive turns of a conversation share their token prefix."""
    parts = []
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ApiError(
                400, "each message must be an object with a string 'role'", param="messages"
            )
        parts.append(f"<|im_start|>{m['role']}\n{_content_text(m.get('content'))}<|im_end|>\n")
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def _content_text(content: Any) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):  # multimodal parts: text kept, other parts by reference
        out = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                out.append(str(part.get("text", "")))
            elif isinstance(part, dict):
                out.append(f"<{part.get('type', 'part')}>")
        return "\n".join(out)  # as vLLM joins text parts for a string-content template
    raise ApiError(400, "message content must be a string or a list of parts", param="messages")


def parse_inference(kind: str, data: dict[str, Any]) -> ParsedRequest:
    model = data.get("model")
    if not isinstance(model, str):
        raise ApiError(400, "field 'model' is required and must be a string", param="model")
    prompt_text: str | None = None
    prompt_ids: tuple[int, ...] | None = None
    if kind == "chat":
        messages = data.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ApiError(400, "field 'messages' must be a non-empty list", param="messages")
        prompt_text = render_chat(messages)
        max_tokens = data.get("max_completion_tokens", data.get("max_tokens"))
    else:
        prompt = data.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if isinstance(prompt, str):
            prompt_text = prompt
        elif isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            prompt_ids = tuple(prompt)
        else:
            raise ApiError(
                400, "field 'prompt' must be a string or a list of token ids", param="prompt"
            )
        max_tokens = data.get("max_tokens", DEFAULT_COMPLETION_TOKENS)
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise ApiError(400, "max_tokens must be at least 1", param="max_tokens")
    stream = data.get("stream") is True
    opts = data.get("stream_options")
    include_usage = stream and isinstance(opts, dict) and opts.get("include_usage") is True
    seed = data.get("seed")
    return ParsedRequest(
        kind,
        model,
        prompt_text,
        prompt_ids,
        max_tokens,
        stream,
        include_usage,
        seed if isinstance(seed, int) else None,
    )


def usage(prompt: int, completion: int, cached: int | None) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": None if cached is None else {"cached_tokens": cached},
    }


def completion_body(
    req_id: str,
    kind: str,
    model: str,
    text: str,
    use: dict[str, Any],
    *,
    extra: dict[str, Any] | None = None,
) -> bytes:
    """One non-streamed answer; `extra`: top-level fields to add (vLLM's P adds
    `kv_transfer_params`)."""
    created = int(time.time())
    if kind == "chat":
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "logprobs": None,
            "finish_reason": "length",
            "stop_reason": None,
        }
        obj = "chat.completion"
    else:
        choice = {
            "index": 0,
            "text": text,
            "logprobs": None,
            "finish_reason": "length",
            "stop_reason": None,
        }
        obj = "text_completion"
    return orjson.dumps(
        {
            "id": req_id,
            "object": obj,
            "created": created,
            "model": model,
            "choices": [choice],
            "usage": use,
            **(extra or {}),
        }
    )


def stream_chunk(req_id: str, kind: str, model: str, text: str, finish: str | None) -> bytes:
    created = int(time.time())
    if kind == "chat":
        choice: dict[str, Any] = {
            "index": 0,
            "delta": {"content": text},
            "logprobs": None,
            "finish_reason": finish,
        }
        obj = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        obj = "text_completion"
    payload = {"id": req_id, "object": obj, "created": created, "model": model, "choices": [choice]}
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def role_chunk(req_id: str, model: str) -> bytes:
    payload = {
        "id": req_id,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
            }
        ],
    }
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def usage_chunk(req_id: str, kind: str, model: str, use: dict[str, Any]) -> bytes:
    obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
    payload = {
        "id": req_id,
        "object": obj,
        "created": int(time.time()),
        "model": model,
        "choices": [],
        "usage": use,
    }
    return b"data: " + orjson.dumps(payload) + b"\n\n"


DONE = b"data: [DONE]\n\n"
