"""Open-loop workloads: requests sent at scheduled times, whatever happened before.

`open_loop_chats` is the open-loop counterpart of `closed_loop_chats`: tenants' chats as a
trace whose every turn has an arrival time (`sim.traces.multi_turn_sessions`, defaults
matching the closed-loop chats'), which the simulator can replay too. `timed_requests` turns
any trace (these chats, a Mooncake slice) into streaming `/v1/completions` requests at its
arrival times, for `sim.live.client.run_open_loop`. Prompts are token ids synthesised from
the block ids (`prompt_token_ids`: equal ids, equal tokens), or, with `as_text`, one word of
the built-in tokenizer's vocabulary per id (`text_prompt`), for routers that take text only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import orjson

from routing.traces import TraceRequest
from sim.engine.tokenizer import BuiltinTokenizer
from sim.traces import multi_turn_sessions, prompt_token_ids


@dataclass(frozen=True, slots=True)
class TimedRequest:
    """One request of an open-loop run: sent at `at_s` from the run's start."""

    at_s: float
    path: str
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)


def open_loop_chats(
    *,
    seed: int = 0,
    tenants: int = 8,
    sessions: int = 48,
    turns: int = 4,
    system_tokens: int = 1500,
    user_tokens: int = 60,
    output_tokens: int = 24,
    rate_per_s: float = 2.0,
    think_s: float = 4.0,
    block_tokens: int = 16,
    model: str | None = None,
) -> list[TraceRequest]:
    """`sessions` chats spread over `tenants`, starting at `rate_per_s`, turns `think_s`
    apart on average (from the previous turn's arrival: an open loop knows no answers)."""
    return multi_turn_sessions(
        seed=seed,
        sessions=sessions,
        turns=turns,
        tenants=tenants,
        rate_per_s=rate_per_s,
        think_s=think_s,
        system_tokens=system_tokens,
        user_tokens=user_tokens,
        output_tokens=output_tokens,
        block_tokens=block_tokens,
        model=model,
    )


def text_prompt(ids: Sequence[int], vocabulary: Sequence[str]) -> str:
    """Text that the emulator's tokenizer reads back as one word per id: equal ids, equal
    words, so requests that share trace blocks share a text prefix (and its KV blocks)."""
    return "".join(vocabulary[t % len(vocabulary)] for t in ids)


def timed_requests(
    trace: Sequence[TraceRequest],
    model: str,
    *,
    as_text: bool = False,
    max_output: int | None = None,
    include_usage: bool = False,
) -> list[TimedRequest]:
    """Each trace request as a streaming completion at its arrival time: `model` unless the
    request names one, output capped at `max_output`, an `x-session-id` header for requests
    of a session; `include_usage` asks for the final usage chunk (a recording gateway then
    records the engine's own output token count)."""
    vocabulary = (
        [piece for _, piece in BuiltinTokenizer().generation_vocabulary()] if as_text else []
    )
    out = []
    for r in trace:
        ids = prompt_token_ids(r)
        output = r.output_tokens if max_output is None else min(r.output_tokens, max_output)
        body: dict[str, object] = {
            "model": r.model or model,
            "prompt": text_prompt(ids, vocabulary) if as_text else ids,
            "max_tokens": max(1, output),
            "stream": True,
        }
        if include_usage:
            body["stream_options"] = {"include_usage": True}
        headers = {"x-session-id": r.session} if r.session else {}
        out.append(TimedRequest(r.arrival_s, "/v1/completions", orjson.dumps(body), headers))
    return out
