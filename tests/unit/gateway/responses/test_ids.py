"""Stored response ids, from the paths naming one and from the answers making one."""

from __future__ import annotations

import orjson
import pytest

from gateway.responses.ids import (
    MAX_BODY_BYTES,
    MAX_SCAN_BYTES,
    ResponseIdReader,
    object_path,
    valid_id,
)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/v1/responses/resp_1", ("resp_1", "")),
        ("/v1/responses/resp_1/cancel", ("resp_1", "cancel")),
        ("/v1/responses/resp_1/input_items", None),
        ("/v1/responses/resp_1/", None),
        ("/v1/responses/", None),
        ("/v1/responses", None),
        ("/v1/chat/completions", None),
    ],
)
def test_paths_on_a_stored_response(path: str, expected: tuple[str, str] | None) -> None:
    assert object_path(path) == expected


@pytest.mark.parametrize(
    ("value", "ok"),
    [("resp_0123abcdef", True), ("a" * 256, True), ("a" * 257, False), ("", False),
     ("resp 1", False), ("resp/1", False), ("resp_é", False), (7, False)],
)  # fmt: skip
def test_valid_ids(value: object, ok: bool) -> None:
    assert valid_id(value) is ok


def _response(**fields: object) -> dict[str, object]:
    return {"id": "resp_1", "object": "response", "status": "completed", "output": [], **fields}


def _feed(reader: ResponseIdReader, chunks: list[bytes]) -> list[str | None]:
    return [reader.feed(c, i == len(chunks) - 1) for i, c in enumerate(chunks)]


def test_a_json_answer_gives_its_id_at_its_end() -> None:
    body = orjson.dumps({"object": "response", "model": "m", "output": [], "id": "resp_9"})
    cuts = [body[:7], body[7:30], body[30:]]
    assert _feed(ResponseIdReader(sse=False), cuts) == [None, None, "resp_9"]


@pytest.mark.parametrize(
    "obj",
    [
        {"id": "chatcmpl-1", "object": "chat.completion"},
        _response(store=False),
        _response(id="bad id"),
        ["resp_1"],
    ],
)
def test_other_json_answers_give_none(obj: object) -> None:
    assert _feed(ResponseIdReader(sse=False), [orjson.dumps(obj)]) == [None]


def test_broken_json_gives_none() -> None:
    assert _feed(ResponseIdReader(sse=False), [b'{"id": "resp_1", "obj']) == [None]


def test_a_huge_json_answer_is_read_by_its_head() -> None:
    body = orjson.dumps(_response(output=[{"text": "x" * MAX_BODY_BYTES}]))
    size = 64 * 1024
    chunks = [body[i : i + size] for i in range(0, len(body), size)]
    reader = ResponseIdReader(sse=False)
    assert _feed(reader, chunks)[-1] == "resp_1"
    assert len(reader._chunks) == 0  # released at the end
    tail_first = orjson.dumps({"object": "response", "pad": "y" * MAX_BODY_BYTES, "id": "r"})
    assert _feed(ResponseIdReader(sse=False), [tail_first[:10], tail_first[10:]]) == [None, None]


def _event(kind: str, data: object, crlf: bool = False) -> bytes:
    nl = b"\r\n" if crlf else b"\n"
    return b"event: " + kind.encode() + nl + b"data: " + orjson.dumps(data) + nl + nl


def _created(response_id: str = "resp_7", **fields: object) -> dict[str, object]:
    response = _response(id=response_id, status="in_progress", **fields)
    return {"type": "response.created", "sequence_number": 0, "response": response}


@pytest.mark.parametrize("crlf", [False, True])
def test_a_stream_gives_the_id_of_its_created_event(crlf: bool) -> None:
    created = _event("response.created", _created(), crlf)
    delta = _event("response.output_text.delta", {"type": "response.output_text.delta"}, crlf)
    reader = ResponseIdReader(sse=True)
    # cut inside the created event: found once the event is whole, and only once
    assert _feed(reader, [created[:20], created[20:] + delta, delta, delta]) == [
        None,
        "resp_7",
        None,
        None,
    ]


def test_a_stream_without_a_stored_response_gives_none() -> None:
    not_stored = _event("response.created", _created(store=False))
    other = _event("x", {"type": "response.in_progress"})
    assert _feed(ResponseIdReader(sse=True), [other, not_stored, other]) == [None, None, None]
    # a data line that only mentions the event's name is not the event
    fake = b'data: {"type": "text", "text": "response.created"}\n\n'
    assert _feed(ResponseIdReader(sse=True), [fake, fake]) == [None, None]


def test_the_scan_stops_after_its_limit() -> None:
    filler = _event("response.output_text.delta", {"delta": "z" * 4096})
    reader = ResponseIdReader(sse=True)
    for _ in range(MAX_SCAN_BYTES // len(filler) + 1):
        assert reader.feed(filler, False) is None
    assert reader.feed(_event("response.created", _created()), False) is None
