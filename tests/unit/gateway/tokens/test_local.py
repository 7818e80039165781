"""LocalTokenizer: the chat template, then tokenizer.json, as vLLM tokenizes a prompt."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gateway.inference_request import InferenceRequest
from gateway.tokens.chat_template import ChatTemplate
from gateway.tokens.local import LocalTokenizer, MissingExtraError, load_local_tokenizer
from sim.emulator.openai_api import render_chat
from tests.support.tokenizer_files import CHATML, train_tokenizer, write_model_dir

MESSAGES = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "what is the plan for today"},
]


def _req(api: str, prompt: object, body_bytes: int = 100) -> InferenceRequest:
    return InferenceRequest(api, "m", False, None, body_bytes, prompt)


def _local(bos: bool = False, offload_bytes: int = 1 << 30) -> LocalTokenizer:
    return LocalTokenizer(train_tokenizer(bos), ChatTemplate(CHATML.read_text()), offload_bytes)


async def test_chat_is_rendered_then_encoded_without_special_tokens() -> None:
    tok = train_tokenizer(bos=True)
    expected = tok.encode(render_chat(MESSAGES), add_special_tokens=False).ids
    assert await _local(bos=True).token_ids(_req("chat", MESSAGES)) == expected
    assert expected[0] == tok.token_to_id("<|im_start|>")


async def test_a_completions_prompt_gets_the_special_tokens() -> None:
    tok = train_tokenizer(bos=True)
    ids = await _local(bos=True).token_ids(_req("completions", "what is the plan"))
    assert ids == tok.encode("what is the plan").ids
    assert ids is not None and ids[0] == tok.token_to_id("<s>")


async def test_token_id_prompts_are_taken_as_they_are() -> None:
    local = _local()
    assert await local.token_ids(_req("completions", [5, 6, 7])) == [5, 6, 7]
    assert await local.token_ids(_req("completions", [[5, 6]])) == [5, 6]
    single = await local.token_ids(_req("completions", ["the plan"]))
    assert single == await local.token_ids(_req("completions", "the plan"))


async def test_what_it_cannot_tokenize_is_none_and_counted() -> None:
    local = _local()
    assert await local.token_ids(_req("completions", ["a", "b"])) is None  # a batch
    assert await local.token_ids(_req("completions", [1, -2])) is None
    assert await local.token_ids(_req("embeddings", "text")) is None
    assert await local.token_ids(_req("responses", "text")) is None
    no_template = LocalTokenizer(train_tokenizer(), None)
    assert await no_template.token_ids(_req("chat", MESSAGES)) is None
    assert local.counters.unsupported == 4
    assert no_template.counters.unsupported == 1


async def test_a_template_error_is_none_and_counted() -> None:
    strict = ChatTemplate("{{ raise_exception('no system role') }}")
    local = LocalTokenizer(train_tokenizer(), strict)
    assert await local.token_ids(_req("chat", MESSAGES)) is None
    image = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}]
    assert await _local().token_ids(_req("chat", image)) is None
    assert local.counters.errors == 1


async def test_large_prompts_are_tokenized_in_a_thread_with_the_same_ids() -> None:
    inline, offloaded = _local(), _local(offload_bytes=1000)
    big = _req("chat", MESSAGES * 50, body_bytes=5000)
    assert await offloaded.token_ids(big) == await inline.token_ids(big)
    assert (inline.counters.offloaded, offloaded.counters.offloaded) == (0, 1)
    assert offloaded.counters.misses == 1


async def test_a_model_directory_is_loaded_with_its_config_template(tmp_path: Path) -> None:
    source = "{{ bos_token }}" + CHATML.read_text()
    model = write_model_dir(tmp_path / "m", chat_template=source, bos_token="<s>")
    local = load_local_tokenizer(str(model))
    ids = await local.token_ids(_req("chat", MESSAGES))
    tok = train_tokenizer()
    assert ids == tok.encode("<s>" + render_chat(MESSAGES), add_special_tokens=False).ids
    # A given .jinja file overrides the config's template; a file path works as a directory.
    given = load_local_tokenizer(str(model / "tokenizer.json"), str(CHATML))
    assert await given.token_ids(_req("chat", MESSAGES)) == ids[1:]


async def test_chat_template_jinja_beside_the_tokenizer_is_found(tmp_path: Path) -> None:
    model = write_model_dir(tmp_path / "m")
    assert await load_local_tokenizer(str(model)).token_ids(_req("chat", MESSAGES)) is None
    (model / "chat_template.jinja").write_text(CHATML.read_text())
    ids = await load_local_tokenizer(str(model)).token_ids(_req("chat", MESSAGES))
    assert ids == train_tokenizer().encode(render_chat(MESSAGES), add_special_tokens=False).ids


def test_missing_files_raise(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"no tokenizer\.json"):
        load_local_tokenizer(str(tmp_path))
    model = write_model_dir(tmp_path / "m")
    with pytest.raises(FileNotFoundError):
        load_local_tokenizer(str(model), str(tmp_path / "absent.jinja"))


def test_without_the_extra_the_error_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(MissingExtraError, match=r"kvgate\[tokens\]"):
        load_local_tokenizer("/nonexistent")
