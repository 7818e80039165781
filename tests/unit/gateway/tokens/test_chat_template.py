"""The chat template renders as transformers' apply_chat_template does."""

from __future__ import annotations

import pytest

from gateway.tokens.chat_template import (
    ChatTemplate,
    TemplateRenderError,
    special_tokens,
    template_source,
)
from sim.emulator.openai_api import render_chat
from tests.support.tokenizer_files import CHATML

MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hi there"},
    {"role": "assistant", "content": None},
    {"role": "user", "content": "Again — ünïcode"},
]


def test_the_chatml_fixture_renders_as_the_emulator_does() -> None:
    template = ChatTemplate(CHATML.read_text())
    assert template.render(MESSAGES) == render_chat(MESSAGES)


def test_block_tags_trim_their_newlines_and_indentation() -> None:
    source = (
        "{% for m in messages %}\n    [{{ m.role }}]\n{% endfor %}\n"
        "{% if add_generation_prompt %}\n>{% endif %}"
    )
    assert ChatTemplate(source).render(MESSAGES[:2]) == "    [system]\n    [user]\n>"


def test_special_tokens_reach_the_template_as_strings() -> None:
    config = {"bos_token": {"content": "<s>", "lstrip": False}, "eos_token": "</s>", "x": 1}
    assert special_tokens(config) == {"bos_token": "<s>", "eos_token": "</s>"}
    template = ChatTemplate(
        "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}", special_tokens(config)
    )
    assert template.render(MESSAGES[1:2]) == "<s>Hi there</s>"


def test_raise_exception_is_a_render_error() -> None:
    source = (
        "{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}{% endif %}"
    )
    with pytest.raises(TemplateRenderError, match="first must be user"):
        ChatTemplate(source).render(MESSAGES)


def test_tojson_keeps_non_ascii_text() -> None:
    assert (
        ChatTemplate("{{ messages[0].content | tojson }}").render(MESSAGES[3:])
        == '"Again — ünïcode"'
    )


def test_text_parts_are_joined_with_newlines_and_other_parts_refused() -> None:
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    template = ChatTemplate("{{ messages[0].content }}")
    assert template.render([{"role": "user", "content": parts}]) == "a\nb"
    image = {"type": "image_url", "image_url": {"url": "http://x/y.png"}}
    with pytest.raises(TemplateRenderError):
        template.render([{"role": "user", "content": [*parts, image]}])
    with pytest.raises(TemplateRenderError):
        template.render([{"content": "no role"}])


def test_the_default_of_a_list_of_named_templates_is_taken() -> None:
    config = {
        "chat_template": [
            {"name": "tool_use", "template": "T"},
            {"name": "default", "template": "D"},
        ]
    }
    assert template_source(config) == "D"
    assert template_source({"chat_template": "S"}) == "S"
    assert template_source({}) is None


def test_messages_reach_the_template_as_vllm_passes_them() -> None:
    source = (
        "{% for m in messages %}{{ m.role }}:{{ m.content }}"
        "{% for c in m.tool_calls or [] %}[{{ c.function.name }} {{ c.function.arguments.city }}]"
        "{% endfor %}{{ m.tool_call_id or '' }}{{ m.extra or '' }}|{% endfor %}"
    )
    messages = [
        {"role": "user", "content": "weather?", "extra": "dropped"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "w", "arguments": '{"city": "Oslo"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "rain"},
        {"role": "assistant", "content": "ok", "tool_calls": []},
    ]
    assert (
        ChatTemplate(source).render(messages)
        == "user:weather?|assistant:[w Oslo]|tool:rainc1|assistant:ok|"
    )
    bad = [{"role": "assistant", "tool_calls": [{"function": {"name": "w", "arguments": "{"}}]}]
    with pytest.raises(TemplateRenderError, match="not valid JSON"):
        ChatTemplate(source).render(bad)
