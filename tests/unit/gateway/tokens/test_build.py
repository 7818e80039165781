"""The `tokenizers:` config section and the per-model TokenizerSet built from it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gateway.tokens import build_tokenizers
from gateway.tokens.engine import EngineTokenizer
from gateway.tokens.local import LocalTokenizer
from routing.config.schema import ConfigError, TokenizerEntry, parse_config
from tests.support.tokenizer_files import CHATML, write_model_dir


def _entries(*tokenizers: dict[str, object]) -> list[TokenizerEntry]:
    return parse_config({"tokenizers": list(tokenizers)}).tokenizers


def test_defaults() -> None:
    (entry,) = _entries({"model": "*", "source": "engine"})
    assert (entry.cache_entries, entry.timeout_s, entry.path) == (4096, 1.0, None)
    assert parse_config({}).tokenizers == []


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        (
            [{"model": "m", "source": "local"}],
            "tokenizers.0: Value error, source local needs a path",
        ),
        ([{"model": "m", "source": "hub"}], "tokenizers.0.source"),
        ([{"model": "m", "source": "engine", "timeout_s": 0}], "tokenizers.0.timeout_s"),
        ([{"source": "engine"}], "tokenizers.0.model"),
        (
            [{"model": "m", "source": "engine"}, {"model": "m", "source": "engine"}],
            "two tokenizers entries name model 'm'",
        ),
    ],
)
def test_invalid_entries_name_the_field(entries: list[object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config({"tokenizers": entries})


def test_a_model_gets_its_own_entry_else_the_wildcard(tmp_path: Path) -> None:
    model = write_model_dir(tmp_path / "m")
    entries = _entries(
        {"model": "llama", "source": "local", "path": str(model), "chat_template": str(CHATML)},
        {"model": "*", "source": "engine", "cache_entries": 10},
    )
    tokenizers = build_tokenizers(entries, lambda model: None)
    assert isinstance(tokenizers.for_model("llama"), LocalTokenizer)
    assert isinstance(tokenizers.for_model("other"), EngineTokenizer)
    assert set(tokenizers.counters()) == {"llama", "*"}
    only_local = build_tokenizers(entries[:1], lambda model: None)
    assert only_local.for_model("other") is None
    assert not build_tokenizers([], lambda model: None)


def test_missing_files_name_the_field(tmp_path: Path) -> None:
    entries = _entries({"model": "m", "source": "local", "path": str(tmp_path / "none")})
    with pytest.raises(ConfigError, match=r"^tokenizers\.0\.path: .*no tokenizer.json"):
        build_tokenizers(entries, lambda model: None)
    model = write_model_dir(tmp_path / "m")
    missing = str(tmp_path / "absent.jinja")
    entries = _entries(
        {"model": "m", "source": "local", "path": str(model), "chat_template": missing}
    )
    with pytest.raises(ConfigError, match=r"^tokenizers\.0\.chat_template: "):
        build_tokenizers(entries, lambda model: None)


def test_an_invalid_tokenizer_file_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_text("{}")
    entries = _entries({"model": "m", "source": "local", "path": str(tmp_path)})
    with pytest.raises(ConfigError, match=r"^tokenizers\.0: cannot load"):
        build_tokenizers(entries, lambda model: None)


def test_without_the_extra_a_local_entry_fails_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "jinja2", None)
    entries = _entries({"model": "m", "source": "local", "path": "/x"})
    with pytest.raises(ConfigError) as info:
        build_tokenizers(entries, lambda model: None)
    assert str(info.value) == (
        "tokenizers.0.source: a local tokenizer needs the tokens extra: "
        "pip install 'kvgate[tokens]'"
    )


async def test_the_engine_client_made_here_is_closed() -> None:
    tokenizers = build_tokenizers(_entries({"model": "*", "source": "engine"}), lambda m: None)
    await tokenizers.aclose()
