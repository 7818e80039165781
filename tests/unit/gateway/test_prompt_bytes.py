from __future__ import annotations

import base64
from array import array
from typing import Any

import pytest

from gateway import prompt_bytes as prompt_bytes_module
from gateway.errors import BadRequestError
from gateway.inference_request import parse_inference_body
from gateway.prompt_bytes import prompt_bytes
from scoring.state.prefix_hash import GROUP, hash_blocks, prefix_seed

SEED = prefix_seed("m")
SYSTEM = {"role": "system", "content": "You are a careful assistant. " * 20}
TURNS: list[tuple[dict[str, Any], dict[str, Any]]] = [
    (
        {"role": "user", "content": f"Question {i}: " + "why is the sky blue? " * (5 + 7 * i)},
        {"role": "assistant", "content": f"Answer {i}: " + "Rayleigh scattering. " * (3 + 5 * i)},
    )
    for i in range(3)
]


def _conversation(turn: int) -> list[dict[str, Any]]:
    """The messages a client sends for turn `turn` (1-based): history plus the new question."""
    messages: list[dict[str, Any]] = [SYSTEM]
    for user, assistant in TURNS[: turn - 1]:
        messages += [user, assistant]
    return [*messages, TURNS[turn - 1][0]]


def _image(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def test_chat_record_layout() -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "name": "ann", "content": "hi"},
    ]
    assert prompt_bytes("chat", messages) == b"system\x1fbe brief\x1euser\x1fann\x1fhi\x1e"


def test_chat_turns_extend_the_previous_turns_hashes() -> None:
    previous: tuple[int, ...] = ()
    for turn in (1, 2, 3):
        data = prompt_bytes("chat", _conversation(turn))
        hashes = hash_blocks(data, SEED, 8)
        # Only full blocks are hashed, so the previous turn's last partial block is not among
        # its hashes: every previous hash is kept, and the new turn adds more.
        assert hashes[: len(previous)] == previous
        assert len(hashes) > len(previous)
        previous = hashes
    assert len(previous) > GROUP  # the third turn reaches the doubled blocks


def test_json_formatting_does_not_matter() -> None:
    compact = b'{"model":"m","messages":[{"role":"user","content":"caf\xc3\xa9"}],"stream":true}'
    spaced = (
        b'{\n  "stream": true,\n  "messages": [\n    {"content": "caf\\u00e9",  "role": "user"}\n'
        b'  ],\n  "model": "m"\n}'
    )
    a, b = parse_inference_body("chat", compact), parse_inference_body("chat", spaced)
    assert prompt_bytes("chat", a.prompt) == prompt_bytes("chat", b.prompt)
    assert prompt_bytes("chat", a.prompt) == "user\x1fcafé\x1e".encode()


def test_text_parts_are_text() -> None:
    parts = [{"type": "text", "text": "look "}, {"type": "text", "text": "here"}]
    as_parts = prompt_bytes("chat", [{"role": "user", "content": parts}])
    assert as_parts == prompt_bytes("chat", [{"role": "user", "content": "look here"}])


def test_images_are_included_by_reference() -> None:
    def render(url: str) -> bytes:
        content = [{"type": "text", "text": "What is this?"}, _image(url)]
        return prompt_bytes("chat", [{"role": "user", "content": content}])

    cat, dog = render("https://x.test/cat.png"), render("https://x.test/dog.png")
    assert cat != dog
    assert cat == render("https://x.test/cat.png")
    assert b"<image_url:" in cat
    pixels = base64.b64encode(bytes(3_000_000)).decode()
    huge = render(f"data:image/png;base64,{pixels}")
    assert len(huge) < 100
    assert b"base64" not in huge
    other = render(f"data:image/png;base64,{pixels[:-4]}AAAB")
    assert other != huge
    # A different image changes the hash of the block that holds it, and all after.
    messages = [SYSTEM, {"role": "user", "content": [_image("https://x.test/cat.png")]}]
    swapped = [SYSTEM, {"role": "user", "content": [_image("https://x.test/dog.png")]}]
    a = hash_blocks(prompt_bytes("chat", messages), SEED, 16)
    b = hash_blocks(prompt_bytes("chat", swapped), SEED, 16)
    shared = len(prompt_bytes("chat", [SYSTEM])) // 16
    assert a[:shared] == b[:shared]
    assert a[-1] != b[-1]


def test_tool_calls_and_results_are_included() -> None:
    def render(city: str, result: str) -> bytes:
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "weather", "arguments": f'{{"city": "{city}"}}'},
        }
        return prompt_bytes(
            "chat",
            [
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_1", "content": result},
            ],
        )

    paris = render("Paris", "sunny")
    assert b'weather({"city": "Paris"})' in paris
    assert b"\x1fcall_1\x1e" in paris
    assert paris != render("Rome", "sunny")
    assert paris != render("Paris", "rain")


def test_token_id_prompts_are_four_bytes_a_token() -> None:
    ids = [1, 15043, 3186, 128_000]
    assert prompt_bytes("completions", ids) == array("I", ids).tobytes()
    assert len(prompt_bytes("completions", ids)) == 4 * len(ids)
    # Shared leading tokens share leading bytes, so they share blocks.
    long_ids = list(range(1_000))
    a = hash_blocks(prompt_bytes("completions", [*long_ids, 7]), SEED, 64)
    b = hash_blocks(prompt_bytes("completions", [*long_ids, 8]), SEED, 64)
    assert a == b and len(a) == 62  # the differing token is in the partial last block
    # Ids that do not fit 32 bits fall back to JSON rather than failing.
    assert prompt_bytes("completions", [-1, 2**40]) == b"[-1,1099511627776]"


def test_batches_route_on_their_first_prompt() -> None:
    assert prompt_bytes("completions", ["first prompt", "second"]) == b"first prompt"
    assert prompt_bytes("completions", [[5, 6], [7]]) == array("I", [5, 6]).tobytes()
    assert prompt_bytes("completions", "plain") == b"plain"
    assert prompt_bytes("embeddings", ["a", "b"]) == b"a"
    assert prompt_bytes("completions", []) == b""


def test_generate_renders_as_completions_do() -> None:
    """SGLang's /generate and a completions request of the same prompt share their blocks."""
    for prompt in ("Once upon a time", [1, 15043, 3186], ["batch first", "x"], [[4, 5], [6]]):
        assert prompt_bytes("generate", prompt) == prompt_bytes("completions", prompt)
    assert prompt_bytes("generate", None) == b""  # input_embeds: routed by load only
    assert prompt_bytes("tokenize", None) == b""


def test_content_parts_and_messages_outside_chat() -> None:
    parts = [{"type": "text", "text": "query "}, {"type": "image_url", "image_url": {"url": "u"}}]
    rendered = prompt_bytes("rerank", parts)
    assert rendered.startswith(b"query <image_url:")
    messages = [{"role": "user", "content": "hi"}]
    assert prompt_bytes("pooling", messages) == prompt_bytes("chat", messages)


def test_responses_api_with_instructions() -> None:
    assert prompt_bytes("responses", "hello", "Be terse.") == b"Be terse.\x1ehello"
    assert prompt_bytes("responses", "hello") == b"hello"
    items = [{"role": "user", "content": [{"type": "input_text", "text": "hello"}]}]
    assert prompt_bytes("responses", items, "Be terse.") == b"Be terse.\x1euser\x1fhello\x1e"
    # Instructions come first, so a change of instructions changes every hash.
    a = hash_blocks(prompt_bytes("responses", "x" * 500, "Be terse."), SEED, 64)
    b = hash_blocks(prompt_bytes("responses", "x" * 500, "Be chatty."), SEED, 64)
    assert not set(a) & set(b)


def test_responses_history_keeps_assistant_text_and_tool_items() -> None:
    reply = {"role": "assistant", "content": [{"type": "output_text", "text": "It is sunny."}]}
    assert prompt_bytes("responses", [reply]) == b"assistant\x1fIt is sunny.\x1e"

    def render(name: str, output: str) -> bytes:
        return prompt_bytes(
            "responses",
            [
                {"role": "user", "content": "weather?"},
                {"type": "function_call", "call_id": "c1", "name": name, "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": output},
            ],
        )

    assert render("weather", "sunny") != render("weather", "rain")
    assert render("weather", "sunny") != render("time", "sunny")
    assert b"<function_call_output:" in render("weather", "sunny")


def test_unexpected_shapes_do_not_fail() -> None:
    assert prompt_bytes("chat", "not a list") == b""
    assert prompt_bytes("chat", ["stray"]).startswith(b"<str:")
    assert prompt_bytes("chat", [{"role": "user", "content": {"odd": 1}}]).startswith(b"user\x1f<")


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("api", "prompt"),
    [
        ("chat", [{"role": "user", "content": [{"type": "image_url", "x": _nested(300)}]}]),
        ("chat", [{"role": "user", "content": _nested(300)}]),
        ("completions", [_nested(300)]),
        ("responses", [{"type": "function_call", "arguments": _nested(300)}]),
    ],
    ids=["content-part", "content", "token-ids", "responses-item"],
)
def test_a_prompt_nested_too_deeply_is_a_bad_request(api: str, prompt: Any) -> None:
    with pytest.raises(BadRequestError) as caught:
        prompt_bytes(api, prompt)
    assert caught.value.status == 400 and caught.value.code == "invalid_prompt"


def test_rendering_stops_after_max_items_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prompt_bytes_module, "MAX_ITEMS", 10)
    many = [{"role": "u", "content": str(i)} for i in range(30)]
    assert prompt_bytes("chat", many) == prompt_bytes("chat", many[:10])
    parts = [{"type": "text", "text": str(i)} for i in range(30)]
    assert prompt_bytes("chat", [{"role": "u", "content": parts}]) == b"u\x1f0123456789\x1e"


def test_rendered_bytes_are_cut_at_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prompt_bytes_module, "MAX_PROMPT_BYTES", 100)
    messages = [{"role": "user", "content": "x" * 150}, {"role": "user", "content": "more"}]
    rendered = prompt_bytes("chat", messages)
    assert len(rendered) == 100
    assert rendered == prompt_bytes("chat", messages[:1])
    assert len(prompt_bytes("completions", list(range(400)))) == 100  # 4 bytes a token
