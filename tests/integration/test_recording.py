"""`server.record_path`: the gateway records a multi-turn chat; the trace loads and replays."""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import orjson

from gateway.prompt_bytes import prompt_bytes
from routing.traces import load_trace
from tests.integration.conftest import StartGateway
from tests.support.fixture_types import StartEngines

SYSTEM = "You are the archivist of the lighthouse museum. " + "Answer in verse. " * 20
QUESTIONS = (
    "Who kept the lamp in the winter of the great storm?",
    "And what became of the keeper's logbook?",
    "Write the logbook's last entry as a sonnet, please.",
)


def _answer(c: httpx.Client, messages: list[dict[str, str]], stream: bool, usage: bool) -> str:
    body: dict[str, Any] = {"model": "m1", "messages": messages, "stream": stream}
    if usage:
        body["stream_options"] = {"include_usage": True}
    headers = {"x-session-id": "chat-1"}
    if not stream:
        r = c.post("/v1/chat/completions", json=body, headers=headers)
        assert r.status_code == 200
        return str(r.json()["choices"][0]["message"]["content"])
    with c.stream("POST", "/v1/chat/completions", json=body, headers=headers) as r:
        assert r.status_code == 200
        lines = [ln for ln in r.iter_lines() if ln.startswith("data: {")]
    chunks = [orjson.loads(ln[6:]) for ln in lines]
    assert ("usage" in chunks[-1] and chunks[-1]["usage"] is not None) == usage
    return "".join(ch["choices"][0]["delta"].get("content") or "" for ch in chunks if ch["choices"])


def test_multi_turn_chat_is_recorded_without_text(
    fake_engines: StartEngines,
    start_gateway: StartGateway,
    client: Callable[..., httpx.Client],
    tmp_path: Path,
) -> None:
    (_, s1), (_, s2) = fake_engines(2, tokens=4)
    path = tmp_path / "trace.jsonl"
    _, gw = start_gateway([s1.url, s2.url], policy="session", server={"record_path": str(path)})
    c = client(gw)
    messages = [{"role": "system", "content": SYSTEM}]
    sent = []
    # turn 1 plain JSON, turn 2 a stream with a usage chunk, turn 3 a stream without one
    modes = ((False, False), (True, True), (True, False))
    for question, (stream, usage) in zip(QUESTIONS, modes, strict=True):
        messages.append({"role": "user", "content": question})
        sent.append(list(messages))
        answer = _answer(c, messages, stream, usage)
        assert answer.count("tok") == 4
        messages.append({"role": "assistant", "content": answer})
    # Not recorded: an error, an embedding.
    r = c.post("/v1/chat/completions", json={"model": "nope", "messages": messages})
    assert r.status_code == 404
    assert c.post("/v1/embeddings", json={"model": "m1", "input": "hello"}).status_code == 200
    gw.stop()

    trace = load_trace(path)
    assert len(trace) == 3
    assert [r.output_tokens for r in trace] == [4, 4, 4]  # usage, usage chunk, counted events
    assert {(r.model, r.session, r.block_tokens) for r in trace} == {("m1", "chat-1", 16)}
    arrivals = [r.arrival_s for r in trace]
    assert arrivals == sorted(arrivals) and 0 <= arrivals[0] < 60
    for req, msgs in zip(trace, sent, strict=True):
        data = prompt_bytes("chat", msgs)
        assert req.input_tokens == int(len(data) / 4)
        assert len(req.hash_ids) == len(data) // 64  # full 16-token blocks of 4 bytes a token
    for prev, nxt in pairwise(trace):
        assert nxt.hash_ids[: len(prev.hash_ids)] == prev.hash_ids
        assert len(nxt.hash_ids) > len(prev.hash_ids)
    text = path.read_text()
    for words in (SYSTEM[:30], *QUESTIONS, "tok0", "verse"):
        assert words not in text
