"""Model names: the request's `model` replaced, the answer's written back chunk by chunk; the
front door applying the config's rewrite rules (the picker's side: tests/unit/gateway/epp)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import orjson
import pytest

from gateway.app import GatewayApp
from gateway.compose import build_runtime
from gateway.inference_request import parse_inference_body
from gateway.model_names import ModelNameRestorer, with_model
from gateway.proxy import Proxy
from routing.config.schema import parse_config

TARGET, ASKED = "food-review-v2", "food-review"


def test_the_request_body_gets_the_target_model() -> None:
    body = b'{"model": "food-review", "messages": [{"role": "user", "content": "hi"}]}'
    out = orjson.loads(with_model(body, TARGET))
    assert out == {"model": TARGET, "messages": [{"role": "user", "content": "hi"}]}


def _relay(chunks: list[bytes]) -> bytes:
    restorer = ModelNameRestorer(TARGET, ASKED)
    out = [restorer.feed(c, end=i == len(chunks) - 1) for i, c in enumerate(chunks)]
    return b"".join(out)


def _answer() -> bytes:
    return orjson.dumps(
        {
            "id": "cmpl-1",
            "model": TARGET,
            "choices": [{"message": {"content": f'say "model": "{TARGET}"'}}],
        }
    )


def test_a_whole_answer_names_the_asked_model_and_leaves_escaped_text_alone() -> None:
    out = orjson.loads(_relay([_answer()]))
    assert out["model"] == ASKED
    assert out["choices"][0]["message"]["content"] == f'say "model": "{TARGET}"'


def _events() -> bytes:
    events = [
        {"id": "c", "model": TARGET, "choices": [{"delta": {"content": str(i)}}]} for i in range(3)
    ]
    return b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n"


@pytest.mark.parametrize("make", [_answer, _events])
def test_any_cut_between_chunks_still_restores_every_member(make: object) -> None:
    whole = make()  # type: ignore[operator]
    expected = whole.replace(b'"model":"' + TARGET.encode() + b'"', b'"model":"food-review"')
    assert expected != whole
    for cut in range(1, len(whole)):
        assert _relay([whole[:cut], whole[cut:]]) == expected, cut


def test_only_a_possible_member_is_held_back() -> None:
    restorer = ModelNameRestorer(TARGET, ASKED)
    assert restorer.feed(b'data: {"id":"c","model') == b'data: {"id":"c",'
    assert restorer.feed(b'":"food-review-v2","x":1}\n\n') == (b'"model":"food-review","x":1}\n\n')
    assert restorer.feed(b'data: {"model": "other"}\n\n') == b'data: {"model": "other"}\n\n'
    assert restorer.feed(b'{"model" :  "food-re') == b"{"
    assert restorer.finish() == b'"model" :  "food-re'  # the answer ended there
    assert restorer.feed(b'{"model":"food-review-v2-large"}', end=True) == (
        b'{"model":"food-review-v2-large"}'
    )


def test_spacing_is_kept_and_an_sse_event_end_is_never_held() -> None:
    restorer = ModelNameRestorer(TARGET, ASKED)
    event = b'data: {"model" : "food-review-v2"}\n\n'
    assert restorer.feed(event) == b'data: {"model" : "food-review"}\n\n'


# -- through the front door: the same rules from the config --------------------------------


class _Upstream:
    """Records what the proxy sends; answers `chunks` with `content_type`."""

    def __init__(self, chunks: list[bytes], content_type: bytes) -> None:
        self.sent: list[tuple[list[tuple[bytes, bytes]], bytes]] = []
        self._chunks, self._type = chunks, content_type

    async def send(self, url: str, target: str, method: str, headers: Any, body: bytes, **_: Any):  # type: ignore[no-untyped-def]
        self.sent.append((list(headers), body))
        chunks, content_type = self._chunks, self._type

        class Response:
            status_code = 200
            headers = [(b"content-type", content_type), (b"content-length", b"999")]
            at_end = False

            def header(self, name: bytes) -> bytes | None:
                return dict(self.headers).get(name)

            async def aiter_raw(self) -> AsyncIterator[bytes]:
                for i, chunk in enumerate(chunks):
                    self.at_end = i == len(chunks) - 1
                    yield chunk

            async def aclose(self) -> None:
                pass

        return Response()


async def _through_front_door(
    body: dict[str, Any], upstream: _Upstream, headers: tuple[tuple[bytes, bytes], ...] = ()
) -> tuple[int, dict[bytes, bytes], bytes]:
    raw = {
        "backends": [{"url": "http://10.0.0.1:8000", "models": ["food", "food-v1", "food-v2"]}],
        "rewrites": [{"models": ["food"], "targets": [{"model": "food-v2"}]}],
        "server": {"access_log": False},
    }
    rt = build_runtime(parse_config(raw), rng=random.Random(1))
    for backend in rt.pool:
        backend.state.record_probe(True, 0.0)
    app = GatewayApp(rt)
    app.inference.proxy = Proxy(rt.director, upstream, max_attempts=1)  # type: ignore[arg-type]
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/chat/completions",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), *headers],
        "client": ("127.0.0.1", 5000),
    }
    messages = [{"type": "http.request", "body": orjson.dumps(body), "more_body": False}]

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        await asyncio.Event().wait()
        raise AssertionError

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = sent[0]
    return start["status"], dict(start["headers"]), b"".join(m.get("body", b"") for m in sent[1:])


CHAT = {"model": "food", "messages": [{"role": "user", "content": "hi"}]}


async def test_the_front_door_rewrites_a_whole_answer_back() -> None:
    answer = b'{"id":"c","model":"food-v2","choices":[]}'
    upstream = _Upstream([answer[:12], answer[12:]], b"application/json")
    status, headers, body = await _through_front_door(CHAT, upstream)
    [(sent_headers, sent_body)] = upstream.sent
    assert orjson.loads(sent_body)["model"] == "food-v2"
    assert dict(sent_headers)[b"x-llm-d-model-name-rewrite"] == b"food-v2"
    assert status == 200 and orjson.loads(body)["model"] == "food"
    assert b"content-length" not in headers  # the renamed answer's length differs


async def test_the_front_door_rewrites_a_stream_back_and_honours_the_header() -> None:
    events = [b'data: {"model":"food-v1","choices":[]}\n\n', b"data: [DONE]\n\n"]
    upstream = _Upstream(events, b"text/event-stream")
    asked = {"model": "other", "stream": True, "messages": CHAT["messages"]}
    old_name = ((b"x-gateway-model-name-rewrite", b"food-v1"),)  # no rule for "other"
    status, _, body = await _through_front_door(asked, upstream, old_name)
    [(sent_headers, sent_body)] = upstream.sent
    assert orjson.loads(sent_body)["model"] == "food-v1"
    assert dict(sent_headers)[b"x-llm-d-model-name-rewrite"] == b"food-v1"
    assert b"x-gateway-model-name-rewrite" not in dict(sent_headers)
    assert status == 200 and body == b'data: {"model":"other","choices":[]}\n\ndata: [DONE]\n\n'


def test_a_rule_beats_the_header_which_names_the_target_without_one() -> None:
    raw = {
        "backends": [{"url": "http://10.0.0.1:8000", "models": ["food"]}],
        "rewrites": [{"models": ["food"], "targets": [{"model": "food-v2"}]}],
    }
    director = build_runtime(parse_config(raw), rng=random.Random(1)).director
    req = parse_inference_body("chat", orjson.dumps(CHAT))
    header = {"x-llm-d-model-name-rewrite": "other"}
    ruled = director.resolve(req, header)
    assert (ruled.model, ruled.model_asked) == ("food-v2", "food")
    unruled = director.resolve(replace(req, model="soup"), header)
    assert (unruled.model, unruled.model_asked) == ("other", "soup")
    same = director.resolve(replace(req, model="other"), header)
    assert (same.model, same.model_asked) == ("other", None)  # nothing to name back
    assert director.resolve(replace(req, model="soup")).model_asked is None
