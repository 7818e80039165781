"""The quality benchmark's prompt synthesis; no sockets."""

from __future__ import annotations

from bench.quality.workloads import text_prompt
from sim.engine.tokenizer import BuiltinTokenizer


def test_text_prompt_reads_back_as_one_word_per_id_and_keeps_shared_prefixes() -> None:
    tokenizer = BuiltinTokenizer()
    vocabulary = [piece for _, piece in tokenizer.generation_vocabulary()]
    a = text_prompt([5000, 7, 123456, 42], vocabulary)
    b = text_prompt([5000, 7, 99], vocabulary)
    assert len(tokenizer.encode(a)) == 4
    ids_a, ids_b = tokenizer.encode(a), tokenizer.encode(b)
    assert ids_a[:2] == ids_b[:2]
    assert ids_a[2] != ids_b[2]
