"""`judge_stream`: what counts as a well-formed end of a cut SSE stream."""

from __future__ import annotations

from tests.chaos.load import judge_stream

EVENT = b'data: {"choices": [{"delta": {"content": "a"}}]}\n\n'
ERROR = b'data: {"error": {"message": "upstream broke", "type": "upstream_error"}}\n\n'


def test_a_finished_stream_is_done() -> None:
    verdict = judge_stream(EVENT + EVENT + b"data: [DONE]\n\n")
    assert verdict.done and verdict.well_formed and not verdict.error_event
    assert verdict.events == 3


def test_an_error_event_after_whole_events_is_well_formed() -> None:
    verdict = judge_stream(EVENT + ERROR)
    assert verdict.well_formed and verdict.error_event and not verdict.done


def test_an_error_glued_to_half_an_event_is_not() -> None:
    verdict = judge_stream(EVENT + EVENT[:20] + ERROR)
    assert not verdict.well_formed and not verdict.error_event


def test_half_an_event_then_an_error_on_its_own_is_not() -> None:
    verdict = judge_stream(EVENT + EVENT[:20] + b"\n\n" + ERROR)
    assert not verdict.well_formed and verdict.error_event


def test_crlf_and_comments_are_accepted() -> None:
    body = (b": keep-alive\n\n" + EVENT + ERROR).replace(b"\n", b"\r\n")
    verdict = judge_stream(body)
    assert verdict.well_formed and verdict.error_event and verdict.events == 2


def test_bytes_outside_a_data_field_are_not() -> None:
    assert not judge_stream(EVENT + b"\xff\xfegarbage\n\n" + b"data: [DONE]\n\n").well_formed
