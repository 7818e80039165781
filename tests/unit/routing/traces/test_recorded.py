from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest

from routing.traces import TraceFormatError, TraceRequest, load_recorded
from routing.traces.recorded import encode_header, encode_request

START = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


def _req(t: float, ids: tuple[int, ...], session: str | None = "s1") -> TraceRequest:
    return TraceRequest(t, 40, 9, ids, block_tokens=16, model="m1", session=session)


def test_round_trip_in_arrival_order(tmp_path: Path) -> None:
    a = _req(0.5, (2**64 - 1, 7))
    b = _req(0.25, (), session=None)
    path = tmp_path / "rec.jsonl"
    path.write_bytes(encode_header(START, 16, 4.0) + encode_request(a) + encode_request(b))
    assert load_recorded(path) == [b, a]  # lines come in completion order
    assert load_recorded(path, limit=1) == [b]


def test_lines_are_the_documented_json(tmp_path: Path) -> None:
    header = orjson.loads(encode_header(START, 16, 4.0))
    assert header["kvgate_trace"] == 1
    assert datetime.fromisoformat(header["started_at"]) == START
    assert (header["block_tokens"], header["chars_per_token"]) == (16, 4.0)
    line = orjson.loads(encode_request(_req(1.2345678, (1, 2))))
    assert line == {
        "t": 1.234568,
        "model": "m1",
        "input_tokens": 40,
        "output_tokens": 9,
        "block_tokens": 16,
        "hash_ids": [1, 2],
        "session": "s1",
    }


def test_observed_ttft_round_trips_when_known(tmp_path: Path) -> None:
    timed = TraceRequest(0.5, 40, 9, (1,), block_tokens=16, ttft_s=0.0421234567)
    assert orjson.loads(encode_request(timed))["ttft_s"] == 0.042123
    path = tmp_path / "rec.jsonl"
    path.write_bytes(encode_header(START, 16, 4.0) + encode_request(timed))
    [back] = load_recorded(path)
    assert back.ttft_s == 0.042123
    bad = orjson.dumps(
        {"t": 1, "input_tokens": 1, "output_tokens": 1, "hash_ids": [], "ttft_s": "x"}
    )
    path.write_bytes(encode_header(START, 16, 4.0) + bad + b"\n")
    with pytest.raises(TraceFormatError, match="ttft_s"):
        load_recorded(path)


def test_appended_recordings_share_one_timeline(tmp_path: Path) -> None:
    later = START + timedelta(seconds=100)
    path = tmp_path / "rec.jsonl"
    path.write_bytes(
        encode_header(START, 16, 4.0)
        + encode_request(_req(1.0, (1,)))
        + encode_header(later, 32, 4.0)
        + b'{"t": 2.0, "model": "m1", "input_tokens": 5, "output_tokens": 1, "hash_ids": []}\n'
    )
    first, second = load_recorded(path)
    assert first.arrival_s == 1.0
    assert (second.arrival_s, second.block_tokens, second.session) == (102.0, 32, None)


def test_unknown_keys_are_ignored(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    line = orjson.loads(encode_request(_req(1.0, (1,))))
    path.write_bytes(encode_header(START, 16, 4.0) + orjson.dumps({**line, "e2e_s": 0.1}) + b"\n")
    assert load_recorded(path) == [_req(1.0, (1,))]


GOOD = encode_request(_req(1.0, (1,))).decode().strip()


@pytest.mark.parametrize(
    ("lines", "where", "why"),
    [
        ([GOOD], ":1:", "expected a header line"),
        (
            ['{"kvgate_trace": 2, "started_at": "2025-06-01T12:00:00", "block_tokens": 16}'],
            ":1:",
            "unsupported kvgate trace version 2",
        ),
        (['{"kvgate_trace": 1, "started_at": "noon", "block_tokens": 16}'], ":1:", "noon"),
        (
            ['{"kvgate_trace": 1, "started_at": "2025-06-01T12:00:00"}'],
            ":1:",
            "missing field 'block_tokens'",
        ),
        (["HEADER", GOOD.replace('"t":1.0', '"t":-1')], ":3:", "t must be"),
        (["HEADER", GOOD.replace('"model":"m1"', '"model":3')], ":3:", "model must be"),
        (["HEADER", GOOD.replace('"session":"s1"', '"session":[]')], ":3:", "session must be"),
        (["HEADER", GOOD.replace('"output_tokens":9,', "")], ":3:", "'output_tokens'"),
        (["HEADER", GOOD.replace("[1]", '["abc"]')], ":3:", "hash_ids"),
        (["HEADER", GOOD[:-5]], ":3:", "invalid JSON"),
    ],
)
def test_malformed_lines_name_file_and_line(
    tmp_path: Path, lines: list[str], where: str, why: str
) -> None:
    header = encode_header(START, 16, 4.0).decode().strip()
    path = tmp_path / "rec.jsonl"
    text = "\n".join(header if ln == "HEADER" else ln for ln in lines)
    # A blank first line before a header: it is skipped, and counted in line numbers.
    path.write_text(("\n" if lines[0] == "HEADER" else "") + text + "\n")
    with pytest.raises(TraceFormatError, match=why) as info:
        load_recorded(path)
    assert str(info.value).startswith(f"{path}{where} ")


def test_a_last_line_cut_short_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    good = encode_request(_req(1.0, (1,)))
    path.write_bytes(encode_header(START, 16, 4.0) + good + good[:-9])
    assert load_recorded(path) == [_req(1.0, (1,))]
    path.write_bytes(encode_header(START, 16, 4.0) + good[:-9] + b"\n" + good)
    with pytest.raises(TraceFormatError, match=":2: invalid JSON"):
        load_recorded(path)


def test_empty_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    path.write_text("\n")
    with pytest.raises(TraceFormatError, match="no kvgate trace header"):
        load_recorded(path)
