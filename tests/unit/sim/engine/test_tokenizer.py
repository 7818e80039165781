from __future__ import annotations

import random
import sys
import types

import pytest

from sim.engine.tokenizer import BuiltinTokenizer, HFTokenizer, Tokenizer, split_pieces

PARAGRAPH = (
    "Large language models are increasingly deployed behind gateways that route each "
    "request to one of many inference engines. Because engines keep the attention keys and "
    "values of recently processed prompts in memory, sending a request to the engine that "
    "already holds its prefix can save most of the prefill computation and cut the time to "
    "the first token dramatically. However, a router that only chases cache hits tends to "
    "overload a few engines, so good policies balance locality against queue depth and "
    "memory pressure."
)


def test_golden_ids_are_stable() -> None:
    # Pinned: ids are a pure function of the text, shared by every process and release.
    assert BuiltinTokenizer().encode("Hello, world! The cache is warm.") == [
        15484, 22952, 21807, 18316, 22395, 13217, 21375, 9215, 18511, 19796, 11689, 16772,
    ]  # fmt: skip
    assert BuiltinTokenizer().encode("  indented\n\nlines_with_under") == [
        24642, 15170, 17116, 20987, 24560, 30174, 6805, 17835, 6805, 5129, 26097,
    ]  # fmt: skip


def test_pieces_follow_the_documented_rules() -> None:
    assert split_pieces("The quick brown fox.") == [
        "The", " quic", "k", " brow", "n", " fox", ".",
    ]  # fmt: skip
    # A run of whitespace is one piece but leaves its last space to the next word.
    assert split_pieces("a  b\n\nc \t.") == ["a", " ", " b", "\n\n", "c", " \t", "."]
    assert split_pieces("snake_case, 2024!") == ["snak", "e", "_", "case", ",", " 2024", "!"]
    assert "".join(split_pieces(PARAGRAPH)) == PARAGRAPH


def test_english_is_about_four_characters_per_token() -> None:
    ratio = len(PARAGRAPH) / len(BuiltinTokenizer().encode(PARAGRAPH))
    assert 3.0 < ratio < 5.0


@pytest.mark.parametrize(
    "text", [PARAGRAPH, "", "x", "  Tabs\tand\r\nnewlines\n\n\n", "naïve café — 東京 😀 ok"]
)
def test_decode_inverts_encode(text: str) -> None:
    tokenizer = BuiltinTokenizer()
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_ids_stay_in_the_vocabulary() -> None:
    tokenizer = BuiltinTokenizer(vocab_size=2000)
    ids = tokenizer.encode(PARAGRAPH)
    assert all(256 <= i < 2000 for i in ids)
    assert tokenizer.vocab_size == 2000


def test_generation_vocabulary_round_trips_through_text() -> None:
    tokenizer = BuiltinTokenizer()
    vocabulary = tokenizer.generation_vocabulary()
    assert len(vocabulary) >= 256
    ids = [token_id for token_id, _ in vocabulary]
    assert len(set(ids)) == len(ids)
    for _, text in vocabulary:
        assert text[0] == " " and 1 <= len(text) - 1 <= 4
        assert text[1:].isalpha() and text[1:].islower()
    # A "generated" answer: any sequence of vocabulary entries, repeats allowed.
    rng = random.Random(7)
    answer = [rng.choice(vocabulary) for _ in range(300)]
    answer_ids = [token_id for token_id, _ in answer]
    answer_text = "".join(text for _, text in answer)
    assert tokenizer.encode(answer_text) == answer_ids
    assert BuiltinTokenizer().decode(answer_ids) == answer_text  # a fresh instance knows them
    # Fed back after a prompt, the answer keeps its ids (what a multi-turn prefix hit needs).
    turn = tokenizer.encode("User: hi. Assistant:" + answer_text)
    assert turn[-len(answer_ids) :] == answer_ids


def test_decode_rejects_unknown_ids() -> None:
    with pytest.raises(ValueError, match="12"):
        BuiltinTokenizer().decode([12])


def test_builtin_satisfies_the_protocol() -> None:
    tokenizer: Tokenizer = BuiltinTokenizer()
    assert tokenizer.vocab_size == 32000


def test_hf_tokenizer_without_the_package_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(ImportError, match="pip install tokenizers"):
        HFTokenizer("tokenizer.json")


def test_hf_tokenizer_wraps_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, object]] = []

    class FakeEncoding:
        ids = [5, 6]

    class FakeTokenizer:
        @staticmethod
        def from_file(path: str) -> FakeTokenizer:
            calls.append(("from_file", path))
            return FakeTokenizer()

        def get_vocab_size(self) -> int:
            return 4096

        def encode(self, text: str, add_special_tokens: bool) -> FakeEncoding:
            calls.append(("encode", (text, add_special_tokens)))
            return FakeEncoding()

        def decode(self, ids: list[int], skip_special_tokens: bool) -> str:
            calls.append(("decode", (ids, skip_special_tokens)))
            return "hi"

    module = types.ModuleType("tokenizers")
    module.Tokenizer = FakeTokenizer  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tokenizers", module)
    tokenizer: Tokenizer = HFTokenizer("/models/tiny/tokenizer.json")
    assert tokenizer.vocab_size == 4096
    assert tokenizer.encode("hi") == [5, 6]
    assert tokenizer.decode((5, 6)) == "hi"
    assert calls == [
        ("from_file", "/models/tiny/tokenizer.json"),
        ("encode", ("hi", False)),
        ("decode", ([5, 6], False)),
    ]
