from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import orjson
import pytest

from gateway.inference_request import InferenceRequest, parse_inference_body
from gateway.recorder import TraceRecorder
from kvgate.cli import build_parser
from kvgate.cli.effective import effective_config
from routing.traces import TraceRequest, load_recorded
from routing.traces.recorded import encode_request

SYSTEM = "You are a helpful assistant for the quarterly planning of the orchard. " * 4


def _chat(*contents: str, api: str = "chat") -> InferenceRequest:
    roles = ["system", *(["user", "assistant"] * len(contents))]
    messages = [{"role": r, "content": c} for r, c in zip(roles, (SYSTEM, *contents), strict=False)]
    field = "messages" if api == "chat" else "input"
    return parse_inference_body(api, orjson.dumps({"model": "m1", field: messages}))


PROMPT = b'{"model": "m1", "prompt": "hi"}'  # no full block: as short a line as it gets


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _recorder(path: Path, clock: FakeClock, **kw: object) -> TraceRecorder:
    return TraceRecorder(path, block_tokens=16, chars_per_token=4.0, clock=clock, **kw)  # type: ignore[arg-type]


async def _stop(rec: TraceRecorder, task: asyncio.Task[None]) -> None:
    """As the app's lifespan does at shutdown."""
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    rec.close()


async def test_lines_written_in_the_background_and_at_shutdown(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    clock = FakeClock()
    rec = _recorder(path, clock, flush_interval_s=0.01)
    rec.open()
    task = asyncio.create_task(rec.run())
    turn1 = _chat("plan the apple harvest")
    turn2 = _chat("plan the apple harvest", "Here is a plan. " * 8, "now the pears")
    rec.record(turn1, arrival=100.5, session="s1", output_tokens=7)
    for _ in range(200):  # flushed while running
        await asyncio.sleep(0.01)
        if path.read_bytes().count(b"\n") == 2:
            break
    assert path.read_bytes().count(b"\n") == 2
    rec.record(turn2, arrival=101.0, session="s1", output_tokens=None)
    rec.record(_chat("x", api="responses"), arrival=101.5, session=None, output_tokens=3)
    await _stop(rec, task)  # the last lines are flushed on the way out

    first, second, third = load_recorded(path)
    assert (first.arrival_s, first.model, first.session, first.output_tokens) == (
        0.5,
        "m1",
        "s1",
        7,
    )
    assert (second.arrival_s, second.output_tokens, third.output_tokens) == (1.0, 0, 3)
    assert first.block_tokens == 16
    assert first.input_tokens > 0 and len(first.hash_ids) == first.input_tokens // 16
    assert second.hash_ids[: len(first.hash_ids)] == first.hash_ids
    assert len(second.hash_ids) > len(first.hash_ids)
    text = path.read_text()
    assert "orchard" not in text and "apple" not in text and "pears" not in text


async def test_embeddings_are_not_recorded_and_ids_are_keyed(tmp_path: Path) -> None:
    clock = FakeClock()
    recs = [_recorder(tmp_path / f"{n}.jsonl", clock, key=key) for n, key in enumerate((1, 1, 2))]
    for rec in recs:
        rec.open()
        rec.record(_chat("hello there " * 10), arrival=100.0, session=None, output_tokens=1)
        embed = parse_inference_body("embeddings", b'{"model": "m1", "input": "hello"}')
        rec.record(embed, arrival=100.0, session=None, output_tokens=None)
        await _stop(rec, asyncio.create_task(rec.run()))
    a, b, c = ([r.hash_ids for r in load_recorded(rec.path)] for rec in recs)
    assert len(a) == 1 and a[0]
    assert a == b  # same key, same ids
    assert not set(a[0]) & set(c[0])  # another recording's key, other ids


async def test_append_to_an_existing_recording(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    clock = FakeClock()
    for _ in range(2):
        rec = _recorder(path, clock)
        rec.open()
        rec.record(_chat("hi"), arrival=clock.now + 1.0, session=None, output_tokens=1)
        await _stop(rec, asyncio.create_task(rec.run()))
    assert path.read_text().count('"kvgate_trace"') == 2
    assert len(load_recorded(path)) == 2


def test_unwritable_path_fails_at_open(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        _recorder(tmp_path / "missing-dir" / "rec.jsonl", FakeClock()).open()


class BrokenFile:
    def write(self, data: bytes) -> int:
        raise OSError(28, "No space left on device")

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


async def test_a_write_error_stops_the_recording(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rec = _recorder(tmp_path / "rec.jsonl", FakeClock(), flush_interval_s=0.01)
    rec.open()
    assert rec._file is not None
    rec._file.close()
    rec._file = BrokenFile()  # type: ignore[assignment]
    task = asyncio.create_task(rec.run())
    with caplog.at_level(logging.WARNING, logger="gateway.recorder"):
        for _ in range(3):
            rec.record(_chat("hi"), arrival=100.0, session=None, output_tokens=1)
            await asyncio.sleep(0.05)
        await _stop(rec, task)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "No space left" in errors[0].getMessage()
    assert "dropped 3" in caplog.records[-1].getMessage()


async def test_a_full_buffer_drops_lines(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "rec.jsonl"
    line = len(encode_request(TraceRequest(0.0, 1, 1, (), block_tokens=16, model="m1")))
    rec = _recorder(path, FakeClock(), max_buffered_bytes=3 * line + 1)
    rec.open()
    with caplog.at_level(logging.WARNING, logger="gateway.recorder"):
        for _ in range(10):
            rec.record(
                parse_inference_body("completions", PROMPT),
                arrival=100.0,
                session=None,
                output_tokens=1,
            )
        await _stop(rec, asyncio.create_task(rec.run()))
    kept = len(load_recorded(path))
    assert kept == 3
    assert [r.levelno for r in caplog.records].count(logging.ERROR) == 1
    assert f"dropped {10 - kept}" in caplog.records[-1].getMessage()


def test_serve_record_flag_sets_the_config_field() -> None:
    args = build_parser().parse_args(["serve", "--backend", "http://a:1", "--record", "t.jsonl"])
    assert effective_config(args).server.record_path == "t.jsonl"
    args = build_parser().parse_args(["serve", "--backend", "http://a:1"])
    assert effective_config(args).server.record_path is None
