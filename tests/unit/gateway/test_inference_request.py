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
