"""Tokenizers for the simulator: a deterministic built-in one and a Hugging Face wrapper.

The engine model, the HTTP emulator and the gateway must turn the same text into the same
ids, or prefix hits cannot line up. `BuiltinTokenizer` needs no files and gives English text
about 4 characters per token:

- pieces: a word (letters and digits) with at most one leading space, cut into 4-character
  pieces (the space stays on the first); a whitespace run, its last space going to a following
  word; every other character alone. The pieces concatenate back to the text.
- ids 0–255 are reserved; 256–767 are the generation vocabulary, 512 fixed pieces `" " + word`
  (consonant-vowel-consonant); any other piece is `blake2b(piece) mod (vocab_size − 768) +
  768`, a pure function of the text, so every process agrees without shared state.
- `decode` inverts `encode` through the pieces this instance has seen; colliding hashed pieces
  (about N²/(2·(vocab_size − 768)) pairs for N) decode to the first seen. Generation-vocabulary
  text round-trips exactly, so an answer fed back hits the blocks cached while generating it.
"""

from __future__ import annotations

import hashlib
import importlib
import itertools
import re
from collections.abc import Sequence
from typing import Any, Protocol

_PIECE = re.compile(r" ?[^\W_]+|\s+(?= [^\W_])|\s+|\S")
_MAX_WORD_PIECE = 4
_RESERVED_IDS = 256
_GENERATION_WORDS: tuple[str, ...] = tuple(
    f" {first}{vowel}{last}"
    for first, vowel, last in itertools.product("bdfgklmnprstvz", "aeiou", "bdfgklmnprstvz")
)[:512]
_FIRST_HASHED_ID = _RESERVED_IDS + len(_GENERATION_WORDS)


class Tokenizer(Protocol):
    """What the simulator needs from a tokenizer."""

    @property
    def vocab_size(self) -> int: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


def split_pieces(text: str) -> list[str]:
    """The built-in tokenizer's pieces of `text` (see the module docstring)."""
    pieces: list[str] = []
    for match in _PIECE.finditer(text):
        piece = match.group()
        word_len = len(piece) - (piece[0] == " ")
        if word_len <= _MAX_WORD_PIECE or not piece[-1].isalnum():
            pieces.append(piece)
            continue
        first = len(piece) - word_len + _MAX_WORD_PIECE
        pieces.append(piece[:first])
        pieces.extend(
            piece[i : i + _MAX_WORD_PIECE] for i in range(first, len(piece), _MAX_WORD_PIECE)
        )
    return pieces


class BuiltinTokenizer:
    """Deterministic hashing tokenizer, ~4 characters per token (see the module docstring)."""

    def __init__(self, vocab_size: int = 32000) -> None:
        if vocab_size <= 2 * _FIRST_HASHED_ID:
            raise ValueError(f"vocab_size must exceed {2 * _FIRST_HASHED_ID}, got {vocab_size}")
        self._vocab_size = vocab_size
        self._generation = [(_RESERVED_IDS + i, w) for i, w in enumerate(_GENERATION_WORDS)]
        self._id_of: dict[str, int] = {text: token_id for token_id, text in self._generation}
        self._piece_of: dict[int, str] = dict(self._generation)

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    def piece_id(self, piece: str) -> int:
        """The id of one piece; remembers the piece so `decode` can return it."""
        token_id = self._id_of.get(piece)
        if token_id is None:
            digest = hashlib.blake2b(piece.encode("utf-8"), digest_size=8).digest()
            token_id = int.from_bytes(digest, "big") % (self._vocab_size - _FIRST_HASHED_ID)
            token_id += _FIRST_HASHED_ID
            self._id_of[piece] = token_id
            self._piece_of.setdefault(token_id, piece)
        return token_id

    def encode(self, text: str) -> list[int]:
        piece_id = self.piece_id
        return [piece_id(piece) for piece in split_pieces(text)]

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ids this instance produced; ValueError for an id it never saw."""
        piece_of = self._piece_of
        try:
            return "".join(piece_of[token_id] for token_id in ids)
        except KeyError as exc:
            raise ValueError(
                f"token id {exc.args[0]} was never produced by this tokenizer"
            ) from None

    def generation_vocabulary(self) -> list[tuple[int, str]]:
        """The 512 fixed (token_id, " word") pairs that are safe to emit as generated text."""
        return list(self._generation)


class HFTokenizer:
    """A Hugging Face `tokenizer.json`, through the optional `tokenizers` package."""

    def __init__(self, path: str) -> None:
        try:
            # Imported by name: the package is optional and ships no type stubs.
            tokenizers = importlib.import_module("tokenizers")
        except ImportError as exc:
            raise ImportError(
                "HFTokenizer needs the optional 'tokenizers' package (pip install tokenizers); "
                "BuiltinTokenizer works without it"
            ) from exc
        self._tokenizer: Any = tokenizers.Tokenizer.from_file(path)

    @property
    def vocab_size(self) -> int:
        return int(self._tokenizer.get_vocab_size())

    def encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._tokenizer.decode(list(ids), skip_special_tokens=False))
