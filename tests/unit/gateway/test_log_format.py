"""`--log-format json`: every record one JSON object on one line."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import orjson
import pytest

from gateway.access_log import RequestIdFilter, log_request, request_id_var
from gateway.log_format import TEXT_FORMAT, JsonFormatter, LogFields
from gateway.request_record import RequestRecord


@pytest.fixture
def stream() -> Iterator[tuple[io.StringIO, logging.Handler]]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(RequestIdFilter())
    root = logging.getLogger()
    root.addHandler(handler)
    level = root.level
    root.setLevel(logging.INFO)
    yield out, handler
    root.removeHandler(handler)
    root.setLevel(level)


def _lines(out: io.StringIO) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in out.getvalue().splitlines()]


def test_a_record_is_one_json_line_with_its_fields(
    stream: tuple[io.StringIO, logging.Handler],
) -> None:
    out, handler = stream
    handler.setFormatter(JsonFormatter())
    log = logging.getLogger("kvgate.test")
    log.info("backend %s: %s", "a", "up\nand running", extra={"backend": "a", "n": 3})
    token = request_id_var.set("rid-7")
    try:
        log.warning("inside a request")
    finally:
        request_id_var.reset(token)
    first, second = _lines(out)
    assert set(first) == {"ts", "level", "logger", "message", "request_id", "backend", "n"}
    assert first["message"] == "backend a: up\nand running"  # one line: the newline escaped
    assert (first["level"], first["logger"], first["request_id"]) == ("info", "kvgate.test", None)
    assert (first["backend"], first["n"]) == ("a", 3)
    assert str(first["ts"]).endswith("Z") and "T" in str(first["ts"])
    assert (second["level"], second["request_id"]) == ("warning", "rid-7")


def test_a_traceback_stays_on_the_line(stream: tuple[io.StringIO, logging.Handler]) -> None:
    out, handler = stream
    handler.setFormatter(JsonFormatter())
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("kvgate.test").exception("failed")
    [line] = _lines(out)
    assert "ValueError: boom" in str(line["exc_info"])


def test_the_access_log_fields_are_the_line_itself_in_json(
    stream: tuple[io.StringIO, logging.Handler],
) -> None:
    out, handler = stream
    handler.setFormatter(JsonFormatter())
    rec = RequestRecord(request_id="rid-1", method="POST", path="/v1/completions", started=1.0)
    rec.status, rec.backend = 200, "b1"
    token = request_id_var.set(rec.request_id)
    try:
        log_request(rec, now=1.5)
    finally:
        request_id_var.reset(token)
    [line] = _lines(out)
    assert line["logger"] == "gateway.access" and line["message"] == "request"
    assert (line["request_id"], line["status"], line["backend"]) == ("rid-1", 200, "b1")
    assert line["duration_s"] == 0.5


def test_the_text_format_keeps_the_access_line_as_a_json_object(
    stream: tuple[io.StringIO, logging.Handler],
) -> None:
    out, handler = stream
    handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    logging.getLogger("gateway.access").info("%s", LogFields("request", {"status": 200}))
    text = out.getvalue()
    assert text.endswith(' INFO gateway.access [-] {"status":200}\n')
