"""Parse the few fields of an inference request body that routing needs, per API.

OpenAI's APIs (`APIS`) name a `model` and a prompt field, both checked. SGLang's native API
(`/generate`: `text` or `input_ids`, one prompt or a batch; `/v1/rerank`: `query`; `/v1/score`:
`query`, or vLLM's `text_1`) and vLLM's utility endpoints (`/tokenize`, `/detokenize`;
`/pooling` and `/classify`, whose `input` is routed as embeddings') may name no model: `model`
is then "" until the director fills in the pool's (`RequestRouter.default_model`). Their
prompt fields are checked when present (`/generate` needs one), the rest is the engine's to
refuse in its own words. A request of several prompts (a batch, rerank's documents, score's
items, `n` > 1 samples) is routed by its first and marked `batch`: its answer's token counts
are not the routed prompt's. Errors on `/generate` take SGLang's shape (`ERROR_SHAPES`).
A Responses request's `previous_response_id` and `store` are read, not checked
(`gateway.responses`). The body is parsed once with orjson and relayed byte for byte.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.errors import BadRequestError
from routing.frozen import fast_init

# API name → (path, the field holding the prompt, the JSON types it may have)
APIS: dict[str, tuple[str, str, tuple[type, ...]]] = {
    "chat": ("/v1/chat/completions", "messages", (list,)),
    "completions": ("/v1/completions", "prompt", (str, list)),
    "embeddings": ("/v1/embeddings", "input", (str, list)),
    "responses": ("/v1/responses", "input", (str, list)),
}
# SGLang's native API and vLLM's utility endpoints: API name → path
NATIVE_APIS: dict[str, str] = {
    "generate": "/generate",
    "rerank": "/v1/rerank",
    "score": "/v1/score",
    "tokenize": "/tokenize",
    "detokenize": "/detokenize",
    "pooling": "/pooling",
    "classify": "/classify",
}
API_BY_PATH = {path: api for api, (path, _, _) in APIS.items()} | {
    path: api for api, path in NATIVE_APIS.items()
}
ENGINE_ONLY: Mapping[str, str] = {"generate": "sglang"}  # APIs only one engine serves
ERROR_SHAPES: Mapping[str, str] = {"/generate": "sglang"}  # by path; else kvgate's (OpenAI's)
GENERATING_APIS = frozenset({"chat", "completions", "responses", "generate"})
COMPLETION_PROMPT_APIS = frozenset({"completions", "generate"})  # tokenized as one prompt
_TYPE_NAMES: dict[type, str] = {list: "an array", str: "a string"}


@fast_init
@dataclass(frozen=True, slots=True)
class InferenceRequest:
    api: str
    model: str  # "" until resolved when the body names none (see the module docstring)
    stream: bool
    user: str | None
    body_bytes: int
    prompt: Any = None  # the prompt field's JSON value (messages, prompt, input, text, ...)
    cache_salt: str | None = None
    instructions: str | None = None  # Responses API system text
    batch: bool = False  # several prompts, routed by the first
    previous_response_id: str | None = None  # Responses API: the stored response it follows
    store: bool = False  # Responses API: the answer is stored (`store` not false)
    model_asked: str | None = None  # the client's model, when a rewrite replaced `model`

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
    if api in APIS:
        _, prompt_field, prompt_types = APIS[api]
        model = data.get("model")
        if not isinstance(model, str) or not model:
            raise _field_error("model", "a non-empty string", model, "model" in data)
        prompt = data.get(prompt_field)
        if not isinstance(prompt, prompt_types):
            expected = " or ".join(_TYPE_NAMES[t] for t in prompt_types)
            raise _field_error(prompt_field, expected, prompt, prompt_field in data)
        batch = api != "chat" and _several(prompt)
    else:
        model = data.get("model")
        if model is not None and (not isinstance(model, str) or not model):
            raise _field_error("model", "a non-empty string", model, True)
        prompt, batch = _NATIVE_PROMPTS[api](data)
    stream = data.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise _field_error("stream", "a boolean", stream, True)
    user = data.get("user")
    salt = data.get("cache_salt")
    instructions = data.get("instructions")
    previous = data.get("previous_response_id") if api == "responses" else None
    # Every field by position, in their order: keywords cost a dict per call (per request).
    return InferenceRequest(
        api,
        model or "",
        stream,
        user if isinstance(user, str) else None,
        body_bytes,
        prompt,
        salt if isinstance(salt, str) else None,  # cache_salt
        instructions if isinstance(instructions, str) else None,
        batch,
        previous if isinstance(previous, str) else None,  # previous_response_id
        api == "responses" and data.get("store") is not False,  # store
    )


def _several(prompt: Any) -> bool:
    """Whether a completions-like prompt is a batch (strings, or lists of token ids)."""
    return isinstance(prompt, list) and len(prompt) > 1 and isinstance(prompt[0], (str, list))


def _generate(data: dict[str, Any]) -> tuple[Any, bool]:
    """SGLang's `/generate`: `input_ids` win over `text` (the engine computes on the ids);
    `input_embeds` alone routes by load."""
    params = data.get("sampling_params")
    samples = params.get("n", 1) if isinstance(params, dict) else 1
    many = isinstance(params, list) or (isinstance(samples, int) and samples > 1)
    ids = data.get("input_ids")
    if ids is not None:
        if not isinstance(ids, list) or not ids or not isinstance(ids[0], (int, list)):
            raise _field_error(
                "input_ids", "a list of token ids or a list of such lists", ids, True
            )
        return ids, many or _several(ids)
    text = data.get("text")
    if text is not None:
        if not isinstance(text, str) and not (
            isinstance(text, list) and text and all(isinstance(t, str) for t in text)
        ):
            raise _field_error("text", "a string or a list of strings", text, True)
        return text, many or _several(text)
    if data.get("input_embeds") is not None:
        return None, many
    # SGLang's own words for a request without input.
    raise BadRequestError(
        "Either text, input_ids or input_embeds should be provided.", code="missing_field"
    )


def _first_of(*fields: str, batch: bool) -> Callable[[dict[str, Any]], tuple[Any, bool]]:
    """A parser taking the prompt from the first of `fields` present (a string or an array;
    absent: routed by load only, for the engine to judge)."""

    def parse(data: dict[str, Any]) -> tuple[Any, bool]:
        for field in fields:
            value = data.get(field)
            if value is None:
                continue
            if not isinstance(value, (str, list)):
                raise _field_error(field, "a string or an array", value, True)
            return value, batch or _several(value)
        return None, batch

    return parse


def _score(data: dict[str, Any]) -> tuple[Any, bool]:
    prompt, _ = _first_of("query", "text_1", batch=True)(data)
    # Items placed first: the query is no prefix of what the engine computes.
    return (None if data.get("item_first") is True else prompt), True


def _no_prompt(data: dict[str, Any]) -> tuple[Any, bool]:
    return None, False


_NATIVE_PROMPTS: dict[str, Callable[[dict[str, Any]], tuple[Any, bool]]] = {
    "generate": _generate,
    "rerank": _first_of("query", batch=True),  # every document is a prompt of its own
    "score": _score,
    "tokenize": _no_prompt,  # no prefix: nothing is computed, nothing cached
    "detokenize": _no_prompt,
    "pooling": _first_of("input", "messages", batch=False),
    "classify": _first_of("input", "input_ids", "text", batch=False),  # vLLM's, SGLang's
}


def prompt_token_ids(req: InferenceRequest) -> list[int] | None:
    """The routed prompt when the body gives it as token ids (a batch's first), else None:
    the engine computes on exactly these, no tokenizer needed. None also when they are not
    all ids in 0..2**32-1."""
    prompt = req.prompt
    if not isinstance(prompt, list) or not prompt or req.api in ("chat", "responses"):
        return None
    first = prompt[0]
    ids = first if isinstance(first, list) else prompt
    if not ids or type(ids[0]) is not int:
        return None
    try:
        array("I", ids)  # C-speed check that every item is an unsigned 32-bit int
    except (TypeError, OverflowError):
        return None
    return ids


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
