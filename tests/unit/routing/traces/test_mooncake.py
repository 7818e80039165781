from __future__ import annotations

import math
from pathlib import Path

import pytest

from routing.traces import MOONCAKE_BLOCK_TOKENS, TraceFormatError, load_mooncake
from tests.support.public_traces import MOONCAKE as CONVERSATION


def test_conversation_trace() -> None:
    assert CONVERSATION.is_file(), f"missing {CONVERSATION}"
    reqs = load_mooncake(CONVERSATION)
    assert len(reqs) == 12_031
    first = reqs[0]
    assert (first.arrival_s, first.input_tokens, first.output_tokens) == (0.0, 6758, 500)
    assert first.hash_ids == tuple(range(14))
    assert all(len(r.hash_ids) == math.ceil(r.input_tokens / 512) for r in reqs)
    assert all(r.block_tokens == MOONCAKE_BLOCK_TOKENS for r in reqs)
    assert all(r.hash_ids[0] == 0 for r in reqs)  # every request shares the first block
    arrivals = [r.arrival_s for r in reqs]
    assert arrivals == sorted(arrivals)
    assert arrivals[-1] == pytest.approx(3536.999)
    assert sum(len(r.hash_ids) for r in reqs) == 288_500
    assert len({h for r in reqs for h in r.hash_ids}) == 182_790


def test_equal_ids_are_one_object() -> None:
    reqs = load_mooncake(CONVERSATION, limit=50)
    assert len(reqs) == 50
    assert all(r.hash_ids[0] is reqs[0].hash_ids[0] for r in reqs)


def _write(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


ROW = '"timestamp": 0, "input_length": 5, "output_length": 1'
GOOD = '{"timestamp": 1500, "input_length": 600, "output_length": 7, "hash_ids": [0, 1]}'


def test_small_file_and_blank_lines(tmp_path: Path) -> None:
    [r] = load_mooncake(_write(tmp_path, GOOD, ""))
    assert (r.arrival_s, r.input_tokens, r.output_tokens, r.hash_ids) == (1.5, 600, 7, (0, 1))


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ("{not json", "invalid JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"timestamp": 0, "input_length": 5, "output_length": 1}', "missing field 'hash_ids'"),
        ('{"timestamp": -1, "input_length": 5, "output_length": 1, "hash_ids": []}', "timestamp"),
        ('{"timestamp": 0, "input_length": "5", "output_length": 1, "hash_ids": []}', "input_len"),
        ("{" + ROW + ', "hash_ids": [1, "x"]}', "hash_ids"),
        ("{" + ROW + ', "hash_ids": [true]}', "hash_ids"),
        ("{" + ROW + ', "hash_ids": {"0": 1}}', "hash_ids"),
    ],
)
def test_malformed_lines_name_file_and_line(tmp_path: Path, bad: str, why: str) -> None:
    path = _write(tmp_path, GOOD, bad)
    with pytest.raises(TraceFormatError, match=why) as info:
        load_mooncake(path)
    assert str(info.value).startswith(f"{path}:2: ")
    assert info.value.line == 2
