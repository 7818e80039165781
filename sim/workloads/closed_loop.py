"""Closed-loop synthetic chats: tenants with long shared system prompts, multi-turn chats.

Closed loop: a conversation has a start time, and each later turn is sent when the answer to
the previous one is complete (`sim.live.client.run_closed_loop`), carrying the whole
history, so the offered load follows the system's speed. Pure and seeded: the same
arguments give the same conversations, text included. Text is made of common short English
words, so the built-in tokenizer sees ~4 characters a token.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

_TEXT = (
    "the of and to in is you that it he was for on are as with his they at be this have "
    "from or one had by word but not what all were we when your can said there use an "
    "each which she do how their if will up other about out many then them these so some "
    "her would make like him into time has look two more write go see number no way could "
    "people my than first water been call who oil its now find long down day did get come "
    "made may part over new sound take only little work know place year live me back give "
    "most very after thing our just name good sentence man think say great where help "
    "through much before line right too mean old any same tell boy follow came want show "
    "also around form three small set put end does another well large must big even such "
    "because turn here"
)
_WORDS = tuple(_TEXT.split())


def synth_text(rng: random.Random, tokens: int) -> str:
    """About `tokens` tokens of filler text (one short word ≈ one token with its space)."""
    return " ".join(rng.choice(_WORDS) for _ in range(max(1, tokens)))


@dataclass(frozen=True, slots=True)
class Conversation:
    """One chat: its tenant's system prompt, the user's turns, when it starts."""

    id: str
    tenant: str
    system_prompt: str
    user_turns: tuple[str, ...]
    start_s: float  # offset from the start of the run
    output_tokens: int


def closed_loop_chats(
    *,
    seed: int = 0,
    tenants: int = 8,
    conversations: int = 48,
    turns: int = 4,
    system_tokens: int = 1500,
    user_tokens: int = 60,
    output_tokens: int = 24,
    rate_per_s: float = 2.0,
) -> list[Conversation]:
    """`conversations` chats spread over `tenants` (each with its own system prompt), starting
    as a Poisson process of `rate_per_s`; each chat has `turns` user messages."""
    rng = random.Random(seed)
    prompts = [
        f"You are assistant {t} of tenant {t}. " + synth_text(rng, system_tokens)
        for t in range(tenants)
    ]
    out = []
    start = 0.0
    for c in range(conversations):
        tenant = rng.randrange(tenants)
        out.append(
            Conversation(
                id=f"conv-{seed}-{c}",
                tenant=f"tenant-{tenant}",
                system_prompt=prompts[tenant],
                user_turns=tuple(synth_text(rng, user_tokens) for _ in range(turns)),
                start_s=start,
                output_tokens=output_tokens,
            )
        )
        start += rng.expovariate(rate_per_s)
    return out
