"""Request parsing and response shapes of vLLM's Responses API (`/v1/responses`), for the emulator.

Shapes follow vLLM's `ResponsesResponse` and its simple (non-harmony) stream: events
`response.created`, `response.in_progress`, `response.output_item.added`,
`response.content_part.added`, one `response.output_text.delta` per token, the matching
`.done` events and `response.completed`, each sent as `event: TYPE` + `data: JSON` with a
`sequence_number`; no `[DONE]`. Errors are vLLM's: an unknown id is a 404 with `param`
`response_id`. The input is rendered with the emulator's chat template
(`openai_api.render_chat`): a string is one user message; message items keep their role and
their text parts; other items are rendered as their JSON.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

import orjson

from sim.emulator.openai_api import ApiError, render_chat

DEFAULT_OUTPUT_TOKENS = 128


@dataclass(frozen=True, slots=True)
class ResponsesRequest:
    model: str
    text: str  # the new turn, rendered (instructions first), ending with the assistant header
    previous_response_id: str | None
    store: bool
    stream: bool
    background: bool
    max_output_tokens: int | None
    instructions: str | None
    seed: int | None


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def not_found(response_id: str) -> ApiError:
    """vLLM's answer for a response id it does not hold."""
    message = f"Response with id '{response_id}' not found."
    return ApiError(404, message, "invalid_request_error", "response_id")


def parse_responses(data: dict[str, Any]) -> ResponsesRequest:
    model = data.get("model")
    if not isinstance(model, str):
        raise ApiError(400, "field 'model' is required and must be a string", param="model")
    raw = data.get("input")
    if isinstance(raw, str):
        messages: list[Any] = [{"role": "user", "content": raw}]
    elif isinstance(raw, list) and raw:
        messages = [_message(item) for item in raw]
    else:
        raise ApiError(400, "field 'input' must be a string or a non-empty list", param="input")
    instructions = data.get("instructions")
    if isinstance(instructions, str):
        messages.insert(0, {"role": "system", "content": instructions})
    previous = data.get("previous_response_id")
    if previous is not None and not isinstance(previous, str):
        raise ApiError(400, "previous_response_id must be a string", param="previous_response_id")
    store = data.get("store", True) is not False
    background = data.get("background") is True
    if background and not store:
        raise ApiError(400, "background can only be used when `store` is true", param="background")
    max_tokens = data.get("max_output_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise ApiError(400, "max_output_tokens must be at least 1", param="max_output_tokens")
    seed = data.get("seed")
    return ResponsesRequest(
        model,
        render_chat(messages),
        previous,
        store,
        data.get("stream") is True,
        background,
        max_tokens,
        instructions if isinstance(instructions, str) else None,
        seed if isinstance(seed, int) else None,
    )


def _message(item: Any) -> dict[str, Any]:
    if isinstance(item, dict) and isinstance(item.get("role"), str):
        content = item.get("content")
        if isinstance(content, list):  # input_text / output_text parts: their text
            texts = [str(p.get("text", "")) for p in content if isinstance(p, dict)]
            content = "\n".join(texts)
        return {"role": item["role"], "content": content if isinstance(content, str) else ""}
    return {"role": "user", "content": orjson.dumps(item).decode()}


def response_object(
    response_id: str,
    req: ResponsesRequest,
    status: str,
    *,
    text: str | None = None,
    usage: dict[str, Any] | None = None,
    message_id: str = "",
    max_output_tokens: int = DEFAULT_OUTPUT_TOKENS,
) -> dict[str, Any]:
    """A `response` object; `text` None: no output yet."""
    output = [] if text is None else [message_item(message_id, text, "completed")]
    return {
        "id": response_id,
        "created_at": int(time.time()),
        "incomplete_details": None,
        "instructions": req.instructions,
        "metadata": None,
        "model": req.model,
        "object": "response",
        "output": output,
        "parallel_tool_calls": True,
        "temperature": 1.0,
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "background": req.background,
        "max_output_tokens": max_output_tokens,
        "max_tool_calls": None,
        "previous_response_id": req.previous_response_id,
        "prompt": None,
        "reasoning": None,
        "service_tier": "auto",
        "status": status,
        "text": None,
        "top_logprobs": None,
        "truncation": "disabled",
        "usage": usage,
        "user": None,
    }


def message_item(message_id: str, text: str, status: str) -> dict[str, Any]:
    return {
        "id": message_id,
        "content": [] if status != "completed" else [output_text(text)],
        "role": "assistant",
        "status": status,
        "type": "message",
    }


def output_text(text: str) -> dict[str, Any]:
    return {"annotations": [], "text": text, "type": "output_text", "logprobs": None}


def usage(prompt: int, output: int, cached: int | None) -> dict[str, Any]:
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached or 0},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + output,
    }


class EventWriter:
    """Numbers and frames a response's stream events."""

    def __init__(self) -> None:
        self._seq = 0

    def event(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"
