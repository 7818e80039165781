"""Train a small BPE tokenizer on local text; run by the vLLM venv's Python, which has `tokenizers`.

Usage: python train_tokenizer.py OUT_JSON VOCAB_SIZE TEXT_FILE...

Whitespace pre-tokenisation and no byte-level pieces, so every token decodes to visible text
(a random token from a dummy-weight model never leaves a half-decoded UTF-8 sequence that the
server would hold back from the stream). Prints the vocabulary size reached.
"""

import sys

from tokenizers import (  # in .venv-vllm/ (and kvgate's `tokens` extra)
    Tokenizer,
    models,
    pre_tokenizers,
    trainers,
)


def main() -> None:
    out, vocab_size, files = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False
    )
    tok.train(files, trainer)
    tok.save(out)
    print(tok.get_vocab_size())


if __name__ == "__main__":
    main()
