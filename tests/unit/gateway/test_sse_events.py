from __future__ import annotations

import orjson

from gateway.sse_events import MAX_HELD_BYTES, EventAligner, last_event_end

ERROR = {"message": "m", "type": "upstream_error", "code": "c"}


def _error_data(event: bytes) -> dict[str, object]:
    assert event.startswith(b"data: ") and event.endswith(b"\n\n")
    return orjson.loads(event[6:])


def test_whole_events_pass_unchanged() -> None:
    a = EventAligner()
    assert a.feed(b"data: 1\n\ndata: 2\n\n") == b"data: 1\n\ndata: 2\n\n"
    assert a.on_boundary


def test_a_trailing_partial_event_waits_for_its_rest() -> None:
    a = EventAligner()
    assert a.feed(b'data: 1\n\ndata: {"x"') == b"data: 1\n\n"
    assert a.feed(b": 2}\n") == b""
    assert a.feed(b"\ndata: 3") == b'data: {"x": 2}\n\n'
    assert a.finish() == b"data: 3"  # the normal end relays what is left as it is


def test_crlf_events_are_events_too() -> None:
    a = EventAligner()
    assert a.feed(b"data: 1\r\n\r\ndata: 2\r\n") == b"data: 1\r\n\r\n"
    assert a.feed(b"\r\n") == b"data: 2\r\n\r\n"
    assert last_event_end(b"data: 1\r\n\r\nda") == 11


def test_error_event_drops_the_partial_event_and_stands_alone() -> None:
    a = EventAligner()
    a.feed(b'data: 1\n\ndata: {"choi')
    event = a.error_event(ERROR)
    assert _error_data(event) == {"error": ERROR}
    assert a.dropped == len(b'data: {"choi')
    assert a.finish() == b""


def test_error_event_before_anything_was_relayed() -> None:
    assert _error_data(EventAligner().error_event(ERROR)) == {"error": ERROR}


def test_an_oversized_event_is_relayed_unaligned_and_the_error_ends_it_first() -> None:
    a = EventAligner()
    big = b"data: " + b"x" * (MAX_HELD_BYTES + 1)
    assert a.feed(big) == big  # not held without bound
    assert not a.on_boundary
    event = a.error_event(ERROR)
    assert event.startswith(b"\n\n")
    assert _error_data(event[2:]) == {"error": ERROR}
