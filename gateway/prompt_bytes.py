"""Canonical bytes of a request's prompt, the input of prefix hashing.

Chat messages are rendered as `role ␟ content ␞` records (plus name, tool calls and tool call
id when present), so consecutive turns of a conversation share a byte prefix whatever the
JSON formatting of the request. Multimodal parts, and Responses items that are not messages
(function calls and their outputs), are included by reference (a hash of the URL, data or
item), not by content. Every other API's prompt renders as a completions prompt: text as its
UTF-8, token ids (`/generate`'s `input_ids`) as 4 bytes a token, a batch as its first prompt.

Bounded work, since it runs inline on the event loop: rendering stops after `MAX_PROMPT_BYTES`
bytes or `MAX_ITEMS` messages (and as many content parts per message), and the bytes are cut at
`MAX_PROMPT_BYTES` (4 MiB is ~1M tokens, past any context window; 16k messages is longer than
real conversations). A prompt nested deeper than orjson serialises (255 levels) is a
`BadRequestError`, not a 500.
"""

from __future__ import annotations

from array import array
from itertools import islice
from typing import Any

import orjson
import xxhash

from gateway.errors import BadRequestError

_RS, _US = "\x1e", "\x1f"
MAX_PROMPT_BYTES = 4 * 1024 * 1024
MAX_ITEMS = 16384


def prompt_bytes(api: str, prompt: Any, instructions: str | None = None) -> bytes:
    """The prompt's canonical bytes, at most `MAX_PROMPT_BYTES` of them."""
    try:
        return _render(api, prompt, instructions)[:MAX_PROMPT_BYTES]
    except orjson.JSONEncodeError:
        raise BadRequestError(
            "the prompt is nested too deeply (more than 254 levels of arrays or objects)",
            code="invalid_prompt",
        ) from None


def _render(api: str, prompt: Any, instructions: str | None) -> bytes:
    if api == "chat":
        return _messages(prompt)
    if api == "responses":
        head = (instructions + _RS) if instructions else ""
        if isinstance(prompt, list):
            return head.encode() + _messages(prompt)
        return (head + str(prompt)).encode()
    return _completion_prompt(prompt)


def _completion_prompt(prompt: Any) -> bytes:
    if isinstance(prompt, str):
        return prompt.encode()
    if isinstance(prompt, list) and prompt:
        first = prompt[0]
        if isinstance(first, int):
            return _token_ids(prompt)
        if isinstance(first, str):  # a batch: route on its first prompt
            return first.encode()
        if isinstance(first, list):
            return _token_ids(first)
        if isinstance(first, dict):  # /pooling's messages, a rerank query's content parts
            return _messages(prompt) if "role" in first else _content(prompt).encode()
    return b""


def _token_ids(ids: list[Any]) -> bytes:
    ids = ids[: MAX_PROMPT_BYTES // 4]
    try:
        return array("I", ids).tobytes()
    except (TypeError, OverflowError):
        return orjson.dumps(ids)


def _messages(messages: Any) -> bytes:
    if not isinstance(messages, list):
        return b""
    records: list[str] = []
    size = 0  # characters so far
    for m in islice(messages, MAX_ITEMS):
        if size >= MAX_PROMPT_BYTES:
            break
        record = _record(m)
        records.append(record)
        size += len(record)
    return "".join(records).encode()


def _record(m: Any) -> str:
    if type(m) is dict and len(m) == 2:  # the usual message, {"role": str, "content": str}
        role, content = m.get("role"), m.get("content")
        if type(role) is str and type(content) is str:
            return role + _US + content + _RS
    if not isinstance(m, dict) or "role" not in m:  # e.g. a Responses function_call item
        return _ref(m) + _RS
    parts = [str(m.get("role", ""))]
    if "name" in m:
        parts.append(_US + str(m["name"]))
    parts.append(_US)
    parts.append(_content(m.get("content")))
    calls = m.get("tool_calls")
    if calls:
        parts.append(_US + _tool_calls(calls))
    if "tool_call_id" in m:
        parts.append(_US + str(m["tool_call_id"]))
    parts.append(_RS)
    return "".join(parts)


def _content(content: Any) -> str:
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if isinstance(content, list):
        out = []
        for part in islice(content, MAX_ITEMS):
            if isinstance(part, dict) and part.get("type") in ("text", "input_text", "output_text"):
                out.append(str(part.get("text", "")))
            else:
                out.append(_ref(part))
        return "".join(out)
    return _ref(content)


def _tool_calls(calls: Any) -> str:
    if not isinstance(calls, list):
        return _ref(calls)
    out = []
    for call in calls:
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict):
            out.append(f"{fn.get('name', '')}({fn.get('arguments', '')})")
        else:
            out.append(_ref(call))
    return ";".join(out)


def _ref(value: Any) -> str:
    """A short stable reference to a non-text part (image, audio, file, …)."""
    kind = value.get("type", "part") if isinstance(value, dict) else type(value).__name__
    digest = xxhash.xxh3_64_hexdigest(orjson.dumps(value, option=orjson.OPT_SORT_KEYS))
    return f"<{kind}:{digest}>"
