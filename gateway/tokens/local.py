"""`LocalTokenizer`: a model's own `tokenizer.json` and chat template, loaded from disk at start.

Chat: the messages are rendered with the chat template (`chat_template.ChatTemplate`), then
encoded with `add_special_tokens=False` (the template writes BOS itself), as vLLM does.
Completions: a string prompt is encoded with `add_special_tokens=True`; a prompt of token ids
is taken as it is; a batch of one prompt is that prompt; larger batches are not tokenized (None).

Prompts over `offload_bytes` of request body are tokenized in a worker thread (`tokenizers`
releases the GIL) so as not to hold the event loop; shorter ones are cheaper inline
(`python -m bench tokenize`). `TOKENIZERS_PARALLELISM` is off unless set (one prompt gains
nothing, and a process that forks after using it warns).

`load_local_tokenizer(path, chat_template)`: `path` is a directory holding `tokenizer.json` (and
optionally `tokenizer_config.json`, `chat_template.jinja`) or that file; `chat_template` a
`.jinja` file overriding the config's. Without the `tokens` extra it raises `MissingExtraError`.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.inference_request import COMPLETION_PROMPT_APIS, InferenceRequest
from gateway.tokens.protocol import TokenizerCounters

if TYPE_CHECKING:  # jinja2 is imported only when a local tokenizer is loaded
    from gateway.tokens.chat_template import ChatTemplate

logger = logging.getLogger(__name__)

# Request bodies from this size up (~200 tokens) are tokenized in a thread: inline, encoding
# costs the loop ~2.5 µs of CPU a token here, the thread hop ~0.1-0.2 ms (`python -m bench
# tokenize`, 2026-12-01).
OFFLOAD_BYTES = 1024


class MissingExtraError(ImportError):
    """The optional `tokens` extra (tokenizers, jinja2) is not installed."""


class LocalTokenizer:
    """A `PromptTokenizer` over an in-process `tokenizers.Tokenizer` and a chat template
    (None: chat requests are not tokenized)."""

    def __init__(
        self, tokenizer: Any, template: ChatTemplate | None, offload_bytes: int = OFFLOAD_BYTES
    ) -> None:
        self._tokenizer = tokenizer  # a tokenizers.Tokenizer
        # The batch calls release the GIL while they encode (`encode` holds it: a thread
        # would still stall the loop); `_fast` skips offsets (tokenizers >= 0.21). Same ids.
        self._encode_batch = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)
        self._template = template
        self._offload_bytes = offload_bytes
        self._tally = {"misses": 0, "errors": 0, "unsupported": 0, "offloaded": 0}

    @property
    def counters(self) -> TokenizerCounters:
        return TokenizerCounters(**self._tally)

    async def token_ids(self, req: InferenceRequest) -> list[int] | None:
        if req.api in COMPLETION_PROMPT_APIS:
            prompt = single_prompt(req.prompt)
            if isinstance(prompt, list):
                return prompt
        elif req.api == "chat" and self._template is not None and isinstance(req.prompt, list):
            prompt = req.prompt
        else:
            prompt = None
        if prompt is None:
            self._tally["unsupported"] += 1
            return None
        self._tally["misses"] += 1
        try:
            if req.body_bytes >= self._offload_bytes:
                self._tally["offloaded"] += 1
                return await asyncio.to_thread(self.encode, req.api, prompt)
            return self.encode(req.api, prompt)
        except Exception as exc:  # a template's raise_exception, an odd message, a tokenizer bug
            self._tally["errors"] += 1
            logger.debug("cannot tokenize a %s prompt of %s: %s", req.api, req.model, exc)
            return None

    def encode(self, api: str, prompt: Any) -> list[int]:
        """Token ids of a chat `prompt` (messages) or a completions prompt string."""
        if api == "chat":
            assert self._template is not None
            text = self._template.render(prompt)
            ids: list[int] = self._encode_batch([text], add_special_tokens=False)[0].ids
            return ids
        ids = self._encode_batch([prompt], add_special_tokens=True)[0].ids
        return ids


def single_prompt(prompt: Any) -> str | list[int] | None:
    """A completions prompt as one string or one list of token ids (None: a batch of several,
    or not a prompt)."""
    if isinstance(prompt, str):
        return prompt
    if not isinstance(prompt, list) or not prompt:
        return None
    if _is_ids(prompt):
        return prompt
    if len(prompt) == 1 and (isinstance(prompt[0], str) or _is_ids(prompt[0])):
        return single_prompt(prompt[0])
    return None


def _is_ids(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(type(v) is int and v >= 0 for v in value)


def load_local_tokenizer(
    path: str, chat_template: str | None = None, offload_bytes: int = OFFLOAD_BYTES
) -> LocalTokenizer:
    """Load `tokenizer.json` (and the chat template) from `path`; OSError/ValueError for
    missing or unreadable files, `MissingExtraError` without the `tokens` extra."""
    try:
        tokenizers = importlib.import_module("tokenizers")
        importlib.import_module("jinja2")
        from gateway.tokens.chat_template import ChatTemplate, special_tokens, template_source
    except ImportError as exc:
        raise MissingExtraError(
            "a local tokenizer needs the tokens extra: pip install 'kvgate[tokens]'"
        ) from exc
    file = Path(path)
    directory = file.parent if file.is_file() else file
    if not file.is_file():
        file = directory / "tokenizer.json"
    if not file.is_file():
        raise FileNotFoundError(f"{path}: no tokenizer.json there")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    tokenizer = tokenizers.Tokenizer.from_file(str(file))
    config = _read_config(directory / "tokenizer_config.json")
    source = _template_source(directory, template_source(config), chat_template)
    template = None
    if source is not None:
        template = ChatTemplate(source, special_tokens(config))
    else:
        logger.warning("tokenizer %s has no chat template: chat prompts stay approximate", path)
    return LocalTokenizer(tokenizer, template, offload_bytes)


def _read_config(file: Path) -> dict[str, Any]:
    if not file.is_file():
        return {}
    data = json.loads(file.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{file}: not a JSON object")
    return data


def _template_source(directory: Path, configured: str | None, given: str | None) -> str | None:
    """The given .jinja file, else tokenizer_config.json's `chat_template`, else
    `chat_template.jinja` beside the tokenizer (where recent transformers save it)."""
    if given is not None:
        return Path(given).read_text(encoding="utf-8")
    beside = directory / "chat_template.jinja"
    if configured is None and beside.is_file():
        return beside.read_text(encoding="utf-8")
    return configured
