from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from routing.traces import TraceFormatError, TraceRequest, detect_format, load_trace
from routing.traces.recorded import encode_header, encode_request
from tests.support.public_traces import AZURE_CODE as AZURE
from tests.support.public_traces import MOONCAKE

MOONCAKE_LINE = '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [0]}\n'


def test_real_files_are_detected_and_loaded() -> None:
    assert detect_format(MOONCAKE) == "mooncake"
    assert detect_format(AZURE) == "azure"
    assert len(load_trace(MOONCAKE, limit=10)) == 10
    azure = load_trace(AZURE)
    assert len(azure) == 8_819
    assert azure[-1].arrival_s == pytest.approx(3436, abs=0.1)


def test_detection_by_first_line(tmp_path: Path) -> None:
    csv = tmp_path / "azure.txt"
    csv.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.97,1,1\n")
    moon = tmp_path / "trace.data"
    moon.write_text("\n" + MOONCAKE_LINE)
    rec = tmp_path / "rec.jsonl"
    req = TraceRequest(0.1, 5, 1, (), block_tokens=16)
    rec.write_bytes(encode_header(datetime.now(UTC), 16, 4.0) + encode_request(req))
    assert [detect_format(p) for p in (csv, moon, rec)] == ["azure", "mooncake", "kvgate"]
    assert load_trace(rec) == [req]
    assert load_trace(moon, format="mooncake")[0].input_tokens == 5


def test_load_trace_sorts_by_arrival(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text(MOONCAKE_LINE.replace('"timestamp": 0', '"timestamp": 900') + MOONCAKE_LINE)
    assert [r.arrival_s for r in load_trace(path)] == [0.0, 0.9]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "empty file"),
        ("\n\n", "empty file"),
        ("hello\n", "cannot tell the trace format"),
        ('{"prompt": "x"}\n', "cannot tell the trace format"),
        ("{oops\n", "first line is not valid JSON"),
    ],
)
def test_undetectable(tmp_path: Path, text: str, why: str) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text(text)
    with pytest.raises(TraceFormatError, match=why) as info:
        load_trace(path)
    assert str(info.value).startswith(str(path))


def test_unknown_format_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown trace format 'parquet'"):
        load_trace(tmp_path / "x", format="parquet")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_trace(tmp_path / "absent.jsonl")
