"""The admin API's request parsing, shared by both listeners: a `backends:` entry from a
body, and the true/false query flags."""

from __future__ import annotations

import orjson
import pytest

from gateway.admin_ops import flag, parse_backend_entry
from gateway.errors import BadRequestError, UnsupportedMediaTypeError


def test_a_body_becomes_the_configs_backend_entry() -> None:
    body = orjson.dumps({"url": "http://10.0.0.7:8000", "id": "gpu-7", "kv_events": "tcp://h:5557"})
    entry = parse_backend_entry(body, "application/json; charset=utf-8")
    assert (entry.url, entry.id, entry.engine) == ("http://10.0.0.7:8000", "gpu-7", "vllm")
    assert entry.kv_events is not None and entry.kv_events.endpoint == "tcp://h:5557"
    assert parse_backend_entry(body, None).id == "gpu-7"  # no content type: read as JSON


@pytest.mark.parametrize(
    ("body", "code", "message"),
    [
        (b"", "invalid_backend", "request body must be a JSON object"),
        (b"[1]", "invalid_backend", "request body must be a JSON object"),
        (b"{", "invalid_json", "request body is not valid JSON"),
        (b'{"id": "x"}', "invalid_backend", "url: Field required"),
        (b'{"url": "http://h:1", "engine": "tgi"}', "invalid_backend", "engine: Input should"),
        (b'{"url": "http://h:1", "kv_events": {"endpoint": 5}}', "invalid_backend",
         "kv_events.endpoint: "),
    ],
)  # fmt: skip
def test_a_bad_body_is_a_400_naming_the_field(body: bytes, code: str, message: str) -> None:
    with pytest.raises(BadRequestError) as info:
        parse_backend_entry(body, "application/json")
    assert info.value.code == code
    assert info.value.message.startswith(message)


def test_a_body_that_is_not_json_is_a_415() -> None:
    with pytest.raises(UnsupportedMediaTypeError):
        parse_backend_entry(b'{"url": "http://h:1"}', "text/plain")


def test_flags_read_true_and_false_and_refuse_anything_else() -> None:
    assert flag({}, "force") is False
    assert flag({"force": ["true"]}, "force") is True
    assert flag({"force": [""]}, "force") is False  # `?force=`: given empty
    assert flag({"force": ["0", "yes"]}, "force") is True  # the last one wins
    with pytest.raises(BadRequestError, match="query parameter force"):
        flag({"force": ["perhaps"]}, "force")
