"""A chat template rendered with jinja2 as transformers' `apply_chat_template` (and so vLLM)
renders it.

The environment is transformers': a sandbox with `trim_blocks`, `lstrip_blocks` and the
`loopcontrols` extension, a `tojson` filter that keeps non-ASCII text, and the globals
`raise_exception(message)` and `strftime_now(format)`. A render gets `messages`,
`add_generation_prompt=True`, `tools=None`, `documents=None` and the special tokens from
`tokenizer_config.json` (`bos_token`, `eos_token`, `unk_token`, `pad_token`) as strings.

Messages are passed as vLLM passes them (see `_message`). Content is given as a string, as
vLLM does for templates that treat `message.content` as text: a list of parts becomes its
text parts joined with a newline. (vLLM gives the parts themselves to templates that loop
over them, the "openai" content format of multimodal models; not reproduced here.) A part
that is not text (an image, audio) cannot be rendered here: its tokens depend on the
engine's processor, so `render` raises `TemplateRenderError` for it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
import jinja2.sandbox

SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "pad_token")


class TemplateRenderError(ValueError):
    """The template raised (or called `raise_exception`), or a message cannot be rendered."""


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class ChatTemplate:
    """A compiled chat template and the special tokens it is rendered with."""

    def __init__(self, source: str, special_tokens: Mapping[str, str] | None = None) -> None:
        env = jinja2.sandbox.ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
        )
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        self._template = env.from_string(source)
        self._special = dict(special_tokens or {})

    def render(self, messages: list[Any]) -> str:
        """The prompt text of `messages` with the assistant's generation prompt appended."""
        try:
            return self._template.render(
                messages=[_message(m) for m in messages],
                add_generation_prompt=True,
                tools=None,
                documents=None,
                **self._special,
            )
        except jinja2.exceptions.TemplateError as exc:
            raise TemplateRenderError(str(exc)) from None


def _message(m: Any) -> dict[str, Any]:
    """A request message as vLLM hands it to the template: role, content as a string,
    `name`, an assistant's `tool_calls` (arguments parsed from JSON; an empty list dropped)
    and reasoning, a tool's `tool_call_id`; other keys are not passed."""
    if not isinstance(m, dict) or not isinstance(m.get("role"), str):
        raise TemplateRenderError("each message must be an object with a string 'role'")
    out: dict[str, Any] = {"role": m["role"], "content": _content(m.get("content"))}
    if isinstance(m.get("name"), str):
        out["name"] = m["name"]
    if m["role"] == "assistant":
        if m.get("tool_calls"):
            out["tool_calls"] = [_tool_call(c) for c in m["tool_calls"]]
        for key in ("reasoning", "reasoning_content"):
            if isinstance(m.get(key), str):
                out[key] = m[key]
    elif m["role"] == "tool" and "tool_call_id" in m:
        out["tool_call_id"] = m["tool_call_id"]
    return out


def _content(content: Any) -> str:
    if content is None:  # vLLM renders a missing content (a tool-calling turn) as ""
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return _text_parts(content)
    raise TemplateRenderError("message content must be a string or a list of parts")


def _tool_call(call: Any) -> Any:
    """Tool-use templates expect the arguments as an object (transformers' convention)."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict):
        raise TemplateRenderError("a tool call must be an object with a 'function' object")
    arguments = function.get("arguments")
    if isinstance(arguments, str) or arguments is None:
        try:
            arguments = json.loads(arguments) if arguments else {}
        except ValueError:
            raise TemplateRenderError("tool call arguments are not valid JSON") from None
    return {**call, "function": {**function, "arguments": arguments}}


def _text_parts(parts: list[Any]) -> str:
    texts = []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and part.get("type") == "text":
            texts.append(str(part.get("text", "")))
        else:
            raise TemplateRenderError("a non-text content part has engine-specific tokens")
    return "\n".join(texts)


def special_tokens(tokenizer_config: Mapping[str, Any]) -> dict[str, str]:
    """The special tokens a template sees, from `tokenizer_config.json` (a token is a string
    or an AddedToken object with a `content`)."""
    out: dict[str, str] = {}
    for name in SPECIAL_TOKEN_NAMES:
        value = tokenizer_config.get(name)
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            out[name] = value
    return out


def template_source(tokenizer_config: Mapping[str, Any]) -> str | None:
    """`chat_template` of a `tokenizer_config.json`: a string, or a list of named templates
    of which the one named "default" is taken."""
    value = tokenizer_config.get("chat_template")
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        for item in value:
            if isinstance(item, dict) and item.get("name") == "default":
                template = item.get("template")
                return template if isinstance(template, str) else None
    return None
