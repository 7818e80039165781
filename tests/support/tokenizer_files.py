"""A small byte-level BPE `tokenizer.json` trained in the test (nothing downloads), and the
files a model directory holds beside it.

The vocabulary passes 1,256 ids, so the emulator (`kvgate emulate --tokenizer`) finds its
generation band (ids 1000-1255) in it.
"""

from __future__ import annotations

import json
import random
from functools import cache
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from sim.workloads import synth_text

SPECIAL = ["<s>", "</s>", "<|im_start|>", "<|im_end|>"]
CHATML = Path(__file__).resolve().parents[1] / "fixtures" / "chatml.jinja"


@cache
def train_tokenizer(bos: bool = False) -> Tokenizer:
    """BPE over synthetic text and numbered words; `bos`: a post-processor that adds `<s>`
    in front of every sequence (as a Llama tokenizer does with special tokens on). Trained
    once per process: callers must not change it."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    rng = random.Random(7)
    corpus = [synth_text(rng, 200) for _ in range(20)]
    corpus += [" ".join(f"w{i}x{i % 97}" for i in range(j, 3000, 7)) for j in range(7)]
    trainer = trainers.BpeTrainer(
        vocab_size=1600,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer)
    if bos:
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", tok.token_to_id("<s>"))]
        )
    return tok


def write_model_dir(directory: Path, bos: bool = False, **config: Any) -> Path:
    """`directory` with tokenizer.json and, given any `config` keys, tokenizer_config.json."""
    directory.mkdir(parents=True, exist_ok=True)
    train_tokenizer(bos).save(str(directory / "tokenizer.json"))
    if config:
        (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return directory
