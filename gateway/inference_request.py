"""Parse the few fields of an OpenAI request body that routing needs.

The body is parsed once with orjson and relayed upstream byte for byte; only `model`, the
prompt field's presence and type, `stream` and `user` are checked. Everything else is the
engine's business; a Responses request's `previous_response_id` and `store` are read, not
checked (a stored response's follow-up goes where it is stored: `gateway.responses`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.errors import BadRequestError

# API name → (path, the field holding the prompt, the JSON types it may have)
APIS: dict[str, tuple[str, str, tuple[type, ...]]] = {
    "chat": ("/v1/chat/completions", "messages", (list,)),
    "completions": ("/v1/completions", "prompt", (str, list)),
    "embeddings": ("/v1/embeddings", "input", (str, list)),
    "responses": ("/v1/responses", "input", (str, list)),
}
API_BY_PATH = {path: api for api, (path, _, _) in APIS.items()}
_TYPE_NAMES: dict[type, str] = {list: "an array", str: "a string"}


@dataclass(frozen=True, slots=True)
class InferenceRequest:
    api: str
    model: str
    stream: bool
    user: str | None
    body_bytes: int
    prompt: Any = None  # the prompt field's JSON value (messages, prompt or input)
    cache_salt: str | None = None
    instructions: str | None = None  # Responses API system text
    previous_response_id: str | None = None  # Responses API: the stored response it follows
    store: bool = False  # Responses API: the answer is stored (`store` not false)

    @property
    def stores(self) -> bool:
        """A Responses request whose answer the engine keeps (vLLM's default, if it has a
        store): the backend that answers it holds the response."""
        return self.api == "responses" and self.store


def parse_inference_body(api: str, body: bytes) -> InferenceRequest:
    """The fields routing needs, or a `BadRequestError` (400)."""
    return inference_request(api, loads_body(body), len(body))


def loads_body(body: bytes, loads: Callable[[bytes], Any] = orjson.loads) -> Any:
    """The body's JSON (`loads`: a large body's is `gateway.large_body.loads_yielding`, in a
    worker thread); a `BadRequestError` (invalid_json) if it is empty or not JSON."""
    if not body:
        raise BadRequestError("request body is empty; expected a JSON object", code="invalid_json")
    try:
        return loads(body)
    except ValueError as exc:  # orjson's and json's decode errors, bad UTF-8, lone surrogates
        raise BadRequestError(
            f"request body is not valid JSON: {exc}", code="invalid_json"
        ) from None


def inference_request(api: str, data: Any, body_bytes: int) -> InferenceRequest:
    """The request of `api` from a parsed body (`data`), or a `BadRequestError`."""
    if not isinstance(data, dict):
        raise BadRequestError("request body must be a JSON object", code="invalid_json")
    _, prompt_field, prompt_types = APIS[api]
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise _field_error("model", "a non-empty string", model, "model" in data)
    prompt = data.get(prompt_field)
    if not isinstance(prompt, prompt_types):
        expected = " or ".join(_TYPE_NAMES[t] for t in prompt_types)
        raise _field_error(prompt_field, expected, prompt, prompt_field in data)
    stream = data.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise _field_error("stream", "a boolean", stream, True)
    user = data.get("user")
    salt = data.get("cache_salt")
    instructions = data.get("instructions")
    previous = data.get("previous_response_id") if api == "responses" else None
    return InferenceRequest(
        api=api,
        model=model,
        stream=stream,
        user=user if isinstance(user, str) else None,
        body_bytes=body_bytes,
        prompt=prompt,
        cache_salt=salt if isinstance(salt, str) else None,
        instructions=instructions if isinstance(instructions, str) else None,
        previous_response_id=previous if isinstance(previous, str) else None,
        store=api == "responses" and data.get("store") is not False,
    )


def _field_error(field: str, expected: str, value: Any, present: bool) -> BadRequestError:
    if not present:
        return BadRequestError(f"missing required field '{field}'", code="missing_field")
    got = type(value).__name__ if value is not None else "null"
    return BadRequestError(
        f"field '{field}' must be {expected}, got {got}", code="invalid_field_type"
    )


def session_key(req: InferenceRequest, headers: Mapping[str, str], header: str) -> str | None:
    """The session to keep affinity for: the configured header, else the OpenAI `user` field."""
    return headers.get(header) or req.user
