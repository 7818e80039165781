from __future__ import annotations

from pathlib import Path

import pytest

from routing.traces import TraceFormatError, load_azure
from tests.support.public_traces import AZURE_CODE as CODE


def test_code_trace() -> None:
    assert CODE.is_file(), f"missing {CODE}"
    reqs = load_azure(CODE)
    assert len(reqs) == 8_819
    first = reqs[0]
    assert (first.arrival_s, first.input_tokens, first.output_tokens) == (0.0, 4808, 10)
    assert reqs[1].arrival_s == pytest.approx(0.052)  # 18:17:04.0319600 - 18:17:03.9799600
    assert reqs[-1].arrival_s == pytest.approx(3435.948056)
    assert (reqs[-1].input_tokens, reqs[-1].output_tokens) == (549, 173)
    assert all(r.hash_ids == () and r.session is None for r in reqs)
    assert sum(r.input_tokens for r in reqs) / len(reqs) == pytest.approx(2048, abs=1)
    assert max(r.input_tokens for r in reqs) == 7437


def test_limit() -> None:
    assert [r.input_tokens for r in load_azure(CODE, limit=2)] == [4808, 3180]


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(text)
    return path


def test_seven_digit_and_shorter_fractions(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:17:03.9799600,10,1\n"
        "2023-11-16 18:17:05,20,2\n"
        "2023-11-16 18:17:05.5,30,3",
    )
    assert [r.arrival_s for r in load_azure(path)] == pytest.approx([0.0, 1.02004, 1.52004])


def test_wrong_header(tmp_path: Path) -> None:
    path = _write(tmp_path, "time,in,out\n2023-11-16 18:17:03.97,1,1\n")
    with pytest.raises(TraceFormatError, match=r":1: expected the header"):
        load_azure(path)


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ("2023-11-16 18:17:04.0,12", "expected 3 comma-separated fields"),
        ("yesterday,12,3", "TIMESTAMP 'yesterday'"),
        ("2023-11-16 18:17:04.0,-12,3", "ContextTokens"),
        ("2023-11-16 18:17:04.0,12,many", "GeneratedTokens"),
    ],
)
def test_malformed_lines_name_file_and_line(tmp_path: Path, bad: str, why: str) -> None:
    path = _write(
        tmp_path, f"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.0,1,1\n{bad}\n"
    )
    with pytest.raises(TraceFormatError, match=why) as info:
        load_azure(path)
    assert str(info.value).startswith(f"{path}:3: ")
