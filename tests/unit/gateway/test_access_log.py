from __future__ import annotations

import logging

import orjson
import pytest

from gateway.access_log import (
    RequestIdFilter,
    clip,
    log_request,
    request_id_from,
    request_id_var,
)
from gateway.inference_request import InferenceRequest
from gateway.request_record import RequestRecord
from gateway.usage import Usage


def _is_generated(request_id: str) -> bool:
    return len(request_id) == 32 and all(c in "0123456789abcdef" for c in request_id)


@pytest.mark.parametrize(
    "header", ["abc-123", "x" * 128, "0f8fad5b-d9cb-469f-a165-70867728950e", "req 1/2:3"]
)
def test_sane_request_ids_are_kept(header: str) -> None:
    assert request_id_from(header) == header


@pytest.mark.parametrize(
    "header", [None, "", "x" * 129, "line\nbreak", "tab\there", "nul\x00", "caf\xe9", "日本"]
)
def test_other_request_ids_are_replaced(header: str | None) -> None:
    request_id = request_id_from(header)
    assert request_id != header
    assert _is_generated(request_id)


def test_generated_ids_are_unique() -> None:
    assert len({request_id_from(None) for _ in range(100)}) == 100


def _record(**fields: object) -> RequestRecord:
    rec = RequestRecord(request_id="rid-1", method="POST", path="/v1/completions", started=10.0)
    for name, value in fields.items():
        setattr(rec, name, value)
    return rec


def _lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    return [orjson.loads(r.getMessage()) for r in caplog.records if r.name == "gateway.access"]


def test_log_request_emits_one_json_line(caplog: pytest.LogCaptureFixture) -> None:
    rec = _record(
        model="tiny",
        policy="session",
        backend="b1",
        status=200,
        attempts=2,
        stream=True,
        ttft_s=0.12345678,
    )
    with caplog.at_level(logging.INFO, logger="gateway.access"):
        log_request(rec, now=11.5)
    assert len(caplog.records) == 1
    assert caplog.records[0].levelno == logging.INFO
    assert _lines(caplog) == [
        {
            "request_id": "rid-1",
            "method": "POST",
            "path": "/v1/completions",
            "client": None,
            "key": None,
            "tenant": None,
            "model": "tiny",
            "policy": "session",
            "reason": None,
            "backend": "b1",
            "status": 200,
            "attempts": 2,
            "stream": True,
            "prompt_tokens": None,
            "cached_tokens": None,
            "completion_tokens": None,
            "ttft_s": 0.123457,
            "duration_s": 1.5,
        }
    ]


def test_the_line_names_the_client_the_key_the_reason_and_the_tokens(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rec = _record(
        client="10.1.2.3",
        key="team-a",
        tenant="team-a",
        reason="prefix",
        status=200,
        usage=Usage(prompt_tokens=120, cached_tokens=96, completion_tokens=7),
    )
    with caplog.at_level(logging.INFO, logger="gateway.access"):
        log_request(rec, now=11.0)
    [line] = _lines(caplog)
    assert {k: line[k] for k in ("client", "key", "tenant", "reason")} == {
        "client": "10.1.2.3",
        "key": "team-a",
        "tenant": "team-a",
        "reason": "prefix",
    }
    assert (line["prompt_tokens"], line["cached_tokens"], line["completion_tokens"]) == (120, 96, 7)


def test_log_request_includes_the_error_only_when_set(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="gateway.access"):
        log_request(_record(status=502, error="upstream_connect_error"), now=10.0)
        log_request(_record(status=200), now=10.0)
    failed, ok = _lines(caplog)
    assert failed["error"] == "upstream_connect_error"
    assert failed["ttft_s"] is None
    assert failed["model"] is None
    assert "error" not in ok


def test_log_request_never_logs_the_prompt(caplog: pytest.LogCaptureFixture) -> None:
    # The record has no place for request content, and the line has a fixed set of keys.
    assert not {"prompt", "messages", "input", "body"} & set(RequestRecord.__dataclass_fields__)
    with caplog.at_level(logging.DEBUG):
        log_request(_record(model="tiny", status=200, error="x"), now=12.0)
    assert len(caplog.records) == 1
    assert set(_lines(caplog)[0]) == {
        "request_id",
        "method",
        "path",
        "client",
        "key",
        "tenant",
        "model",
        "policy",
        "reason",
        "backend",
        "status",
        "attempts",
        "stream",
        "prompt_tokens",
        "cached_tokens",
        "completion_tokens",
        "ttft_s",
        "duration_s",
        "error",
    }


def test_log_request_silent_when_disabled(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="gateway.access"):
        log_request(_record(status=200), now=11.0)
    assert caplog.records == []


def test_request_id_filter_adds_the_contextvar() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "msg", None, None)
    assert RequestIdFilter().filter(record) is True
    assert record.__dict__["request_id"] == "-"
    token = request_id_var.set("rid-9")
    try:
        RequestIdFilter().filter(record)
    finally:
        request_id_var.reset(token)
    assert record.__dict__["request_id"] == "rid-9"


def test_client_strings_are_cut_in_the_access_log(caplog: pytest.LogCaptureFixture) -> None:
    # Issue 15, defect 3: a 200 KB model name wrote a 200 KB log line.
    long = "m" * 100_000
    caplog.set_level(logging.INFO, logger="gateway.access")
    log_request(_record(model=long, error=f"The model `{long}` does not exist"), now=11.0)
    (record,) = caplog.records
    line = orjson.loads(record.getMessage())
    assert line["model"] == "m" * 200 + "…(+99800 chars)"
    assert len(line["error"]) < 250
    assert len(record.getMessage()) < 1000


def test_clip_keeps_short_strings() -> None:
    assert clip(None) is None
    assert clip("x" * 200) == "x" * 200
    assert clip("abcdef", limit=3) == "abc…(+3 chars)"


def test_a_rewritten_request_logs_the_model_asked(caplog: pytest.LogCaptureFixture) -> None:
    request = InferenceRequest("chat", "food-v2", False, None, 10, model_asked="food")
    caplog.set_level(logging.INFO, logger="gateway.access")
    log_request(_record(model="food-v2", status=200, request=request), now=10.5)
    log_request(_record(model="food", status=200), now=10.5)
    rewritten, plain = _lines(caplog)
    assert (rewritten["model"], rewritten["model_asked"]) == ("food-v2", "food")
    assert "model_asked" not in plain
