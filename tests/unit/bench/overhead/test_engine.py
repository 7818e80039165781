"""The stub engine's request parsing."""

from __future__ import annotations

from bench.overhead.engine import _content_length, _wants_stream


def test_stub_engine_request_parsing() -> None:
    assert _content_length(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 12") == 12
    assert _content_length(b"GET / HTTP/1.1\r\nHost: x") == 0
    assert _wants_stream(b'{"stream": true}') and not _wants_stream(b'{"stream":false}')
