"""A parameterised family of multi-tenant chat workloads, for live runs and the simulator.

Each tenant has a system prompt of `prefix_tokens` tokens that its chats start with; a chat
has `min_turns`..`max_turns` turns (uniform), user messages of `user_tokens` answered with
`output_tokens` tokens. Chats pick a tenant by `popularity`: `uniform`; `zipf` (weight
1 / (k + 1)^`ZIPF_EXPONENT`); `hot` (tenant 0 has `HOT_SHARE` of the chats). Cache pressure is
`tenants × prefix_tokens / fleet_kv_tokens` (`pressure`; `tenants_for_pressure` inverts it).

One seed gives one list of `Chat`s, sent live (`conversations`, closed loop, the engine's
answers fed back; `chat_requests`, open loop, `Chat.answers` as earlier answers) or simulated
(`chat_trace`: block ids chained from the very token ids the emulator sees, so both have the
same lengths and sharing, `Chat.answers` standing in for live answers). Arrivals:
`open_arrivals` (Poisson chat starts, exponential think times) or `closed_arrivals` (`clients`
users each taking the next chat when their last ended, every request lasting `latency_s`;
callers iterate to a fixed point). Text: one generation-vocabulary word a token. Pure, seeded.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import orjson

from routing.traces import TraceRequest
from sim.emulator.openai_api import render_chat
from sim.engine.tokenizer import BuiltinTokenizer
from sim.workloads.closed_loop import Conversation
from sim.workloads.open_loop import TimedRequest

POPULARITIES = ("uniform", "zipf", "hot")
HOT_SHARE = 0.3
ZIPF_EXPONENT = 1.0

Arrivals = tuple[tuple[float, ...], ...]  # per chat, per turn: seconds from the start


@dataclass(frozen=True, slots=True)
class FamilyCell:
    """The content of one workload of the family (traffic is chosen when it is sent)."""

    tenants: int
    prefix_tokens: int
    popularity: str
    conversations: int
    min_turns: int = 2
    max_turns: int = 4
    user_tokens: int = 60
    output_tokens: int = 24
    seed: int = 0

    def __post_init__(self) -> None:
        if self.popularity not in POPULARITIES:
            raise ValueError(f"popularity must be one of {POPULARITIES}, got {self.popularity!r}")
        if min(self.tenants, self.prefix_tokens, self.conversations, self.min_turns) < 1:
            raise ValueError("tenants, prefix_tokens, conversations and min_turns must be >= 1")
        if self.max_turns < self.min_turns:
            raise ValueError("max_turns must be >= min_turns")

    def pressure(self, fleet_kv_tokens: int) -> float:
        return pressure(self.tenants, self.prefix_tokens, fleet_kv_tokens)


def pressure(tenants: int, prefix_tokens: int, fleet_kv_tokens: int) -> float:
    """Distinct shared-prefix tokens over the fleet's KV capacity (tokens)."""
    return tenants * prefix_tokens / fleet_kv_tokens


def tenants_for_pressure(target: float, prefix_tokens: int, fleet_kv_tokens: int) -> int:
    """The number of tenants whose prefixes come closest to `target` pressure (at least 1)."""
    return max(1, round(target * fleet_kv_tokens / prefix_tokens))


def tenant_weights(popularity: str, tenants: int) -> list[float]:
    """Each tenant's share of the chats (summing to 1)."""
    if popularity == "uniform" or tenants == 1:
        raw = [1.0] * tenants
    elif popularity == "zipf":
        raw = [1.0 / (k + 1) ** ZIPF_EXPONENT for k in range(tenants)]
    elif popularity == "hot":
        raw = [HOT_SHARE] + [(1.0 - HOT_SHARE) / (tenants - 1)] * (tenants - 1)
    else:
        raise ValueError(f"popularity must be one of {POPULARITIES}, got {popularity!r}")
    total = sum(raw)
    return [w / total for w in raw]


@dataclass(frozen=True, slots=True)
class Chat:
    """One chat: its tenant's system prompt, the user's turns, stand-in answers."""

    id: str
    tenant: int
    system_prompt: str
    user_turns: tuple[str, ...]
    answers: tuple[str, ...]  # `output_tokens` tokens each, in place of the engine's
    output_tokens: int

    def messages(self, turn: int) -> list[dict[str, str]]:
        """The request of turn `turn` (0-based): system, earlier turns and answers, user."""
        out = [{"role": "system", "content": self.system_prompt}]
        for k in range(turn):
            out.append({"role": "user", "content": self.user_turns[k]})
            out.append({"role": "assistant", "content": self.answers[k]})
        out.append({"role": "user", "content": self.user_turns[turn]})
        return out


@cache
def _vocabulary() -> tuple[str, ...]:
    return tuple(piece for _, piece in BuiltinTokenizer().generation_vocabulary())


def _words(rng: random.Random, tokens: int) -> str:
    """`tokens` words of the generation vocabulary: exactly one token each."""
    vocabulary = _vocabulary()
    return "".join(rng.choice(vocabulary) for _ in range(tokens))


def chats(cell: FamilyCell) -> list[Chat]:
    """The cell's chats, in the order they are started."""
    rng = random.Random(cell.seed)
    prompts = [_words(rng, cell.prefix_tokens) for _ in range(cell.tenants)]
    weights = tenant_weights(cell.popularity, cell.tenants)
    out = []
    for i in range(cell.conversations):
        tenant = rng.choices(range(cell.tenants), weights)[0]
        turns = rng.randint(cell.min_turns, cell.max_turns)
        out.append(
            Chat(
                id=f"chat-{cell.seed}-{i}",
                tenant=tenant,
                system_prompt=prompts[tenant],
                user_turns=tuple(_words(rng, cell.user_tokens) for _ in range(turns)),
                answers=tuple(_words(rng, cell.output_tokens) for _ in range(turns)),
                output_tokens=cell.output_tokens,
            )
        )
    return out


def conversations(chats: Sequence[Chat]) -> list[Conversation]:
    """The chats for a closed loop (`sim.live`): the engine's answers are fed back."""
    return [
        Conversation(
            c.id, f"tenant-{c.tenant}", c.system_prompt, c.user_turns, 0.0, c.output_tokens
        )
        for c in chats
    ]


def chat_requests(chats: Sequence[Chat], arrivals: Arrivals, model: str) -> list[TimedRequest]:
    """Every turn as a streamed chat completion at its arrival time, in time order."""
    out = []
    for chat, times in zip(chats, arrivals, strict=True):
        for turn, at in enumerate(times):
            body = {
                "model": model,
                "messages": chat.messages(turn),
                "stream": True,
                "max_tokens": chat.output_tokens,
            }
            headers = {"x-session-id": chat.id}
            out.append(TimedRequest(at, "/v1/chat/completions", orjson.dumps(body), headers))
    out.sort(key=lambda r: r.at_s)
    return out


def open_arrivals(
    chats: Sequence[Chat], requests_per_s: float, think_s: float, seed: int
) -> Arrivals:
    """Chats starting as a Poisson process at `requests_per_s` / mean turns, each turn a
    think time (exponential, mean `think_s`) after the previous turn's arrival."""
    rng = random.Random(seed)
    mean_turns = sum(len(c.user_turns) for c in chats) / max(1, len(chats))
    starts_per_s = requests_per_s / mean_turns
    out = []
    start = 0.0
    for chat in chats:
        times = [start]
        for _ in chat.user_turns[1:]:
            times.append(times[-1] + rng.expovariate(1.0 / think_s))
        out.append(tuple(times))
        start += rng.expovariate(starts_per_s)
    return tuple(out)


def closed_arrivals(chats: Sequence[Chat], clients: int, latency_s: float) -> Arrivals:
    """A closed loop of `clients` users as arrival times, if every request took
    `latency_s`: a user sends a turn when the previous one ended and takes the next chat
    (in order) when its chat ended; all users start at 0."""
    free = [(0.0, c) for c in range(clients)]  # (free at, user)
    out = []
    for chat in chats:
        at, user = heapq.heappop(free)
        times = tuple(at + k * latency_s for k in range(len(chat.user_turns)))
        out.append(times)
        heapq.heappush(free, (at + len(times) * latency_s, user))
    return tuple(out)


class _BlockIds:
    """Chained ids of token blocks: one per distinct (previous block's id, tokens)."""

    def __init__(self) -> None:
        self._ids: dict[tuple[int, tuple[int, ...]], int] = {}

    def chain(self, tokens: Sequence[int], block_tokens: int) -> tuple[int, ...]:
        out: list[int] = []
        parent = -1
        for lo in range(0, len(tokens), block_tokens):
            key = (parent, tuple(tokens[lo : lo + block_tokens]))
            parent = self._ids.setdefault(key, len(self._ids))
            out.append(parent)
        return tuple(out)


class _ChatTokens:
    """Token ids of rendered chat messages, as the emulator sees them; the template renders
    message by message and every part ends in a newline, so parts tokenize separately."""

    def __init__(self) -> None:
        self._tokenizer = BuiltinTokenizer()
        self._header = render_chat([])  # what follows the last message
        self._header_ids = self._tokenizer.encode(self._header)
        self._parts: dict[tuple[str, str], list[int]] = {}

    def encode(self, messages: Sequence[dict[str, str]]) -> list[int]:
        out: list[int] = []
        for m in messages:
            key = (m["role"], m["content"])
            ids = self._parts.get(key)
            if ids is None:
                ids = self._tokenizer.encode(render_chat([m])[: -len(self._header)])
                self._parts[key] = ids
            out.extend(ids)
        out.extend(self._header_ids)
        return out


def chat_trace(
    chats: Sequence[Chat], arrivals: Arrivals, block_tokens: int = 16
) -> list[TraceRequest]:
    """Every turn as a trace request (session: the chat's id), in arrival order, its block
    ids chained over the token ids of its rendered messages."""
    tokens = _ChatTokens()
    turns = sorted(
        ((at, i, turn) for i, times in enumerate(arrivals) for turn, at in enumerate(times)),
    )
    blocks = _BlockIds()
    out = []
    for at, i, turn in turns:
        chat = chats[i]
        ids = tokens.encode(chat.messages(turn))
        out.append(
            TraceRequest(
                arrival_s=at,
                input_tokens=len(ids),
                output_tokens=chat.output_tokens,
                hash_ids=blocks.chain(ids, block_tokens),
                block_tokens=block_tokens,
                session=chat.id,
            )
        )
    return out


def closed_loop_trace(
    chats: Sequence[Chat], block_tokens: int = 16
) -> tuple[list[TraceRequest], tuple[tuple[int, ...], ...]]:
    """Every turn as a trace request for a closed-loop replay (`sim.replay.ClosedLoop`),
    chat by chat, and each chat's turns as indices into that list; the arrival times are
    the replay's to make (all 0 here)."""
    trace = chat_trace(chats, tuple((0.0,) * len(c.user_turns) for c in chats), block_tokens)
    turns = []
    start = 0
    for chat in chats:
        turns.append(tuple(range(start, start + len(chat.user_turns))))
        start += len(chat.user_turns)
    return trace, tuple(turns)
