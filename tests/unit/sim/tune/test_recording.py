"""The incremental reader returns what a full read returns, less what is past its horizon."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

from routing.traces import TraceRequest
from routing.traces.recorded import encode_header, encode_request, load_recorded
from sim.tune.evaluate import window
from sim.tune.recording import RecordingTail

START = datetime(2026, 1, 1, tzinfo=UTC)


def _lines(times: list[float], ttft: float | None = 0.05) -> bytes:
    """Requests in the given (completion) order, each with its own two blocks."""
    return b"".join(
        encode_request(TraceRequest(t, 32, 4, (int(t * 1000), i), 16, ttft_s=ttft))
        for i, t in enumerate(times)
    )


def _header(offset_s: float = 0.0) -> bytes:
    return encode_header(START + timedelta(seconds=offset_s), 16, 4.0)


def _same_window(tail: RecordingTail, path: Path, length: float) -> list[TraceRequest]:
    got = tail.read()
    full = load_recorded(path)
    end = full[-1].arrival_s
    assert window(got, end, length) == window(full, end, length)
    assert all(r.arrival_s > end - tail.horizon_s for r in got)
    return got


def test_appended_lines_give_the_full_reads_window(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(_header() + _lines([1.0, 0.5, 2.0, 3.5, 3.0]))
    tail = RecordingTail(path, horizon_s=2.0)
    assert [r.arrival_s for r in _same_window(tail, path, 2.0)] == [2.0, 3.0, 3.5]
    size = path.stat().st_size
    with path.open("ab") as f:
        f.write(_lines([4.0, 3.2, 6.0, 5.5]))
    _same_window(tail, path, 2.0)
    _same_window(tail, path, 1.0)
    assert tail.bytes_read == path.stat().st_size  # each byte read once
    assert tail.bytes_read > size and tail.restarts == 0


def test_a_line_cut_short_waits_for_its_end(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    line = _lines([2.0])
    path.write_bytes(_header() + _lines([1.0]) + line[:20])
    tail = RecordingTail(path, horizon_s=10.0)
    assert [r.arrival_s for r in tail.read()] == [1.0]
    with path.open("ab") as f:
        f.write(line[20:-1])  # complete JSON, no newline yet: a full read takes it
    assert [r.arrival_s for r in _same_window(tail, path, 10.0)] == [1.0, 2.0]
    with path.open("ab") as f:
        f.write(b"\n" + _lines([3.0]))
    assert [r.arrival_s for r in _same_window(tail, path, 10.0)] == [1.0, 2.0, 3.0]


def test_truncated_or_replaced_files_are_read_again(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(_header() + _lines([1.0, 2.0, 3.0, 4.0]))
    tail = RecordingTail(path, horizon_s=5.0)
    assert len(tail.read()) == 4
    path.write_bytes(_header(60.0) + _lines([1.5]))  # truncated, rewritten shorter
    assert [r.arrival_s for r in _same_window(tail, path, 5.0)] == [1.5]
    path.write_bytes(_header(120.0) + _lines([0.5, 1.0, 7.0, 8.0, 9.0, 10.0]))  # now longer
    assert [r.arrival_s for r in _same_window(tail, path, 5.0)] == [7.0, 8.0, 9.0, 10.0]
    moved = tmp_path / "new.jsonl"  # rotated: another file under the same name
    moved.write_bytes(_header(180.0) + _lines([2.0]))
    os.replace(moved, path)
    assert [r.arrival_s for r in _same_window(tail, path, 5.0)] == [2.0]
    assert tail.restarts == 3


def test_a_restarted_gateways_segment_is_placed_by_its_header(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(_header() + _lines([1.0, 2.0]))
    tail = RecordingTail(path, horizon_s=30.0)
    tail.read()
    with path.open("ab") as f:
        f.write(_header(10.0) + _lines([0.5, 1.0]))
    got = _same_window(tail, path, 30.0)
    assert [r.arrival_s for r in got] == [1.0, 2.0, 10.5, 11.0]


def test_an_empty_file_holds_no_requests(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"")
    tail = RecordingTail(path, horizon_s=5.0)
    assert tail.read() == []
    path.write_bytes(_header() + _lines([1.0]))
    assert [r.arrival_s for r in tail.read()] == [1.0]
