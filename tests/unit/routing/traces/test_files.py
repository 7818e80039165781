from __future__ import annotations

import gzip
import lzma
from pathlib import Path

import pytest

from routing.traces import detect_format, load_trace
from routing.traces.files import open_trace, plain_name

LINE = b'{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [0]}\n'
CSV = b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.97,7,1\n"


@pytest.mark.parametrize("compress", [bytes, gzip.compress, lzma.compress])
def test_compression_is_told_by_the_bytes_not_the_name(tmp_path: Path, compress: object) -> None:
    path = tmp_path / "trace.data"
    path.write_bytes(compress(LINE))  # type: ignore[operator]
    with open_trace(path) as f:
        assert f.read() == LINE
    assert detect_format(path) == "mooncake"
    assert [r.input_tokens for r in load_trace(path)] == [5]


def test_a_gzip_csv_is_azure_by_its_suffix(tmp_path: Path) -> None:
    path = tmp_path / "code.csv.gz"
    path.write_bytes(gzip.compress(CSV))
    assert plain_name(path).name == "code.csv"
    assert detect_format(path) == "azure"
    assert [r.input_tokens for r in load_trace(path)] == [7]


def test_a_recording_reads_compressed(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from routing.traces.recorded import encode_header, encode_request

    plain = tmp_path / "plain.jsonl"
    packed = tmp_path / "packed.jsonl.gz"
    reqs = load_trace(_mooncake(tmp_path))
    body = encode_header(datetime(2026, 1, 1, tzinfo=UTC), 16, 4.0) + b"".join(
        map(encode_request, reqs)
    )
    plain.write_bytes(body)
    packed.write_bytes(gzip.compress(body))
    assert load_trace(packed) == load_trace(plain)


def _mooncake(tmp_path: Path) -> Path:
    path = tmp_path / "m.jsonl"
    path.write_bytes(LINE)
    return path
