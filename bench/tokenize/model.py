"""The bench's model directory (a BPE tokenizer trained on the repository's text, a ChatML
chat template) and chat prompts of a given size in tokens."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from bench import REPO_ROOT

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
_SOURCES = ("README.md", "CHANGELOG.md", "docs", "gateway", "sim", "scoring", "routing", "health")


def corpus() -> str:
    """The repository's documentation and source text."""
    texts: list[str] = []
    for name in _SOURCES:
        path = REPO_ROOT / name
        files = (
            [path] if path.is_file() else sorted(path.rglob("*.md")) + sorted(path.rglob("*.py"))
        )
        texts.extend(f.read_text(encoding="utf-8") for f in files)
    return "\n\n".join(texts)


def write_model(directory: Path, text: str, vocab_size: int) -> Path:
    """Train the tokenizer on `text`; write tokenizer.json and tokenizer_config.json."""
    directory.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(text.split("\n\n"), trainer)
    tok.save(str(directory / "tokenizer.json"))
    config = {"chat_template": CHATML, "eos_token": "<|im_end|>"}
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return directory


def chat(tok: Tokenizer, text: str, tokens: int, rng: random.Random) -> list[dict[str, Any]]:
    """A system and a user message, about `tokens` tokens together, cut from `text` at a
    random place (so every call gets fresh text)."""
    chars = int(tokens * _chars_per_token(tok, text))
    start = rng.randrange(0, max(1, len(text) - chars))
    body = text[start : start + chars]
    split = len(body) // 10
    return [
        {"role": "system", "content": body[:split]},
        {"role": "user", "content": body[split:]},
    ]


_RATIO: dict[int, float] = {}


def _chars_per_token(tok: Tokenizer, text: str) -> float:
    key = id(tok)
    if key not in _RATIO:
        sample = text[:200_000]
        _RATIO[key] = len(sample) / len(tok.encode(sample).ids)
    return _RATIO[key]
