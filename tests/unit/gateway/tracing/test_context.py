from __future__ import annotations

import pytest

from gateway.tracing.context import parse_traceparent, traceparent

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"


def test_a_valid_traceparent_names_the_callers_span() -> None:
    p = parse_traceparent(f"00-{TRACE}-{SPAN}-01", " congo=t61rcWkgMzE ")
    assert p is not None
    assert (p.trace_id, p.span_id, p.sampled) == (int(TRACE, 16), int(SPAN, 16), True)
    assert p.state == "congo=t61rcWkgMzE"
    assert not parse_traceparent(f"00-{TRACE}-{SPAN}-00").sampled  # type: ignore[union-attr]


def test_a_later_version_is_read_by_its_first_four_fields() -> None:
    p = parse_traceparent(f"cc-{TRACE}-{SPAN}-01-what-the-future-adds")
    assert p is not None and p.span_id == int(SPAN, 16)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "garbage",
        f"00-{TRACE}-{SPAN}-01-extra",  # version 00 has exactly four fields
        f"ff-{TRACE}-{SPAN}-01",  # version ff is invalid
        f"00-{'0' * 32}-{SPAN}-01",  # all-zero trace id
        f"00-{TRACE}-{'0' * 16}-01",  # all-zero span id
        f"00-{TRACE.upper()}-{SPAN}-01",  # upper-case hex
        f"00-{TRACE[:-1]}-{SPAN}-01",
        f"00-{TRACE}-{SPAN}-1",
    ],
)
def test_an_invalid_traceparent_is_ignored(value: str) -> None:
    assert parse_traceparent(value, "k=v") is None


def test_the_header_written_for_the_engine() -> None:
    assert traceparent(int(TRACE, 16), int(SPAN, 16), True) == f"00-{TRACE}-{SPAN}-01".encode()
    assert traceparent(1, 2, False) == b"00-" + b"0" * 31 + b"1-" + b"0" * 15 + b"2-00"
