from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.errors import BadRequestError
from gateway.inference_request import (
    API_BY_PATH,
    APIS,
    InferenceRequest,
    parse_inference_body,
    prompt_token_ids,
    session_key,
)

PROMPTS: dict[str, Any] = {
    "chat": [{"role": "user", "content": "hi"}],
    "completions": "Once upon a time",
    "embeddings": "embed me",
    "responses": "respond",
}


def _body(**fields: Any) -> bytes:
    return orjson.dumps(fields)


def _bad(api: str, body: bytes) -> BadRequestError:
    with pytest.raises(BadRequestError) as info:
        parse_inference_body(api, body)
    err = info.value
    assert err.status == 400
    assert err.type == "invalid_request_error"
    return err


def test_paths_map_to_apis() -> None:
    assert API_BY_PATH == {
        "/v1/chat/completions": "chat",
        "/v1/completions": "completions",
        "/v1/embeddings": "embeddings",
        "/v1/responses": "responses",
        "/generate": "generate",
        "/v1/rerank": "rerank",
        "/v1/score": "score",
        "/tokenize": "tokenize",
        "/detokenize": "detokenize",
        "/pooling": "pooling",
        "/classify": "classify",
    }


@pytest.mark.parametrize("api", sorted(PROMPTS))
def test_minimal_valid_body(api: str) -> None:
    field = APIS[api][1]
    body = _body(model="m", **{field: PROMPTS[api]})
    assert parse_inference_body(api, body) == InferenceRequest(
        api=api,
        model="m",
        stream=False,
        user=None,
        body_bytes=len(body),
        prompt=PROMPTS[api],
        store=api == "responses",  # the Responses API stores by default
    )


def test_a_responses_follow_up_names_what_it_follows_and_whether_it_is_stored() -> None:
    body = _body(model="m", input="more", previous_response_id="resp_1", store=False)
    req = parse_inference_body("responses", body)
    assert (req.previous_response_id, req.store, req.stores) == ("resp_1", False, False)
    req = parse_inference_body("responses", _body(model="m", input="x", previous_response_id=7))
    assert (req.previous_response_id, req.stores) == (None, True)
    chat = _body(model="m", messages=[], previous_response_id="resp_1", store=True)
    req = parse_inference_body("chat", chat)  # other APIs store nothing here
    assert (req.previous_response_id, req.stores) == (None, False)


def test_cache_salt_and_instructions_kept_for_prefix_hashing() -> None:
    body = _body(model="m", input="hi", cache_salt="tenant-a", instructions="be brief")
    req = parse_inference_body("responses", body)
    assert (req.cache_salt, req.instructions, req.prompt) == ("tenant-a", "be brief", "hi")
    odd = parse_inference_body("responses", _body(model="m", input="x", cache_salt=5))
    assert odd.cache_salt is None


@pytest.mark.parametrize(
    ("api", "field", "value"),
    [
        ("chat", "messages", []),
        ("completions", "prompt", "text"),
        ("completions", "prompt", [1, 2, 3]),
        ("completions", "prompt", ["a", "b"]),
        ("embeddings", "input", "text"),
        ("embeddings", "input", [[1, 2], [3]]),
        ("responses", "input", "text"),
        ("responses", "input", [{"role": "user", "content": "x"}]),
    ],
)
def test_accepted_prompt_types(api: str, field: str, value: Any) -> None:
    assert parse_inference_body(api, _body(model="m", **{field: value})).api == api


@pytest.mark.parametrize(
    ("api", "field", "value", "expected", "got"),
    [
        ("chat", "messages", "hello", "an array", "str"),
        ("chat", "messages", {"role": "user"}, "an array", "dict"),
        ("chat", "messages", None, "an array", "null"),
        ("completions", "prompt", 42, "a string or an array", "int"),
        ("completions", "prompt", {"text": "x"}, "a string or an array", "dict"),
        ("embeddings", "input", 1.5, "a string or an array", "float"),
        ("responses", "input", True, "a string or an array", "bool"),
    ],
)
def test_wrong_prompt_type(api: str, field: str, value: Any, expected: str, got: str) -> None:
    err = _bad(api, _body(model="m", **{field: value}))
    assert err.code == "invalid_field_type"
    assert err.message == f"field '{field}' must be {expected}, got {got}"


@pytest.mark.parametrize(
    ("api", "field"),
    [
        ("chat", "messages"),
        ("completions", "prompt"),
        ("embeddings", "input"),
        ("responses", "input"),
    ],
)
def test_missing_prompt_field(api: str, field: str) -> None:
    err = _bad(api, _body(model="m"))
    assert err.code == "missing_field"
    assert err.message == f"missing required field '{field}'"


def test_prompt_field_of_another_api_does_not_count() -> None:
    err = _bad("chat", _body(model="m", prompt="text"))
    assert "'messages'" in err.message


def test_missing_model() -> None:
    err = _bad("chat", _body(messages=[]))
    assert err.code == "missing_field"
    assert err.message == "missing required field 'model'"


@pytest.mark.parametrize(
    ("model", "got"), [(7, "int"), (None, "null"), ("", "str"), (["m"], "list")]
)
def test_wrong_model(model: Any, got: str) -> None:
    err = _bad("chat", _body(model=model, messages=[]))
    assert err.code == "invalid_field_type"
    assert err.message == f"field 'model' must be a non-empty string, got {got}"


@pytest.mark.parametrize("body", [b"[]", b'"text"', b"42", b"null", b"true"])
def test_body_must_be_a_json_object(body: bytes) -> None:
    err = _bad("chat", body)
    assert err.code == "invalid_json"
    assert err.message == "request body must be a JSON object"


def test_empty_body() -> None:
    err = _bad("completions", b"")
    assert err.code == "invalid_json"
    assert "empty" in err.message


@pytest.mark.parametrize("body", [b"{", b'{"model": "m",}', b"\xff\xfe{}", b"not json"])
def test_invalid_json(body: bytes) -> None:
    err = _bad("chat", body)
    assert err.code == "invalid_json"
    assert err.message.startswith("request body is not valid JSON")


@pytest.mark.parametrize(("value", "stream"), [(True, True), (False, False), (None, False)])
def test_stream(value: Any, stream: bool) -> None:
    req = parse_inference_body("chat", _body(model="m", messages=[], stream=value))
    assert req.stream is stream


@pytest.mark.parametrize(("value", "got"), [("true", "str"), (1, "int"), ({}, "dict")])
def test_stream_must_be_a_boolean(value: Any, got: str) -> None:
    err = _bad("chat", _body(model="m", messages=[], stream=value))
    assert err.code == "invalid_field_type"
    assert err.message == f"field 'stream' must be a boolean, got {got}"


@pytest.mark.parametrize(("value", "user"), [("alice", "alice"), (123, None), (None, None)])
def test_user_is_kept_only_when_a_string(value: Any, user: str | None) -> None:
    assert parse_inference_body("chat", _body(model="m", messages=[], user=value)).user == user


def test_other_fields_are_ignored_and_body_size_recorded() -> None:
    body = _body(model="m", prompt="p", temperature="hot", max_tokens=[1], extra={"x": 1})
    req = parse_inference_body("completions", body)
    assert (req.model, req.body_bytes) == ("m", len(body))


def _req(user: str | None) -> InferenceRequest:
    return InferenceRequest(api="chat", model="m", stream=False, user=user, body_bytes=2)


def test_session_key_header_wins_over_user() -> None:
    assert session_key(_req("alice"), {"x-session-id": "s-1"}, "x-session-id") == "s-1"


def test_session_key_falls_back_to_user() -> None:
    assert session_key(_req("alice"), {"x-other": "s-1"}, "x-session-id") == "alice"
    assert session_key(_req("alice"), {"x-session-id": ""}, "x-session-id") == "alice"


def test_session_key_none_without_header_or_user() -> None:
    assert session_key(_req(None), {}, "x-session-id") is None


# -- SGLang's native API and vLLM's utility endpoints -------------------------------------


def _native(api: str, **fields: Any) -> InferenceRequest:
    return parse_inference_body(api, _body(**fields))


@pytest.mark.parametrize(
    ("fields", "prompt", "batch"),
    [
        ({"text": "Once upon"}, "Once upon", False),
        ({"text": ["a", "b"]}, ["a", "b"], True),
        ({"text": ["only"]}, ["only"], False),  # a batch of one: one prompt, one answer
        ({"input_ids": [1, 2, 3]}, [1, 2, 3], False),
        ({"input_ids": [[1, 2], [3]]}, [[1, 2], [3]], True),
        ({"text": "t", "input_ids": [7]}, [7], False),  # the engine computes on the ids
        ({"text": "t", "sampling_params": {"n": 3}}, "t", True),  # three answers
        ({"text": ["a"], "sampling_params": [{"max_new_tokens": 1}]}, ["a"], True),
        ({"input_embeds": [[0.1, 0.2]]}, None, False),  # routed by load only
    ],
)
def test_generate_bodies(fields: dict[str, Any], prompt: Any, batch: bool) -> None:
    req = _native("generate", stream=True, **fields)
    assert (req.api, req.model, req.stream) == ("generate", "", True)
    assert (req.prompt, req.batch) == (prompt, batch)


def test_generate_may_name_a_model_and_a_cache_salt() -> None:
    req = _native("generate", text="x", model="m", cache_salt="s")
    assert (req.model, req.cache_salt) == ("m", "s")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "Either text, input_ids or input_embeds should be provided."),
        ({"text": None}, "Either text, input_ids or input_embeds should be provided."),
        ({"text": 5}, "field 'text' must be a string or a list of strings, got int"),
        ({"text": ["a", 1]}, "field 'text' must be a string or a list of strings, got list"),
        (
            {"input_ids": "1 2"},
            "field 'input_ids' must be a list of token ids or a list of such lists, got str",
        ),
        (
            {"input_ids": []},
            "field 'input_ids' must be a list of token ids or a list of such lists, got list",
        ),
        ({"text": "x", "model": 3}, "field 'model' must be a non-empty string, got int"),
        ({"text": "x", "stream": "yes"}, "field 'stream' must be a boolean, got str"),
    ],
)
def test_bad_generate_bodies(fields: dict[str, Any], message: str) -> None:
    assert _bad("generate", _body(**fields)).message == message


@pytest.mark.parametrize(
    ("api", "fields", "prompt", "batch"),
    [
        ("rerank", {"query": "q", "documents": ["a", "b"]}, "q", True),
        ("rerank", {"documents": ["a"]}, None, True),  # the engine says what is missing
        ("score", {"query": "q", "items": ["a"], "label_token_ids": [1]}, "q", True),
        ("score", {"query": [5, 6], "items": [[1]]}, [5, 6], True),
        ("score", {"text_1": "q", "text_2": ["a"], "model": "m"}, "q", True),  # vLLM's
        ("score", {"query": "q", "items": ["a"], "item_first": True}, None, True),
        ("tokenize", {"prompt": "hello", "model": "m"}, None, False),
        ("detokenize", {"tokens": [1, 2]}, None, False),
        ("pooling", {"input": "x"}, "x", False),
        ("pooling", {"input": ["x", "y"]}, ["x", "y"], True),
        ("pooling", {"messages": [{"role": "user", "content": "x"}]}, None, False),
        ("classify", {"input": "x", "model": "m"}, "x", False),
        ("classify", {"text": "x"}, "x", False),  # SGLang's native /classify
    ],
)
def test_native_bodies(api: str, fields: dict[str, Any], prompt: Any, batch: bool) -> None:
    req = _native(api, **fields)
    expected = prompt if prompt is not None or "messages" not in fields else fields["messages"]
    assert (req.api, req.prompt, req.batch) == (api, expected, batch)
    assert req.model == fields.get("model", "")


def test_native_prompt_fields_are_type_checked_when_present() -> None:
    assert (
        _bad("rerank", _body(query=5)).message
        == "field 'query' must be a string or an array, got int"
    )
    assert _bad("pooling", _body(input={"a": 1})).code == "invalid_field_type"
    assert _bad("tokenize", b"[1]").code == "invalid_json"


@pytest.mark.parametrize(
    ("api", "fields", "ids"),
    [
        ("generate", {"input_ids": [3, 4]}, [3, 4]),
        ("generate", {"input_ids": [[3, 4], [5]]}, [3, 4]),  # a batch: its first prompt
        ("generate", {"text": "x"}, None),
        ("generate", {"input_ids": [3, -1]}, None),  # not ids the engine could take
        ("generate", {"input_ids": [3, 2.5]}, None),
        ("completions", {"prompt": [9, 8], "model": "m"}, [9, 8]),
        ("completions", {"prompt": ["a", "b"], "model": "m"}, None),
        ("score", {"query": [1, 2]}, [1, 2]),
        ("classify", {"input_ids": [1]}, [1]),
        ("chat", {"messages": [], "model": "m"}, None),
    ],
)
def test_prompt_token_ids(api: str, fields: dict[str, Any], ids: list[int] | None) -> None:
    assert prompt_token_ids(_native(api, **fields)) == ids


def test_completions_batches_are_marked() -> None:
    assert _native("completions", model="m", prompt=["a", "b"]).batch
    assert not _native("completions", model="m", prompt=[1, 2]).batch
    assert _native("embeddings", model="m", input=["a", "b"]).batch
    assert not _native("chat", model="m", messages=[{"role": "user"}, {"role": "user"}]).batch
