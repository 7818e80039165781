"""Open-loop workloads: chats as a trace, any trace as timed streaming completions."""

from __future__ import annotations

import orjson

from routing.traces import TraceRequest
from sim.engine.tokenizer import BuiltinTokenizer
from sim.traces import prompt_token_ids
from sim.workloads import open_loop_chats, text_prompt, timed_requests


def test_text_prompt_reads_back_as_one_word_per_id_and_keeps_shared_prefixes() -> None:
    tokenizer = BuiltinTokenizer()
    vocabulary = [piece for _, piece in tokenizer.generation_vocabulary()]
    a = text_prompt([5000, 7, 123456, 42], vocabulary)
    b = text_prompt([5000, 7, 99], vocabulary)
    assert len(tokenizer.encode(a)) == 4
    ids_a, ids_b = tokenizer.encode(a), tokenizer.encode(b)
    assert ids_a[:2] == ids_b[:2]
    assert ids_a[2] != ids_b[2]


def test_open_loop_chats_are_sessions_of_turns_in_arrival_order() -> None:
    trace = open_loop_chats(seed=3, sessions=5, turns=3, tenants=2)
    assert len(trace) == 15
    assert [r.arrival_s for r in trace] == sorted(r.arrival_s for r in trace)
    assert len({r.session for r in trace}) == 5
    assert trace == open_loop_chats(seed=3, sessions=5, turns=3, tenants=2)


def test_timed_requests_send_token_ids_at_the_arrivals_with_the_session() -> None:
    trace = open_loop_chats(seed=1, sessions=3, turns=2, tenants=1, output_tokens=8)
    requests = timed_requests(trace, "m", include_usage=True)
    assert [r.at_s for r in requests] == [r.arrival_s for r in trace]
    for req, tr in zip(requests, trace, strict=True):
        body = orjson.loads(req.body)
        assert req.path == "/v1/completions"
        assert body["model"] == "m" and body["stream"] is True
        assert body["prompt"] == prompt_token_ids(tr)
        assert body["max_tokens"] == tr.output_tokens
        assert body["stream_options"] == {"include_usage": True}
        assert req.headers == {"x-session-id": tr.session}


def test_text_prompts_and_capped_outputs_without_a_session() -> None:
    trace = [TraceRequest(0.5, 40, 300, (1, 2, 3), block_tokens=16)]
    [req] = timed_requests(trace, "m", as_text=True, max_output=16)
    body = orjson.loads(req.body)
    assert isinstance(body["prompt"], str)
    assert len(BuiltinTokenizer().encode(body["prompt"])) == 40
    assert body["max_tokens"] == 16
    assert "stream_options" not in body
    assert req.headers == {}
