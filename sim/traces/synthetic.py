"""Seeded synthetic traces whose prefix sharing is known by construction.

- `tenant_requests`: single requests, each a tenant's system prompt and a user message.
- `multi_turn_sessions`: chats; turn k + 1's prompt is turn k's prompt, its answer and a new
  user message. The sessions of a tenant share its system prompt.
- `agentic_loops`: tool loops; many short turns (a tool call out, a tool result back) grow one
  long context on top of a tool-definition prompt that every agent shares.

A prompt is a run of segments (a key naming the content, a length). Block i's id is looked up
from block i − 1's id and the pieces of segments inside block i, so, as in Mooncake, an equal
id at position i means an identical prefix of i + 1 blocks; the last, partial block has an id
too, and ids are numbered in order of first appearance. Lengths are uniform within ± `spread`
of their means; requests (or sessions) start as a Poisson process, a session's turns after
exponential gaps from the previous turn's arrival. Same arguments, same trace.
"""

from __future__ import annotations

import random
from collections.abc import Hashable
from dataclasses import replace

from routing.traces.request import TraceRequest

Piece = tuple[Hashable, int, int]  # (what the tokens are, from, to)


class _BlockIds:
    """Chained block ids: one per distinct (previous block's id, content), numbered as met."""

    def __init__(self, block_tokens: int) -> None:
        if block_tokens < 1:
            raise ValueError("block_tokens must be >= 1")
        self.block_tokens = block_tokens
        self._ids: dict[tuple[int, tuple[Piece, ...]], int] = {}

    def id(self, parent: int, pieces: list[Piece]) -> int:
        return self._ids.setdefault((parent, tuple(pieces)), len(self._ids))


class _Prompt:
    """A prompt grown segment by segment, its full blocks' ids kept as it grows."""

    __slots__ = ("_blocks", "_full", "_pieces", "_room", "tokens")

    def __init__(self, blocks: _BlockIds) -> None:
        self._blocks = blocks
        self._full: list[int] = []
        self._pieces: list[Piece] = []  # the partial last block
        self._room = blocks.block_tokens
        self.tokens = 0

    def extend(self, key: Hashable, tokens: int) -> _Prompt:
        """Append `tokens` tokens of content `key` (a key names one text; never reuse it)."""
        pos = 0
        while pos < tokens:
            take = min(self._room, tokens - pos)
            self._pieces.append((key, pos, pos + take))
            pos += take
            self._room -= take
            if self._room == 0:
                self._full.append(self._blocks.id(self._parent(), self._pieces))
                self._pieces, self._room = [], self._blocks.block_tokens
        self.tokens += tokens
        return self

    def copy(self) -> _Prompt:
        other = _Prompt(self._blocks)
        other._full, other._pieces = list(self._full), list(self._pieces)
        other._room, other.tokens = self._room, self.tokens
        return other

    def hash_ids(self) -> tuple[int, ...]:
        if not self._pieces:
            return tuple(self._full)
        return (*self._full, self._blocks.id(self._parent(), self._pieces))

    def request(
        self, t: float, output_tokens: int, model: str | None, session: str | None
    ) -> TraceRequest:
        return TraceRequest(
            arrival_s=t,
            input_tokens=self.tokens,
            output_tokens=output_tokens,
            hash_ids=self.hash_ids(),
            block_tokens=self._blocks.block_tokens,
            model=model,
            session=session,
        )

    def _parent(self) -> int:
        return self._full[-1] if self._full else -1


def tenant_requests(
    *,
    seed: int = 0,
    requests: int = 1000,
    tenants: int = 8,
    rate_per_s: float = 4.0,
    system_tokens: int = 2000,
    user_tokens: int = 200,
    output_tokens: int = 200,
    zipf: float = 1.0,
    block_tokens: int = 16,
    spread: float = 0.5,
    model: str | None = None,
) -> list[TraceRequest]:
    """Single requests; tenant k is picked with weight 1 / (k + 1)^zipf."""
    rng = random.Random(seed)
    blocks = _BlockIds(block_tokens)
    system = [
        _Prompt(blocks).extend(("system", k), _vary(rng, system_tokens, spread))
        for k in range(tenants)
    ]
    weights = [1.0 / (k + 1) ** zipf for k in range(tenants)]
    out: list[TraceRequest] = []
    t = 0.0
    for i in range(requests):
        tenant = rng.choices(range(tenants), weights)[0]
        prompt = system[tenant].copy().extend(("user", i), _vary(rng, user_tokens, spread))
        out.append(prompt.request(t, _vary(rng, output_tokens, spread), model, None))
        t += rng.expovariate(rate_per_s)
    return _in_arrival_order(out)


def multi_turn_sessions(
    *,
    seed: int = 0,
    sessions: int = 100,
    turns: int = 4,
    tenants: int = 4,
    rate_per_s: float = 1.0,
    think_s: float = 10.0,
    system_tokens: int = 1000,
    user_tokens: int = 100,
    output_tokens: int = 200,
    block_tokens: int = 16,
    spread: float = 0.5,
    model: str | None = None,
) -> list[TraceRequest]:
    """`sessions` chats of `turns` turns, sessions starting at `rate_per_s`, turns `think_s`
    apart on average; session keys `session-<n>`."""
    rng = random.Random(seed)
    blocks = _BlockIds(block_tokens)
    system = [
        _Prompt(blocks).extend(("system", k), _vary(rng, system_tokens, spread))
        for k in range(tenants)
    ]
    out: list[TraceRequest] = []
    start = 0.0
    for s in range(sessions):
        prompt = system[rng.randrange(tenants)].copy()
        t = start
        for k in range(turns):
            prompt.extend(("user", s, k), _vary(rng, user_tokens, spread))
            answer = _vary(rng, output_tokens, spread)
            out.append(prompt.request(t, answer, model, f"session-{s}"))
            prompt.extend(("answer", s, k), answer)
            t += rng.expovariate(1.0 / think_s)
        start += rng.expovariate(rate_per_s)
    return _in_arrival_order(out)


def agentic_loops(
    *,
    seed: int = 0,
    agents: int = 20,
    steps: int = 30,
    rate_per_s: float = 0.5,
    step_s: float = 2.0,
    system_tokens: int = 4000,
    task_tokens: int = 300,
    result_tokens: int = 300,
    output_tokens: int = 50,
    block_tokens: int = 16,
    spread: float = 0.5,
    model: str | None = None,
) -> list[TraceRequest]:
    """`agents` tool loops of `steps` short turns each, agents starting at `rate_per_s`,
    steps `step_s` apart on average; session keys `agent-<n>`."""
    rng = random.Random(seed)
    blocks = _BlockIds(block_tokens)
    tools = _Prompt(blocks).extend("tools", system_tokens)
    out: list[TraceRequest] = []
    start = 0.0
    for a in range(agents):
        prompt = tools.copy().extend(("task", a), _vary(rng, task_tokens, spread))
        t = start
        for k in range(steps):
            call = _vary(rng, output_tokens, spread)
            out.append(prompt.request(t, call, model, f"agent-{a}"))
            prompt.extend(("call", a, k), call)
            prompt.extend(("result", a, k), _vary(rng, result_tokens, spread))
            t += rng.expovariate(1.0 / step_s)
        start += rng.expovariate(rate_per_s)
    return _in_arrival_order(out)


def _vary(rng: random.Random, mean: int, spread: float) -> int:
    return max(1, round(mean * (1.0 + spread * rng.uniform(-1.0, 1.0))))


def _in_arrival_order(requests: list[TraceRequest]) -> list[TraceRequest]:
    """Sorted by arrival, ids renumbered in order of first appearance (as Mooncake's are)."""
    requests.sort(key=lambda r: r.arrival_s)
    ids: dict[int, int] = {}
    return [
        replace(r, hash_ids=tuple([ids.setdefault(h, len(ids)) for h in r.hash_ids]))
        for r in requests
    ]
